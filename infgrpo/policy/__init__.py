"""The policy: where the model comes from, how it is loaded, and its settings groups.

    from infgrpo.policy import PolicyConfig, load_policy, load_tokenizer
    model = load_policy("tiny", lora_r=8)       # the shipped tiny Qwen3, LoRA adapters on every linear layer

- :mod:`~infgrpo.policy.source`: the model's source (``policy.model_name_or_path``), checked before anything loads;
- :mod:`~infgrpo.policy.config`: the groups ``model.policy``, ``model.lora``, ``model.quantization``;
- :mod:`~infgrpo.policy.load`: loading (hub id, folder, GGUF file; dtype, LoRA via peft, 4-bit via
  bitsandbytes), the frozen KL reference, saving and merging the trained adapter.
- :mod:`~infgrpo.policy.gguf_cache`: a local GGUF file converted once, later loads reading the saved folder
  (``INFGRPO_CACHE``).
"""

from infgrpo.policy.config import LoRAConfig, PolicyConfig, QuantizationConfig
from infgrpo.policy.load import load_policy, load_tokenizer
from infgrpo.policy.source import check_model_source

__all__ = [
    "LoRAConfig",
    "PolicyConfig",
    "QuantizationConfig",
    "check_model_source",
    "load_policy",
    "load_tokenizer",
]
