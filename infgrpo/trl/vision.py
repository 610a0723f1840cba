"""A TRL run of a vision-language model, converted: how the model is recognised and what changes in its config.

    vlm, how = recognise_vlm("Qwen/Qwen2.5-VL-3B-Instruct", flag=None)   # its config read (a local folder, the cache)
    vlm, how = recognise_vlm("Qwen/Qwen2.5-VL-3B-Instruct", flag=True)   # python -m infgrpo.from_trl ... --vlm
    convert_vision(trl, out, notes, how)                                 # after the field transforms

TRL 1.16 has no image settings in its ``GRPOConfig``: it knows a vision-language run by its ``processing_class`` (a
``ProcessorMixin``, which ``AutoProcessor`` gives for such a model), reads the dataset's ``image``/``images`` columns as
they are, and takes the pixel settings on the processor the script builds. So the converter carries over the model,
the data and its image columns unchanged (infgrpo reads TRL's columns by the same names and loads the model's
processor when the rows hold images), and says what differs:

- the pixels: ``data.processor_kwargs`` (``{min_pixels, max_pixels}`` for Qwen-VL), the keyword arguments of TRL's
  ``AutoProcessor.from_pretrained``, which a TRL config file cannot hold;
- the vision tower: TRL trains it where peft's ``all-linear`` reaches it (or in full fine-tuning), infgrpo freezes it
  by default; ``model.policy.train_vision_tower: true`` is written where TRL's run trains it;
- ``max_prompt_length``: TRL 1.16 has no such field; older TRL cut prompts from the left, which could cut image
  tokens (TRL's docs told VLM users to leave it None, and TRL 0.23 stopped protecting them: huggingface/trl#4153).
  infgrpo never cuts: ``data.max_prompt_length`` counts the image tokens and a longer prompt stops the run, or is
  left out (``data.long_prompts: skip``);
- ``use_transformers_continuous_batching``: TRL refuses it for a vision-language model; infgrpo decodes images on its
  engine (the baseline decoders are refused with image prompts).

A model is a vision-language one when its config has a ``vision_config``
(:func:`~infgrpo.vision.families.is_vision_config`, read from a local folder, the shipped ``tiny-vl`` or the Hugging
Face cache), or when the user says so (``--vlm``).
"""

from __future__ import annotations

import re

from infgrpo.policy.model_config import load_model_config
from infgrpo.settings import ConfigError
from infgrpo.trl.keys import Keys
from infgrpo.trl.trl_settings import TrlSettings
from infgrpo.vision.families import is_vision_config

QWEN_PIXELS = "{min_pixels: 200704, max_pixels: 401408}"
"""Qwen-VL's pixel settings as configs/qwen2.5-vl.yaml sets them (256 to 512 image tokens of 28 x 28 pixels)."""


def recognise_vlm(model: str | None, flag: bool | None = None) -> tuple[bool, str]:
    """(whether ``model`` is a vision-language model, how that was decided): ``flag`` when given (``--vlm``), else
    its config (a ``vision_config``), read without loading weights; a config that cannot be read (a hub id not in the
    cache, offline) counts as a text model, and the reason says ``--vlm`` decides it."""
    if flag is not None:
        return flag, "--vlm" if flag else "--vlm not given"
    if not model:
        return False, "no model_name_or_path"
    try:
        config = load_model_config(model)
    except ConfigError:
        return False, f"the config of {model!r} could not be read here (pass --vlm for a vision-language model)"
    vision = is_vision_config(config)
    return vision, f"its config ({config.model_type}{', a vision_config' if vision else ''})"


VLM_NAME = re.compile(r"(?i)(?:^|[-_/.])(?:vl|vlm|vision|idefics\d*|smolvlm\d*|llava[\w-]*)(?:$|[-_/.])")
"""Names that look like a vision-language model's (``Qwen2.5-VL-3B``, ``SmolVLM2``, ``Idefics3``): a hint only."""


def unread_vlm_hint(model: str | None, how: str) -> str | None:
    """A note for a model whose config could not be read here and whose name looks like a vision-language model's:
    ``--vlm`` converts it as one. None otherwise."""
    if not model or not how.startswith("the config of") or not VLM_NAME.search(model):
        return None
    return (
        f"model_name_or_path={model!r} looks like a vision-language model, but its config could not be read here; "
        "converted as a text model: pass --vlm (convert(..., vlm=True)) for the notes and keys of an image run"
    )


def trains_vision_tower(trl: TrlSettings) -> bool:
    """Whether TRL's run trains the vision tower: full fine-tuning trains every weight, and peft's ``all-linear``
    reaches the tower's linear layers too; a list of module names is matched as peft matches it (left as it is)."""
    if not trl["use_peft"]:
        return True
    targets = trl["lora_target_modules"]
    return targets == "all-linear" or targets == ["all-linear"]


def convert_vision(trl: TrlSettings, out: Keys, notes: list[str], how: str) -> None:
    """The keys and notes of a vision-language run (module docstring), after the field transforms wrote the rest."""
    model = trl["model_name_or_path"]
    notes.append(
        f"model_name_or_path={model!r} is a vision-language model ({how}): python -m infgrpo.fit loads it through "
        "AutoModelForImageTextToText with its processor (data.tokenizer follows the model) when the rows hold images; "
        "the dataset's image/images columns are TRL's and are read as they are (a conversational prompt is needed, as "
        "in TRL: a script's make_conversation is data.prompt_column + data.as_conversation + data.system_prompt)"
    )
    notes.append(
        "TRL's GRPOConfig has no image settings (TRL takes them on the AutoProcessor passed as processing_class): set "
        f"the pixels with data.processor_kwargs, e.g. {QWEN_PIXELS} for Qwen-VL or {{size: {{longest_edge: 512}}}} "
        "for SmolVLM; the processor's saved settings otherwise"
    )
    if trains_vision_tower(trl):
        out.put("model.policy.train_vision_tower", True, True)
        what = "full fine-tuning trains every weight" if not trl["use_peft"] else "peft's all-linear reaches it"
        notes.append(
            f"the vision tower trains in TRL's run ({what}): model.policy.train_vision_tower: true does the same; "
            "false (infgrpo's default) freezes the tower and its projector, and costs less"
        )
    if trl.is_set("max_prompt_length"):
        notes.append(
            f"max_prompt_length={trl['max_prompt_length']} with images: TRL 1.16 has no such field, and older TRL's "
            "cut from the left could cut image tokens (TRL's docs advised None for VLMs); infgrpo never cuts: "
            "data.max_prompt_length counts the image tokens, a longer prompt stops the run (data.long_prompts: skip "
            "leaves it out)"
        )
    else:
        notes.append(
            f"data.max_prompt_length={out.get('data.max_prompt_length') or out.default('data.max_prompt_length')} "
            "counts the image tokens too (Qwen2.5-VL's processor gives up to 1,280 a picture by default): raise it, "
            "or bound the pixels with data.processor_kwargs; the command line measures the first rows before loading"
        )
    if trl["use_transformers_continuous_batching"]:
        notes.append(
            "use_transformers_continuous_batching=True: TRL 1.16 refuses it for a vision-language model (it does not "
            "support multimodal models); infgrpo decodes image prompts on its engine (model.sampler.decoder: engine)"
        )
