"""Turn a TRL ``GRPOConfig`` (TRL 1.16, with its command line's model, dataset and reward arguments) into an infgrpo
config file for ``python -m infgrpo.fit``.

    python -m infgrpo.from_trl trl_config.yaml                    # the infgrpo YAML on stdout, the notes on stderr
    python -m infgrpo.from_trl trl_config.yaml -o infgrpo.yaml    # written to a file, the notes as # comments on top
    python -m infgrpo.from_trl trl_config.yaml --strict           # keys that are not TRL's refused, not left out
    python -m infgrpo.from_trl trl_vlm.yaml --vlm                 # a vision-language model (else its config says)
    python -m infgrpo.fit --config infgrpo.yaml

    from trl import GRPOConfig
    from infgrpo.from_trl import convert
    result = convert(GRPOConfig(output_dir="out", num_generations=16))   # or a mapping: a TRL config file's fields
    result.config["model"]["group_size"]      # 16: the nested infgrpo config, ready for YAML
    result.notes                               # every TRL setting not carried over (and why), every transform
    print(result.yaml())

The input is what ``trl grpo --config trl_config.yaml`` reads: the fields of TRL 1.16's ``GRPOConfig`` (its
``TrainingArguments`` included), ``ModelConfig`` (``model_name_or_path``, ``dtype``, ``use_peft``, ``lora_*``, 4-bit
loading), the ``grpo`` script's arguments (``dataset_name``, ``reward_funcs``, ...), ``DatasetMixtureConfig`` and
the file's ``env`` block. :data:`~infgrpo.trl.fields.TRL_FIELDS` is the one table of where each goes: a tuple of
infgrpo's dotted keys, or the reason it has none; :func:`markdown_table` renders it (``docs/from_trl.md``). A key
infgrpo's default already gives is not written, unless the TRL config set it; TRL's defaults that differ from
infgrpo's (the learning rate, ``loss_type: dapo``, the seed, three epochs, ...) are written out, so the run is
TRL's. Keys real config files hold beside TRL 1.16's fields (older names such as ``torch_dtype``, recipe scripts'
arguments such as ``system_prompt``, launcher keys: :data:`~infgrpo.trl.other_keys.OTHER_GROUPS`) are mapped or named;
any other key is left out and named, as TRL's parser ignores it (``strict=True``, ``--strict``: refused).

TRL's defaults are read from the installed ``trl`` (from a checkout: ``pip install -e ".[trl]"``, TRL 1.16.0).

This module is the command; the TRL wing (:mod:`infgrpo.trl`) holds the table, TRL's defaults, the keys being
written and the transforms. What needs the command line's classes (``GRPOModule``, its settings groups,
``PromptDataModule``, Lightning's ``Trainer``) is here, above them: :func:`config_keys`, the shape of the config.
"""

from __future__ import annotations

import argparse
import dataclasses
import difflib
import functools
import inspect
import json
import sys
import textwrap
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

import yaml

from infgrpo.trl.fields import FIELD_GROUPS, TRL_FIELDS, TRL_VERSION, ConversionError, Target
from infgrpo.trl.how import HOW
from infgrpo.trl.keys import Keys, default
from infgrpo.trl.other_keys import OTHER_GROUPS, OTHER_KEYS, RENAMED
from infgrpo.trl.transforms import TRANSFORMS
from infgrpo.trl.trl_settings import TrlSettings, trl_defaults
from infgrpo.trl.vision import convert_vision, recognise_vlm, unread_vlm_hint


