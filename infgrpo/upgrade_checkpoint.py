"""Upgrade a checkpoint of an older infgrpo, once, on disk: 0.1's flat settings into groups, LoRA's frozen base out.

    python -m infgrpo.upgrade_checkpoint runs/old/step2.ckpt runs/old/step2-v02.ckpt
    python -m infgrpo.upgrade_checkpoint runs/lora/last.ckpt runs/lora/last.ckpt      # in place: the adapters alone

infgrpo 0.1 saved ``GRPOModule``'s settings flat (``lora_r``, ``learning_rate``, ...); 0.2 keeps them in groups
(``lora.r``, ``optimizer.learning_rate``). ``GRPOModule.load_from_checkpoint`` builds the module from the saved
settings, so a 0.1 checkpoint must be upgraded first: this writes a copy whose hyper-parameters are moved into
their groups (:func:`~infgrpo.training.compat_v01.group_flat_hparams`). Resuming a run from a 0.1 checkpoint
(``--ckpt_path``) needs no upgrade: Lightning restores the state into the module the command line built.

A LoRA checkpoint written before infgrpo kept the adapters alone holds every weight of the frozen base too (tiny
with ``lora.r: 8``: 683,136 values for LoRA's 65,536). It still loads and resumes as it is; upgraded, it keeps the
LoRA weights (peft's ``lora_`` names) and names its base with the fingerprint of the rest, as a checkpoint written
now does (:mod:`~infgrpo.training.checkpoint_state`): a fraction of the size, checked against the base at resume.
The optimizer state and everything else are copied unchanged, and the file is written atomically.
"""

from __future__ import annotations

import argparse
import contextlib
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import torch

from infgrpo.policy.config import PolicyConfig, QuantizationConfig
from infgrpo.runtime.atomic_save import atomic_torch_save
from infgrpo.settings import ConfigError, build_group
from infgrpo.training.checkpoint_state import BASE_KEY, fingerprint, weights_of
from infgrpo.training.compat_v01 import group_flat_hparams, is_flat
from infgrpo.training.preflight.checkpoints import read_checkpoint

COMMAND = "python -m infgrpo.upgrade_checkpoint"


def is_v01_checkpoint(path: str | Path) -> bool:
    """Whether the local file ``path`` is a checkpoint with 0.1's flat hyper-parameters (reads no tensor)."""
    state = torch.load(Path(path), map_location="cpu", mmap=True, weights_only=True)
    hparams = state.get("hyper_parameters") if isinstance(state, dict) else None
    return isinstance(hparams, dict) and is_flat(hparams)


@contextlib.contextmanager
def upgrade_hint(checkpoint_path: Any) -> Iterator[None]:
    """Loading ``checkpoint_path`` in the block: when it fails on a local checkpoint of infgrpo 0.1 (an unknown flat
    key's TypeError; 0.1's rewards mapping, a ConfigError), one ConfigError naming this command instead; any other
    failure as it is (``GRPOModule.load_from_checkpoint``; the file is read only when loading failed)."""
    try:
        yield
    except (TypeError, ValueError) as err:
        local = isinstance(checkpoint_path, str | Path) and Path(checkpoint_path).is_file()
        if not (local and is_v01_checkpoint(checkpoint_path)):
            raise
        raise ConfigError(
            f"{checkpoint_path} is a checkpoint of infgrpo 0.1 (flat settings); upgrade it once with "
            f"{COMMAND} {checkpoint_path} <new.ckpt>, then load that"
        ) from err


LORA_NAME = "lora_"
"""What peft's LoRA weights have in their names (``lora_A``, ``lora_B``, ``lora_embedding_A``, ...): the weights a
LoRA run trains."""


def base_of(state: dict[str, Any], hparams: dict[str, Any]) -> dict[str, Any] | None:
    """``infgrpo_base`` for a LoRA checkpoint ``state`` that holds every weight (its ``hyper_parameters`` grouped:
    ``hparams``), as :class:`~infgrpo.training.checkpoint_state.PolicyCheckpoint` writes it; None for full fine-tuning,
    or when the checkpoint names its base already."""
    weights = state.get("state_dict")
    lora = (hparams.get("lora") or {}).get("r") if isinstance(hparams.get("lora"), dict) else None
    if BASE_KEY in state or not lora or not isinstance(weights, dict) or not any(LORA_NAME in k for k in weights):
        return None
    policy = build_group(PolicyConfig, hparams.get("policy"), "policy")
    quantization = build_group(QuantizationConfig, hparams.get("quantization"), "quantization")
    frozen = {k: v for k, v in weights.items() if LORA_NAME not in k and isinstance(v, torch.Tensor)}
    return {
        "model_name_or_path": policy.model_name_or_path,
        "gguf_file": policy.gguf_file,
        "weights": weights_of(policy, quantization),
        "fingerprint": fingerprint(frozen),
    }


def upgrade(source: str | Path, target: str | Path) -> list[str]:
    """Writes ``source`` to ``target`` upgraded; returns what changed, in words.

    A 0.1 checkpoint gets its hyper-parameters grouped; a LoRA checkpoint holding its frozen base keeps the LoRA
    weights and names the base (:func:`base_of`). Raises a ValueError when ``source`` is no checkpoint, or one cut short
    (a ConfigError, as ``--ckpt_path`` says for the same file), or has nothing to upgrade."""
    if not Path(source).is_file():
        raise ConfigError(f"{source} is no file (looked at {Path(source).resolve()})")
    state = dict(read_checkpoint(Path(source), str(source)))
    hparams, done = state.get("hyper_parameters"), []
    if isinstance(hparams, dict) and is_flat(hparams):
        state["hyper_parameters"] = hparams = group_flat_hparams(hparams)
        moved = sorted(k for k, v in hparams.items() if isinstance(v, dict))
        done.append(f"settings in the groups {', '.join(moved)}")
    base = base_of(state, hparams) if isinstance(hparams, dict) else None
    if base is not None:
        weights = state["state_dict"]
        state["state_dict"] = {k: v.clone() for k, v in weights.items() if LORA_NAME in k}  # not views of the file
        state[BASE_KEY] = base
        kept = sum(v.numel() for v in state["state_dict"].values())
        done.append(
            f"the LoRA weights alone ({kept:,} of {sum(v.numel() for v in weights.values()):,} values) and the base "
            f"{base['model_name_or_path']} named"
        )
    if not done:
        raise ValueError(
            f"{source}: nothing to upgrade: no hyper-parameters of infgrpo 0.1, and no frozen base weights of a LoRA "
            "checkpoint (already upgraded, full fine-tuning, or not infgrpo's)"
        )
    atomic_torch_save(state, target)
    return done


def main(argv: list[str] | None = None) -> None:
    """The command line: ``SOURCE TARGET``; prints what it wrote."""
    ap = argparse.ArgumentParser(prog=COMMAND, description=__doc__.split("\n")[0])
    ap.add_argument("source", help="the checkpoint of an older infgrpo (0.1's settings, or LoRA with its base)")
    ap.add_argument("target", help="where to write the upgraded checkpoint (may be the same path)")
    args = ap.parse_args(argv)
    try:
        done = upgrade(args.source, args.target)
    except (OSError, ValueError) as err:
        ap.error(str(err))
    print(f"[infgrpo] wrote {args.target}: {'; '.join(done)}")


if __name__ == "__main__":
    main()
