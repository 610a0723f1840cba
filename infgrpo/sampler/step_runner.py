"""DecodeStep: one decode step over the whole slot pool, of static shape, optionally as a CUDA graph.

    step = DecodeStep(model, pool, temperature=1.0, top_k=0, top_p=1.0)
    step.host[:, slot] = (token, position, k0, k1, t)    # host bookkeeping (a numpy view, (5, S))
    out = step()                                           # (S, 2): sampled tokens and their log-probs

The step reads its inputs from one int64 state tensor (5, S, 1), one column per slot:

=====  ============================================================================
row    meaning
=====  ============================================================================
0      the token to feed (the slot's last sampled token; the pad id when idle)
1      its position = the slot's length (0 when idle); its K/V are written there
2, 3   the sequence's stream key words k0, k1 (:mod:`infgrpo.sampler.counter_rng`)
4      t, the index in the completion of the token this step samples
=====  ============================================================================

and writes one float64 tensor (S, 2): the sampled token ids and their log-probs. Per step the host
makes **one** copy in (state, from pinned memory, asynchronous) and **one** copy out (into pinned
memory), then waits on an event: no ``.item()``, no ``torch.tensor(list)``, no per-slot kernel.
On CPU both are the same tensors and nothing is copied.

Inside, everything is device work over all slots at once: the decode mask from the positions, the
model's forward over the pool (K/V written with ``scatter_``), counter-based uniforms, and sampling
(temperature / top-k / top-p, inverse CDF, the chosen token's log-prob). Its shapes never change, so
on CUDA it is captured once as a CUDA graph (``cuda_graphs``: 'auto' or 'on') and replayed: one
launch a step instead of ~1,500. The graph is recaptured when the model's parameters or buffers
move to other storage, or when peft adapters are toggled, merged or switched (a graph replays raw
memory and the Python branches taken at capture); a capture that fails falls back to eager
execution with one warning saying why ('on' raises instead).

The attention kernel is pinned for the step (``attention``): on CUDA the default 'efficient' is
PyTorch's memory-efficient SDPA, which takes the additive mask and needs no per-shape plan;
'cudnn', 'math' or 'auto' (PyTorch's choice) can be measured against it (flash attention takes no
mask, so it is not offered).
"""

from __future__ import annotations

import contextlib
import warnings

import numpy as np
import torch
from torch.nn.attention import SDPBackend, sdpa_kernel
from transformers import PreTrainedModel

from infgrpo.sampler.counter_rng import counter_uniform
from infgrpo.sampler.sampling import sample_tokens
from infgrpo.sampler.slot_pool import SlotPool

# The pinned kernel first; the math kernel behind it only for inputs the pinned one refuses (it takes any mask).
ATTENTION_BACKENDS = {
    "auto": None,
    "efficient": [SDPBackend.EFFICIENT_ATTENTION, SDPBackend.MATH],
    "cudnn": [SDPBackend.CUDNN_ATTENTION, SDPBackend.MATH],
    "math": [SDPBackend.MATH],
}
CUDA_GRAPHS = ("auto", "on", "off")


def model_fingerprint(model: PreTrainedModel) -> tuple:
    """What a captured graph depends on: storage, shape and dtype of every parameter and buffer, and the
    adapter switches of peft layers (disabled, merged, active adapters)."""
    tensors = tuple((t.data_ptr(), tuple(t.shape), t.dtype) for t in (*model.parameters(), *model.buffers()))
    adapters = tuple(
        (bool(m.disable_adapters), bool(getattr(m, "merged", False)), tuple(m.active_adapters))
        for m in model.modules()
        if hasattr(m, "disable_adapters") and hasattr(m, "active_adapters") and not isinstance(m, PreTrainedModel)
    )
    return tensors, adapters, model.training


