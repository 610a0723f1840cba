"""A policy sharded with FSDP2 over the data-parallel ranks, and its parameters gathered for the rollout and update::

    shard_model(policy, mesh)                    # configure_model: fully_shard each decoder layer, then the root
    with gathered(policy):                       # every rank holds the full parameters; no forward all-gathers
        rollouts = sampler.sample(...)           # each rank decodes its own number of steps
    with gathered(policy), accumulating(policy): # the update: backward passes accumulate unsharded gradients
        ... forward/backward per micro-batch, as many as this rank has ...
        sync_gradients(policy, pad_id)           # one zero-loss pass: every rank reduce-scatters once

Between steps each rank holds 1/N of the parameters, gradients and optimizer state (FSDP2's ``fully_shard``
over a 1-D mesh). Under FSDP2 every forward all-gathers each sharded layer and every backward reduce-scatters its
gradients: collectives all ranks must issue in the same order. A GRPO rank decodes its own number of steps
and packs its own number of micro-batches, so inside the rollout and the update no collective may depend on
them. Both therefore run on the gathered parameters (``unshard`` once before, ``reshard`` after), and the update's
gradients, accumulated unsharded on each rank whatever its number of micro-batches, are reduce-scattered once
per optimizer step by one extra forward/backward of one token with loss 0 (:func:`sync_gradients`): its
gradient is exactly zero, and it runs each FSDP group's post-backward once, on every rank alike.

The price is the full parameters (and, during the update, the full gradients of the trainable ones) on every
rank while a step runs: what TRL's ZeRO-3 path pays in its generation (``ds3_gather_for_generation``).
No Lightning here: :class:`~infgrpo.trainer.policy_sharding.PolicySharding`, the handle
:class:`~infgrpo.GRPOModule` asks, calls these.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator

import torch
from torch import nn
from torch.distributed.fsdp import FSDPModule, MixedPrecisionPolicy, fully_shard


def decoder_layers(model: nn.Module) -> list[nn.Module]:
    """The decoder layers of a Hugging Face causal LM, plain or peft-wrapped: the modules whose class the model
    names in ``_no_split_modules`` (``Qwen3DecoderLayer``, ``LlamaDecoderLayer``, ...), in module order."""
    base = model.get_base_model() if hasattr(model, "get_base_model") else model
    names = set(getattr(base, "_no_split_modules", None) or ())
    layers = [m for m in model.modules() if type(m).__name__ in names]
    if not layers:
        raise ValueError(
            f"cannot shard {type(base).__name__}: it names no decoder layer class (_no_split_modules), so there is "
            "no unit to shard by; use trainer.strategy: ddp"
        )
    return layers


def mixed_precision(dtype: torch.dtype) -> MixedPrecisionPolicy:
    """Compute, accumulate and reduce gradients in the policy's ``dtype``, as DDP does with the same weights (a
    float32 ``reduce_dtype`` would make FSDP2 accumulate the unsharded gradients in float32: twice the update's
    gradient memory for bfloat16 weights)."""
    return MixedPrecisionPolicy(param_dtype=dtype, reduce_dtype=dtype)


def is_sharded(model: nn.Module | None) -> bool:
    """Whether ``model`` was sharded by :func:`shard_model` (its root is an FSDP2 module)."""
    return isinstance(model, FSDPModule)


def shard_model(model: nn.Module, mesh: object, dtype: torch.dtype | None = None) -> None:
    """Shards ``model`` in place over the 1-D data-parallel ``mesh`` (a ``DeviceMesh``): ``fully_shard`` on each
    decoder layer, then on the root (embeddings, final norm, LM head). ``dtype``: the compute dtype (default the
    parameters'). A model already sharded is left as it is."""
    if is_sharded(model):
        return
    dtype = dtype or next(model.parameters()).dtype
    policy = mixed_precision(dtype)
    for layer in decoder_layers(model):
        fully_shard(layer, mesh=mesh, mp_policy=policy)
    fully_shard(model, mesh=mesh, mp_policy=policy)


def local_bytes(tensor: torch.Tensor) -> int:
    """Bytes this rank holds of ``tensor``: a DTensor's local shard, or the whole tensor."""
    local = tensor.to_local() if hasattr(tensor, "to_local") else tensor
    return local.numel() * local.element_size()


def gather_sizes(*models: nn.Module | None) -> tuple[int, int]:
    """(bytes of the full parameters of ``models``, bytes of them this rank holds): what :func:`gathered` adds is
    their difference."""
    params = [p for model in models if model is not None for p in model.parameters()]
    return sum(p.numel() * p.element_size() for p in params), sum(local_bytes(p) for p in params)


def gather_problem(full: int, held: int, free: int, total: int) -> str | None:
    """Why gathering parameters of ``full`` bytes (``held`` of them on this rank) cannot fit a device with ``free``
    of ``total`` bytes free, naming what to change; None when it fits."""
    need = full - held
    if need <= free:
        return None
    gib = 2**30
    return (
        f"the rollout gathers the whole policy on every rank of a sharded run ({full / gib:.2f} GiB; "
        f"{need / gib:.2f} GiB more than this rank's shards), and the device has {free / gib:.2f} GiB free of "
        f"{total / gib:.2f} GiB: more ranks do not lower this. Free memory between steps with "
        "model.sampler.keep_pool: false (the slot pool is otherwise kept), load the weights in a 16-bit "
        "model.policy.dtype (bfloat16), or use larger devices"
    )


def check_gather_fits(device: torch.device, *models: nn.Module | None) -> None:
    """On a CUDA device: a ``torch.OutOfMemoryError`` saying what to change (:func:`gather_problem`) when the sharded
    ``models``' full parameters cannot fit the free memory; before the all-gather that would run out. Elsewhere
    nothing (host memory is not checked)."""
    if device.type != "cuda" or not any(is_sharded(m) for m in models):
        return
    free, total = torch.cuda.mem_get_info(device)
    problem = gather_problem(*gather_sizes(*models), free, total)
    if problem is not None:
        raise torch.OutOfMemoryError(problem)


def fsdp_modules(*models: nn.Module | None) -> list[FSDPModule]:
    """The FSDP2 modules of ``models`` (None skipped), in module order: the same order on every rank."""
    return [m for model in models if model is not None for m in model.modules() if isinstance(m, FSDPModule)]


@contextlib.contextmanager
def gathered(*models: nn.Module | None) -> Iterator[None]:
    """The full parameters of every sharded module of ``models`` on each rank while the block runs: unsharded
    once on entry (an all-gather per FSDP module, in the same order on every rank), never resharded after a
    forward, resharded on exit. A no-op on models that are not sharded."""
    modules = fsdp_modules(*models)
    for m in modules:
        m.set_reshard_after_forward(False, recurse=False)
    try:
        unshard(*models)
        yield
    finally:
        reshard(*models)
        for m in modules:
            m.set_reshard_after_forward(True, recurse=False)


def unshard(*models: nn.Module | None) -> None:
    """All-gathers the parameters of every sharded module of ``models`` that is not gathered already (FSDP2 skips
    those): inside :func:`gathered`, after :func:`reshard`, before the next pass."""
    for m in fsdp_modules(*models):
        m.unshard()


def reshard(*models: nn.Module | None) -> None:
    """Frees the gathered parameters of every sharded module of ``models``: after an optimizer step changed the
    shards, the gathered copy is stale (:func:`unshard` gathers anew when another pass follows)."""
    for m in fsdp_modules(*models):
        m.reshard()


@contextlib.contextmanager
def accumulating(model: nn.Module | None) -> Iterator[None]:
    """Backward passes accumulate the unsharded gradients on each rank, with no collective, and keep the
    parameters gathered (:func:`sync_gradients` reduces them); restored on exit. A no-op unless sharded."""
    if not is_sharded(model):
        yield
        return
    model.set_requires_gradient_sync(False)
    model.set_reshard_after_backward(False)
    try:
        yield
    finally:
        model.set_requires_gradient_sync(True)
        model.set_reshard_after_backward(True)


def sync_gradients(model: nn.Module, pad_id: int) -> None:
    """Reduce-scatters the gradients accumulated under :func:`accumulating` into each rank's shard (averaged over
    ranks, as DDP does): one forward/backward of a single ``pad_id`` token with loss 0, whose gradient is exactly
    zero and which runs every FSDP group's post-backward once on every rank, whatever each rank ran before."""
    device, was_training = next(model.parameters()).device, model.training
    model.set_requires_gradient_sync(True)
    model.eval()  # no dropout: the pass draws nothing from the random state
    try:
        logits = model(input_ids=torch.full((1, 1), pad_id, device=device), use_cache=False).logits
        (logits.sum() * 0.0).backward()
    finally:
        model.train(was_training)
        model.set_requires_gradient_sync(False)


def full_state(model: nn.Module) -> dict[str, torch.Tensor]:
    """The full (unsharded) state dict of a sharded ``model`` on the CPU of rank 0 (empty on the other ranks):
    a collective, called on every rank. Names the model ties (one parameter under several names: an LM head
    tied to the embeddings) hold one tensor, as in ``model.state_dict()``, so ``save_pretrained`` writes it once."""
    from torch.distributed.checkpoint.state_dict import StateDictOptions, get_model_state_dict

    state = get_model_state_dict(model, options=StateDictOptions(full_state_dict=True, cpu_offload=True))
    for first, *others in tied_names(model):  # each name was gathered into a tensor of its own
        for name in others:
            if first in state and name in state:
                state[name] = state[first]
    return state


def tied_names(model: nn.Module) -> list[list[str]]:
    """The names of each parameter of ``model`` that is held under more than one name, in module order."""
    names: dict[int, list[str]] = {}
    for name, param in model.named_parameters(remove_duplicate=False):
        names.setdefault(id(param), []).append(name)
    return [group for group in names.values() if len(group) > 1]