@dataclasses.dataclass
class Conversion:
    """An infgrpo config converted from TRL's settings, and the notes on what changed on the way."""

    config: dict[str, Any]
    """The nested infgrpo config: ``{"seed_everything": ..., "trainer": {...}, "model": {...}, "data": {...}}``."""
    notes: list[str]
    """Every set TRL field that has no infgrpo key, with the reason, and every transform worth telling."""

    def yaml(self, source: str | None = None) -> str:
        """The config as YAML for ``python -m infgrpo.fit --config``, the notes as ``#`` comments on top."""
        head = f"# infgrpo config converted from TRL {TRL_VERSION}'s GRPOConfig"
        head += f" ({source})" if source else ""
        lines = [head + " by python -m infgrpo.from_trl", "#"]
        for note in self.notes:
            lines += textwrap.wrap(note, 118, initial_indent="# - ", subsequent_indent="#   ", break_on_hyphens=False)
        body = yaml.safe_dump(self.config, sort_keys=False, default_flow_style=False, allow_unicode=True)
        return "\n".join(lines) + "\n" + body


@functools.cache
def config_keys(path: str) -> dict[str, Any]:
    """The keys under ``path`` of a ``python -m infgrpo.fit`` config with their defaults, in their order; a KeyError
    for a path that holds no keys (:data:`~infgrpo.trl.keys.Children`)."""

    def parameters(fn: Callable[..., Any]) -> dict[str, Any]:
        params = inspect.signature(fn).parameters.values()
        kinds = (inspect.Parameter.POSITIONAL_OR_KEYWORD, inspect.Parameter.KEYWORD_ONLY)
        return {p.name: p.default for p in params if p.name != "self" and p.kind in kinds}

    if path == "":
        return {"seed_everything": 0, "trainer": None, "model": None, "data": None, "ckpt_path": None}
    if path == "trainer":
        from lightning.pytorch import Trainer

        return parameters(Trainer.__init__)
    if path == "data":
        from infgrpo.data import PromptDataModule

        return parameters(PromptDataModule.__init__)
    if path == "model":
        from infgrpo.module import GRPOModule

        return parameters(GRPOModule.__init__)
    from infgrpo.training.hparams import GROUPS

    section, _, group = path.partition(".")
    if section == "model" and group in GROUPS:
        out = {}
        for f in dataclasses.fields(GROUPS[group]):
            has_factory = f.default_factory is not dataclasses.MISSING
            out[f.name] = f.default_factory() if has_factory else f.default
        return out
    raise KeyError(path)


def infgrpo_default(key: str) -> Any:
    """infgrpo's default of a dotted key (``model.sampler.max_new_tokens`` -> 128); a KeyError for a key that
    ``python -m infgrpo.fit`` does not have (or a group, such as ``model.sampler``)."""
    return default(key, config_keys)


KNOWN: dict[str, Target] = {**TRL_FIELDS, **OTHER_KEYS}
"""Every key the converter knows: TRL 1.16's fields, then the other keys of real config files."""


def _suggest(name: str) -> str:
    """``" (did you mean 'x'?)"`` for a known key spelled almost as ``name`` (a typo), or ``""``."""
    close = difflib.get_close_matches(name, KNOWN, n=1, cutoff=0.85)
    return f" (did you mean {close[0]!r}?)" if close else ""


def _read(config: Any) -> tuple[dict[str, Any], set[str] | None]:
    """The fields of ``config`` (a ``GRPOConfig`` or other TRL dataclass object, or a mapping of fields), and the
    names a mapping gave (None for an object)."""
    if dataclasses.is_dataclass(config) and not isinstance(config, type):
        return {f.name: getattr(config, f.name) for f in dataclasses.fields(config)}, None
    if isinstance(config, Mapping):
        bad = [k for k in config if not isinstance(k, str)]
        if bad:
            raise ConversionError(f"{bad[0]!r} is not a field name (TRL's fields are strings)")
        return dict(config), set(config)
    raise ConversionError(f"expected a trl.GRPOConfig or a mapping of its fields, got {type(config).__name__}")


def _renamed(given: dict[str, Any], notes: list[str]) -> None:
    """Reads the older names of :data:`~infgrpo.trl.other_keys.RENAMED` as TRL 1.16's fields (in place)."""
    for old, new in RENAMED.items():
        if old not in given:
            continue
        value = given.pop(old)
        if new in given:
            notes.append(f"{old}={_show(value)} ignored: {new} (its name in TRL {TRL_VERSION}) is given too and wins")
        else:
            given[new] = value
            notes.append(f"{old}={_show(value)} read as {new}, its name in TRL {TRL_VERSION}")