class DecodeStep:
    """The static decode step of one slot pool; see the module docstring.

    Args:
        model: the causal LM the pool belongs to (on the pool's device).
        pool: the slot pool (its K/V are written in place).
        temperature, top_k, top_p: sampling settings (fixed for the step: a captured graph bakes them in).
        pad_id: the token idle slots feed.
        cuda_graphs: 'auto' (capture on CUDA, eager elsewhere), 'on' (capture, error if impossible) or 'off'.
        attention: SDPA backend for the step, a key of ``ATTENTION_BACKENDS``.
    """

    def __init__(
        self,
        model: PreTrainedModel,
        pool: SlotPool,
        temperature: float,
        top_k: int,
        top_p: float,
        pad_id: int,
        cuda_graphs: str = "auto",
        attention: str = "efficient",
    ) -> None:
        self.model, self.pool = model, pool
        self.settings = (temperature, top_k, top_p, pad_id, cuda_graphs, attention)
        self.temperature, self.top_k, self.top_p = temperature, top_k, top_p
        device = pool.kv.device
        self.cuda = device.type == "cuda"
        if cuda_graphs == "on" and not self.cuda:
            raise ValueError(f"cuda_graphs='on' needs a CUDA device; the model is on {device}. Use 'auto' or 'off'.")
        self.use_graph = self.cuda and cuda_graphs != "off"
        self.strict = cuda_graphs == "on"
        self.backends = ATTENTION_BACKENDS[attention] if self.cuda else None
        S = pool.num_slots
        # (5, S, 1): rows are (S, 1) views, the shape input_ids, position_ids and the uniforms take as they are
        self.state = torch.zeros(5, S, 1, dtype=torch.long, device=device)  # what the step reads
        self.out = torch.zeros(S, 2, dtype=torch.float64, device=device)  # what it writes: token, log-prob
        if self.cuda:
            self.host_state = torch.zeros(5, S, 1, dtype=torch.long, pin_memory=True)
            self.host_out = torch.zeros(S, 2, dtype=torch.float64, pin_memory=True)
            self.done = torch.cuda.Event()
        else:
            self.host_state, self.host_out = self.state, self.out
        self.rows = self.state.unbind(0)  # five (S, 1) views, made once
        self.host = self.host_state.numpy()[:, :, 0]  # the host's (5, S) view: write it, then call the step
        self.pad_id = pad_id
        self.reset()
        self.graph: torch.cuda.CUDAGraph | None = None
        self.fingerprint: tuple | None = None
        self.captures = 0

    def reset(self) -> None:
        """Every slot idle: the pad token at position 0, key and token index 0."""
        self.host[:] = 0
        self.host[0] = self.pad_id

    # -- the device work ----------------------------------------------------------------------
    def forward(self) -> None:
        """The step itself: forward over every slot, then sampling; reads ``state``, writes ``out``."""
        tokens, positions, k0, k1, t = self.rows  # (S, 1) each
        mask = self.pool.decode_mask(positions)  # (S, 1, 1, T)
        logits = self.model(
            input_ids=tokens,
            position_ids=positions,
            attention_mask=mask,
            cache=self.pool,
            use_cache=True,
            logits_to_keep=1,
        ).logits[:, -1]  # (S, V)
        dtype = torch.float64 if logits.dtype == torch.float64 else torch.float32
        u = counter_uniform(k0, k1, t, dtype)  # (S, 1)
        new, logps = sample_tokens(logits, u, self.temperature, self.top_k, self.top_p)  # (S, 1) each
        torch.cat((new, logps), dim=1, out=self.out)  # (S, 2) float64: one tensor to copy out

    def kernels(self) -> contextlib.AbstractContextManager:
        """The pinned SDPA backend (CUDA), or no constraint."""
        return sdpa_kernel(self.backends, set_priority=True) if self.backends else contextlib.nullcontext()

    # -- CUDA graphs ----------------------------------------------------------------------------
    def prepare(self) -> None:
        """Called before a rollout's first step: drops a captured graph the model no longer matches."""
        if not self.use_graph:
            return
        fingerprint = model_fingerprint(self.model)
        if self.graph is not None and fingerprint != self.fingerprint:
            self.graph = None
        self.fingerprint = fingerprint

    def capture(self) -> None:
        """Warms the step up on a side stream, then captures it as a CUDA graph (falls back on failure).

        The warm-up runs on the state already copied in: it writes the same K/V at the same
        positions as the step about to run, so it changes nothing.
        """
        try:
            side = torch.cuda.Stream()
            side.wait_stream(torch.cuda.current_stream())
            with torch.cuda.stream(side), self.kernels():
                for _ in range(2):
                    self.forward()
            torch.cuda.current_stream().wait_stream(side)
            graph = torch.cuda.CUDAGraph()
            with torch.cuda.graph(graph), self.kernels():
                self.forward()
            self.graph = graph
            self.captures += 1
        except Exception as err:  # noqa: BLE001 - any capture failure means: run eagerly
            if self.strict:
                raise RuntimeError(f"cuda_graphs='on' but the decode step could not be captured: {err}") from err
            self.use_graph, self.graph = False, None
            warnings.warn(
                f"[infgrpo] the decode step runs without CUDA graphs: capturing it failed ({type(err).__name__}: "
                f"{str(err).splitlines()[0] if str(err) else ''}). Set model.sampler.cuda_graphs: off to skip trying.",
                stacklevel=2,
            )
            torch.cuda.synchronize()

    # -- one step -------------------------------------------------------------------------------
    @torch.no_grad()
    def __call__(self) -> np.ndarray:
        """Runs one step on the host's state; returns the (S, 2) host array of tokens and log-probs.

        The array is overwritten by the next call.
        """
        if not self.cuda:
            self.forward()
            return self.host_out.numpy()
        self.state.copy_(self.host_state, non_blocking=True)
        if self.use_graph and self.graph is None:
            self.capture()
        if self.graph is not None:
            self.graph.replay()
        else:
            with self.kernels():
                self.forward()
        self.host_out.copy_(self.out, non_blocking=True)
        self.done.record()
        self.done.synchronize()  # the step's one wait: the host needs the tokens to refill and stop
        return self.host_out.numpy()
