"""PolicySharding: the one handle :class:`~infgrpo.GRPOModule` asks about a sharded policy, made once from the strategy.

    sharding = PolicySharding.shard(mesh, policy, ref, pad_id)  # configure_model, under trainer.strategy: fsdp2
    sharding = PolicySharding()                  # any other strategy (or none): every method does nothing
    with sharding.rollout(device): ...           # the full weights while each rank decodes its own number of steps
    with sharding.update(): ...                  # policy and reference gathered, gradients accumulated unsharded
    with sharding.optimizer_step(): ...          # in the update: reduce-scatter before a step, free stale weights after
    sharding.after_zero_grad()                   # in the update: each iteration gathers again what the step changed
    sharding.start_evaluation()                  # on_validation_epoch_start ... on_validation_epoch_end:
    sharding.end_evaluation()                    # the held-out decode on the full weights
    state = sharding.full_state()                # output_dir: the full state on rank 0; None unsharded

Why each of these runs on the gathered parameters, and what that costs: :mod:`infgrpo.trainer.sharding`.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator

import torch
from torch import nn
from torch.distributed.device_mesh import DeviceMesh

from infgrpo.trainer.sharding import (
    accumulating,
    check_gather_fits,
    full_state,
    gathered,
    reshard,
    shard_model,
    sync_gradients,
    unshard,
)


class PolicySharding:
    """The sharding of a policy (and of its frozen reference) over the data-parallel ranks, asked at each step of
    GRPO; ``PolicySharding()`` (no policy: nothing sharded) does nothing at all.

    Args:
        policy: the policy, sharded by FSDP2 (:meth:`shard`); None when unsharded.
        ref: the frozen KL reference of full fine-tuning, sharded alike, or None.
        pad_id: the token of the one-token pass that reduce-scatters the gradients
            (:func:`~infgrpo.trainer.sharding.sync_gradients`).
    """

    def __init__(self, policy: nn.Module | None = None, ref: nn.Module | None = None, pad_id: int = 0) -> None:
        self.policy, self.ref, self.pad_id = policy, ref, pad_id
        self._evaluation = contextlib.ExitStack()  # the gather held across the two validation hooks

    @classmethod
    def shard(cls, mesh: DeviceMesh, policy: nn.Module, ref: nn.Module | None, pad_id: int) -> PolicySharding:
        """Shards ``policy`` and ``ref`` (if any) in place, in the policy's dtype, over the strategy's device ``mesh``
        (its ``data_parallel`` dimension when it names one, else all of it); the handle over them."""
        names = mesh.mesh_dim_names or ()
        dp = mesh["data_parallel"] if "data_parallel" in names else mesh
        shard_model(policy, dp, policy.dtype)
        if ref is not None:
            shard_model(ref, dp, policy.dtype)
        return cls(policy, ref, pad_id)

    @property
    def active(self) -> bool:
        """Whether a policy is sharded (every method below is a no-op otherwise)."""
        return self.policy is not None

    @contextlib.contextmanager
    def rollout(self, device: torch.device) -> Iterator[None]:
        """The policy's full parameters while the block decodes (each rank its own number of steps); first, on CUDA,
        an error naming what to change when they cannot fit (:func:`~infgrpo.trainer.sharding.check_gather_fits`)."""
        if not self.active:
            yield
            return
        check_gather_fits(device, self.policy)
        with gathered(self.policy):
            yield

    @contextlib.contextmanager
    def update(self) -> Iterator[None]:
        """Policy and reference gathered while the block updates; backward passes accumulate the unsharded gradients
        with no collective (:func:`~infgrpo.trainer.sharding.accumulating`) until :meth:`optimizer_step`."""
        if not self.active:
            yield
            return
        with gathered(self.policy, self.ref), accumulating(self.policy):
            yield

    @contextlib.contextmanager
    def optimizer_step(self) -> Iterator[None]:
        """Around one optimizer step (clipping included): first reduce-scatters the accumulated gradients into each
        rank's shard; after the step, frees the gathered parameters it made stale."""
        if self.active:
            sync_gradients(self.policy, self.pad_id)
        yield
        if self.active:
            reshard(self.policy)

    def after_zero_grad(self) -> None:
        """Gathers the parameters the last optimizer step changed, as each of the update's ``num_iterations``
        starts (a no-op where they are gathered)."""
        if self.active:
            unshard(self.policy)

    def start_evaluation(self) -> None:
        """Gathers the policy for the held-out decode (each rank its own number of steps) until
        :meth:`end_evaluation`."""
        if self.active:
            self._evaluation.enter_context(gathered(self.policy))

    def end_evaluation(self) -> None:
        """Back to 1/N of the parameters after the held-out decode."""
        self._evaluation.close()

    def full_state(self) -> dict[str, torch.Tensor] | None:
        """What ``save_pretrained`` writes: the policy's full state on the CPU of rank 0 (empty on the others; a
        collective, called on every rank); None unsharded, where the model's own parameters are whole."""
        return full_state(self.policy) if self.active else None
