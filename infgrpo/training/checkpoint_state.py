"""What a checkpoint holds of the policy: all of it under full fine-tuning; under LoRA, what trains and the base's name.

    contents = PolicyCheckpoint(settings.policy, settings.quantization)   # GRPOModule.__init__
    contents.write(checkpoint, module)   # on_save_checkpoint: LoRA keeps its trainable weights and the base's identity
    contents.read(checkpoint, module)    # on_load_checkpoint: the base checked (one line naming both), entries filled

**Why.** Lightning saves the module's whole ``state_dict``. Under LoRA that is mostly the frozen base, which the run
loads from ``policy.model_name_or_path`` anyway: tiny with ``lora.r: 8`` wrote all 683,136 values of which 65,536
are LoRA's, and ``configs/qwen3.yaml`` (Qwen3-1.7B, 4-bit) about 1.56 GB a checkpoint where the adapters and their
AdamW state are 0.21 GB (``benchmarks/results/checkpoints.md``). A LoRA checkpoint now holds the trainable
parameters (``requires_grad``), and Lightning's optimizer, schedule, loop and run state as before.

**The base.** ``infgrpo_base`` names it (``policy.model_name_or_path``, ``gguf_file``, how its weights are held: the
dtype, 4-bit) and holds a fingerprint: the SHA-256 of every other entry of the ``state_dict`` (name, dtype, shape,
bytes; in name order, 4-bit quantization states included), computed once per process, as the base never changes.
Resuming (or ``GRPOModule.load_from_checkpoint``) computes it for the base the run loaded: another base (another model
or revision) is one :class:`~infgrpo.settings.ConfigError` naming both; the same weights under another name (a mirror,
a moved folder) resume. Another dtype or 4-bit setting is found before the model loads
(:func:`base_settings_mismatch`, from the preflight). The missing entries are then taken from the module itself, so
Lightning's strict loading is unchanged: a key that is neither the checkpoint's nor the base's still fails.

**What stays as it was.** Full fine-tuning (every weight trains). A checkpoint without ``infgrpo_base`` (full
fine-tuning, and LoRA checkpoints written before this) loads as before. A sharded run (``trainer.strategy: fsdp2``)
keeps the whole state: Lightning's sharded loaders read the model's full state before any hook could complete it,
and a LoRA-only checkpoint given to one is refused before the model loads (:func:`trimmed_for_sharding`).
"""

from __future__ import annotations

import hashlib
from collections.abc import Mapping
from typing import Any

import torch

from infgrpo.settings import ConfigError

BASE_KEY = "infgrpo_base"
"""The checkpoint's entry that marks a state_dict holding only the trainable weights, and identifies the base."""


def kept_names(module: torch.nn.Module) -> set[str]:
    """The ``state_dict`` keys a LoRA checkpoint keeps of ``module``: its parameters that train (``requires_grad``)
    and its buffers (none in a causal LM's state but kept all the same: a buffer may change as it trains)."""
    return {name for name, p in module.named_parameters() if p.requires_grad} | {n for n, _ in module.named_buffers()}


def has_frozen_weights(module: torch.nn.Module) -> bool:
    """Whether some parameter of ``module`` does not train (LoRA's base); False under full fine-tuning."""
    return any(not p.requires_grad for p in module.parameters())


def fingerprint(entries: Mapping[str, torch.Tensor]) -> str:
    """SHA-256 (hex) of ``entries``: each name, dtype and shape, then its bytes, in name order (any device, any dtype,
    4-bit storage included: the tensors are read as bytes)."""
    digest = hashlib.sha256()
    for name in sorted(entries):
        tensor = entries[name].detach()
        digest.update(f"{name}|{tensor.dtype}|{tuple(tensor.shape)}\n".encode())
        digest.update(tensor.reshape(-1).contiguous().cpu().view(torch.uint8).numpy())
    return digest.hexdigest()


def base_entries(state: Mapping[str, Any], kept: set[str]) -> dict[str, torch.Tensor]:
    """The entries of ``state`` (a module's ``state_dict``) that are not in ``kept``: the frozen base."""
    return {k: v for k, v in state.items() if k not in kept and isinstance(v, torch.Tensor)}


def weights_of(policy: Any, quantization: Any) -> str:
    """How the run holds the base's weights, in words: ``bfloat16``, or ``4-bit nf4 (double quantization), bfloat16
    compute``; the same model held otherwise is another base to the adapters (other bytes, other values)."""
    if not quantization.load_in_4bit:
        return str(policy.dtype)
    double = " (double quantization)" if quantization.bnb_4bit_use_double_quant else ""
    upcast = ", the rest upcast to float32" if quantization.upcast_to_float32 else ""
    return f"4-bit {quantization.bnb_4bit_quant_type}{double}, {quantization.bnb_4bit_compute_dtype} compute{upcast}"