def _unknown(given: dict[str, Any], strict: bool, notes: list[str]) -> None:
    """Leaves out (in place) the keys that are neither TRL's nor known, each named in a note; refused when
    ``strict``."""
    unknown = [name for name in given if name not in KNOWN]
    if unknown and strict:
        which = ", ".join(f"{name!r}{_suggest(name)}" for name in unknown)
        raise ConversionError(
            f"unknown key{'s' if len(unknown) > 1 else ''} {which} (--strict): not fields of TRL {TRL_VERSION}'s "
            "GRPOConfig, ModelConfig or script arguments, nor older names, recipe arguments or launcher keys"
        )
    for name in unknown:
        notes.append(
            f"{name}={_show(given.pop(name))} left out: not a field of TRL {TRL_VERSION}'s GRPOConfig, ModelConfig or "
            f"script arguments, nor a key this converter knows{_suggest(name)}; TRL's parser ignores it too "
            "(--strict refuses it)"
        )


def convert(config: Any, strict: bool = False, vlm: bool | None = None) -> Conversion:
    """The infgrpo config of a TRL ``GRPOConfig`` object, or of a mapping of TRL's fields (a TRL config file: may hold
    ``ModelConfig`` and script fields such as ``model_name_or_path``, ``dataset_name``, ``use_peft``, ``lora_r``,
    ``reward_funcs``, older names and recipe scripts' arguments), with the notes on what was not carried over and
    why.

    A key the converter does not know is left out and named in the notes, as TRL's parser ignores it; with
    ``strict`` it is refused. Raises a :class:`ConversionError` for a value TRL would refuse (``reward_weights`` of
    another length than the rewards), a reward name that resolves to nothing or an import path that does not import
    from the working folder, or a mixture of several datasets.

    ``vlm``: whether the model is a vision-language model (``--vlm``); None: its config decides (a ``vision_config``,
    read from a local folder or the cache). A vision-language run's notes and keys: :mod:`infgrpo.trl.vision`.
    """
    given, explicit = _read(config)
    notes: list[str] = []
    if explicit is not None:
        _renamed(given, notes)
        _unknown(given, strict, notes)
        explicit = set(given)
    defaults = trl_defaults()
    trl = TrlSettings(given, explicit, defaults)
    out = Keys(config_keys)
    if defaults["__version__"] != TRL_VERSION:
        notes.insert(0, f"the table is TRL {TRL_VERSION}'s; the installed trl is {defaults['__version__']}")
    for name, target in KNOWN.items():  # the fields copied as they are
        if isinstance(target, tuple) and name not in TRANSFORMS and (name in TRL_FIELDS or trl.is_set(name)):
            out.put(target[0], trl[name], trl.is_set(name))
    for transform in dict.fromkeys(TRANSFORMS.values()):
        transform(trl, out, notes)
    vision, how = recognise_vlm(trl["model_name_or_path"], vlm)
    if vision:  # TRL has no image settings: the model, the data and its image columns carry over; what differs
        convert_vision(trl, out, notes, how)
    elif hint := unread_vlm_hint(trl["model_name_or_path"], how):
        notes.append(hint)
    for name, reason in KNOWN.items():
        if isinstance(reason, str) and trl.is_set(name):
            notes.append(f"{name}={_show(trl[name])} not mapped: {reason}")
    return Conversion(out.nest(), notes)


def _show(value: Any, width: int = 60) -> str:
    """A short ``repr`` of ``value`` for a note."""
    text = repr(value)
    return text if len(text) <= width else text[: width - 3] + "..."