def named(base: Mapping[str, Any]) -> str:
    """``Qwen/Qwen3-1.7B`` (with its GGUF file when it has one)."""
    gguf = f" (gguf_file {base['gguf_file']})" if base.get("gguf_file") else ""
    return f"{base.get('model_name_or_path')}{gguf}"


def described(base: Mapping[str, Any]) -> str:
    """``Qwen/Qwen3-1.7B (bfloat16; fingerprint 1a2b3c4d5e6f)``: a base identity in words."""
    return f"{named(base)} ({base.get('weights')}; fingerprint {str(base.get('fingerprint'))[:12]})"


def base_settings_mismatch(saved: Mapping[str, Any], policy: Any, quantization: Any) -> str | None:
    """Why the run's dtype or 4-bit settings hold another base than the checkpoint's ``infgrpo_base`` ``saved``
    (found before the model loads), or None."""
    now = weights_of(policy, quantization)
    if saved.get("weights") in (None, now):
        return None
    return (
        f"the checkpoint's LoRA weights were trained on {named(saved)} held as {saved.get('weights')}, and this run "
        f"holds its base as {now}: resume with the checkpoint's model.policy.dtype and model.quantization settings, "
        "or drop --ckpt_path to start a new run"
    )


class PolicyCheckpoint:
    """Writes and reads the policy's share of a checkpoint (see the module).

    Args:
        policy: the run's ``PolicyConfig`` (what names the base).
        quantization: the run's ``QuantizationConfig`` (4-bit or not).
    """

    def __init__(self, policy: Any, quantization: Any) -> None:
        self.name = {
            "model_name_or_path": policy.model_name_or_path,
            "gguf_file": policy.gguf_file,
            "weights": weights_of(policy, quantization),
        }
        self._fingerprint: str | None = None

    def identity(self, module: torch.nn.Module, state: Mapping[str, Any] | None = None) -> dict[str, Any]:
        """The base's name and fingerprint (the fingerprint computed on the first call: the base does not change)."""
        if self._fingerprint is None:
            state = module.state_dict() if state is None else state
            self._fingerprint = fingerprint(base_entries(state, kept_names(module)))
        return {**self.name, "fingerprint": self._fingerprint}

    def write(self, checkpoint: dict[str, Any], module: torch.nn.Module, sharded: bool = False) -> None:
        """Keeps only the trainable weights of ``checkpoint["state_dict"]`` (:func:`kept_names`) and adds
        ``infgrpo_base``, when some of ``module``'s weights are frozen (LoRA) and the run is not ``sharded``; nothing
        otherwise."""
        state = checkpoint.get("state_dict")
        if sharded or not isinstance(state, dict) or not has_frozen_weights(module):
            return
        kept = kept_names(module)
        checkpoint[BASE_KEY] = self.identity(module, state)
        checkpoint["state_dict"] = {k: v for k, v in state.items() if k in kept}

    def read(self, checkpoint: dict[str, Any], module: torch.nn.Module) -> None:
        """Makes ``checkpoint["state_dict"]`` what ``module.load_state_dict`` takes. One of the trainable weights alone:
        its base checked against ``module``'s (a ConfigError naming both), then filled with the module's own frozen
        weights. Every checkpoint: the entries ``module`` writes but does not load (bitsandbytes' 4-bit quantization
        states, which made a 4-bit checkpoint's strict loading fail) are dropped; the weights they describe are the
        base's, loaded with it."""
        state = checkpoint.get("state_dict")
        if not isinstance(state, dict):
            return
        own, loads = module.state_dict(), loaded_names(module)
        saved = checkpoint.get(BASE_KEY)
        if isinstance(saved, Mapping):
            now = self.identity(module, own)
            if saved.get("fingerprint") != now["fingerprint"]:
                raise ConfigError(
                    f"the checkpoint's LoRA weights were trained on the base {described(saved)}, and this run loads "
                    f"{described(now)}: another base model; resume with the checkpoint's base (--model.policy."
                    f"model_name_or_path {saved.get('model_name_or_path')}), or drop --ckpt_path to start a new run"
                )
            state = {**{k: v for k, v in own.items() if k in loads}, **state}
        checkpoint["state_dict"] = {k: v for k, v in state.items() if k in loads or k not in own}


def loaded_names(module: torch.nn.Module) -> set[str]:
    """The ``state_dict`` keys ``module.load_state_dict`` takes: every parameter and buffer name (tied ones too)."""
    named = (*module.named_parameters(remove_duplicate=False), *module.named_buffers(remove_duplicate=False))
    return {name for name, _ in named}


def trimmed_for_sharding(state: Mapping[str, Any]) -> str | None:
    """Why the checkpoint ``state`` cannot resume a sharded run (it holds only LoRA's weights), or None."""
    base = state.get(BASE_KEY)
    if not isinstance(base, Mapping):
        return None
    return (
        f"holds only the LoRA weights (of the base {described(base)}), written by a run without sharding, and "
        "trainer.strategy 'fsdp2' reads a checkpoint's whole model state: resume it without sharding (drop "
        "--trainer.strategy), or start a new sharded run"
    )