def read_trl_file(path: str | Path) -> dict[str, Any]:
    """The fields of a TRL config file: YAML (``trl grpo --config``) or JSON (by its ``.json`` suffix)."""
    path = Path(path)
    try:
        text = path.read_text()
    except OSError as err:
        raise ConversionError(f"cannot read {path}: {err.strerror or err}") from err
    try:
        data = json.loads(text) if path.suffix == ".json" else yaml.safe_load(text)
    except (json.JSONDecodeError, yaml.YAMLError) as err:
        raise ConversionError(f"{path} is not valid {'JSON' if path.suffix == '.json' else 'YAML'}: {err}") from err
    if not isinstance(data, dict):
        raise ConversionError(f"{path} must hold a mapping of TRL's fields, not {type(data).__name__}")
    return data


def markdown_table() -> str:
    """:data:`~infgrpo.trl.fields.TRL_FIELDS` and the other keys of real config files
    (:data:`~infgrpo.trl.other_keys.OTHER_GROUPS`) as a Markdown table, by group; fields with the same target (and
    :data:`~infgrpo.trl.how.HOW`) share a row."""
    lines = ["| TRL | infgrpo | how |", "|---|---|---|"]
    for title, fields in FIELD_GROUPS + OTHER_GROUPS:
        lines.append(f"| **{title}** | | |")
        rows: dict[tuple[Target, str], list[str]] = {}
        for name, target in fields.items():
            rows.setdefault((target, HOW.get(name, "")), []).append(name)
        for (target, how), names in rows.items():
            trl = ", ".join(f"`{n}`" for n in names)
            if isinstance(target, str):
                lines.append(f"| {trl} | not mapped | {target} |")
            else:
                lines.append(f"| {trl} | {', '.join(f'`{k}`' for k in target)} | {how} |")
    return "\n".join(lines) + "\n"


def _check_output(parser: argparse.ArgumentParser, source: Path, output: Path) -> None:
    """One ``error:`` line (exit 2) for an ``-o`` that is the TRL config itself (never overwritten) or a folder."""
    if output.is_file() and source.is_file() and output.samefile(source):
        parser.error(f"-o {output} is the TRL config being converted: it is never overwritten; give another file")
    if output.is_dir():
        parser.error(f"-o {output} is a folder; give a file, e.g. -o {output / 'infgrpo.yaml'}")


def main(argv: list[str] | None = None) -> int:
    """``python -m infgrpo.from_trl trl_config.yaml [-o infgrpo.yaml] [--strict]``: the infgrpo YAML on stdout (or
    in the file), the notes on stderr; exits with status 2 and one ``error:`` line for a config it cannot convert
    or an ``-o`` it cannot write (the input file itself, a folder, an unwritable path)."""
    parser = argparse.ArgumentParser(
        prog="python -m infgrpo.from_trl",
        description="Convert a TRL GRPOConfig file (the YAML or JSON of `trl grpo --config`) to a config of "
        "python -m infgrpo.fit; every TRL setting not carried over is named in the notes.",
    )
    parser.add_argument("config", help="TRL config file (YAML, or JSON by its .json suffix)")
    parser.add_argument("-o", "--output", help="write the infgrpo YAML here (default: stdout); never the input file")
    parser.add_argument(
        "--strict", action="store_true", help="refuse keys that are not TRL's (by default they are named and left out)"
    )
    parser.add_argument(
        "--vlm", action="store_true", default=None,
        help="the model is a vision-language model (default: its config says, when it can be read here)",
    )  # fmt: skip
    args = parser.parse_args(argv)
    if args.output:
        _check_output(parser, Path(args.config), Path(args.output))
    try:
        result = convert(read_trl_file(args.config), strict=args.strict, vlm=args.vlm)
    except ConversionError as err:
        parser.error(str(err))
    text = result.yaml(source=Path(args.config).name)
    if args.output:
        try:
            Path(args.output).write_text(text)
        except OSError as err:
            parser.error(f"cannot write -o {args.output}: {err.strerror or err}; give a file in a writable folder")
    else:
        sys.stdout.write(text)
    for note in result.notes:
        print(f"note: {note}", file=sys.stderr)
    if args.output:
        print(f"wrote {args.output}: python -m infgrpo.fit --config {args.output}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
