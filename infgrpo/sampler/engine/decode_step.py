"""DecodeStep: one decode step over the whole slot pool, of static shape, optionally as a CUDA graph.

    step = DecodeStep(model, pool, StepSettings(temperature=1.0, top_k=0, top_p=1.0, pad_id=0))
    step.start(slot, token, position, key, t)   # a sequence enters a slot (host bookkeeping only); delta= (M-RoPE)
    out = step()                                # (S, 2) host array: every slot's next token and its log-prob
    step.advance(slot, token)                   # it feeds that token, one position further, next step
    step.idle(slot)                             # the slot is free: pad token at position 0

The step reads its inputs from one int64 state tensor (6, S, 1), one column per slot, written only
through the four operations above (the rows are this file's business): the token to feed, its
position (= the slot's length: its K/V are written there; the one copy of it), the sequence's
stream key words k0, k1 (:mod:`infgrpo.sampler.engine.counter_rng`), an offset, the position of the
prompt's last token (so ``t = position - offset`` is the index in the completion of the token this
step samples, computed on the device), and the prompt's rotary delta: a vision-language model with
M-RoPE (Qwen-VL) reads the token at rotary position ``position + delta`` on all three rows
(:func:`~infgrpo.vision.positions.decode_positions`; an image takes fewer positions than tokens), so a
slot refilled with another prompt's sample, or a packed move, carries its own delta; 0 otherwise. It
writes one float64 tensor (S, 2): the sampled token ids and their log-probs. Per step the host makes
**one** copy in (state, from pinned memory, asynchronous) and **one** copy out (into pinned memory),
then waits on an event: no ``.item()``, no ``torch.tensor(list)``, no per-slot kernel. On CPU both are
the same tensors and nothing is copied.

Inside, everything is device work over all slots at once: the decode mask from the positions, the
model's forward over the pool (K/V written with ``scatter_``), counter-based uniforms, and sampling
(temperature / top-k / top-p, inverse CDF, the chosen token's log-prob; a vision-language model's image
placeholders are never drawn: ``StepSettings.banned``). Its shapes never change, so
on CUDA it is captured once as a CUDA graph (``cuda_graphs``: 'auto' or 'on') and replayed: one
launch a step instead of ~1,500. The graph is recaptured when the model's parameters or buffers
move to other storage, or when peft adapters are toggled, merged or switched (a graph replays raw
memory and the Python branches taken at capture). Capturing runs through
:func:`~infgrpo.sampler.engine.graph_capture.capture_graph` (whatever fails, the current stream and the
allocator are as before). Running out of memory while warming up or capturing raises
``torch.OutOfMemoryError``, as an eager step would, so the rollout retries with half the slots. Any
other failure falls back to eager execution with one warning saying why ('on' raises instead) and
is remembered for that model fingerprint and those settings in a
:class:`~infgrpo.sampler.engine.graph_capture.CaptureFailures` the pool keeper holds, so a step rebuilt
for the next rollout does not try again; ``fallback`` then says why the step runs eagerly.

Off CUDA the step computes only the busy slots (``decode_width``: 'auto' or 'busy'): the runner keeps
the running sequences packed at the front of the pool (:meth:`DecodeStep.move`, one K/V copy when a
sequence moves down into a slot that freed) and :meth:`DecodeStep.set_busy` narrows the step to
those rows (at least :data:`MIN_BUSY_WIDTH`): a CPU's step costs what its rows cost, and a rollout's
tail runs few. Each row is computed alone, so the tokens and log-probs are those of the whole-pool step.

The attention kernel is pinned for the step (``attention``): on CUDA the default 'efficient' is
PyTorch's memory-efficient SDPA, which takes the additive mask and needs no per-shape plan;
'cudnn', 'math' or 'auto' (PyTorch's choice) can be measured against it (flash attention takes no
mask, so it is not offered).
"""

from __future__ import annotations

import contextlib
import warnings
from dataclasses import dataclass
from typing import Literal

import numpy as np
import torch
from torch.nn.attention import SDPBackend, sdpa_kernel
from transformers import PreTrainedModel

from infgrpo.sampler.engine.counter_rng import counter_uniform
from infgrpo.sampler.engine.graph_capture import CaptureFailures, GraphRuntime, capture_graph, is_memory_error, one_line
from infgrpo.sampler.engine.sampling import sample_tokens
from infgrpo.sampler.engine.slot_pool import SlotPool
from infgrpo.settings import ConfigError, InfgrpoWarning
from infgrpo.vision.families import family_of
from infgrpo.vision.positions import decode_positions

CudaGraphs = Literal["auto", "on", "off"]
"""``SamplerConfig.cuda_graphs``: capture the step on CUDA devices ('auto'), insist on it ('on'), or never."""
DecodeAttention = Literal["efficient", "cudnn", "math", "auto"]
"""``SamplerConfig.decode_attention``: the SDPA kernel pinned for the step (the keys of ``ATTENTION_BACKENDS``)."""
DecodeWidth = Literal["auto", "pool", "busy"]
"""``SamplerConfig.decode_width``: rows a step computes: every slot ('pool'), the busy ones ('busy'), or by device."""
MIN_BUSY_WIDTH = 8
"""Fewest rows a 'busy' step computes (idle slots fill up to it): CPU GEMMs of under ~5 rows take another kernel
and round differently, so a narrower step would change the tokens' log-probs in their last bits."""

# The pinned kernel first; the math kernel behind it only for inputs the pinned one refuses (it takes any mask).
ATTENTION_BACKENDS: dict[str, list[SDPBackend] | None] = {
    "efficient": [SDPBackend.EFFICIENT_ATTENTION, SDPBackend.MATH],
    "cudnn": [SDPBackend.CUDNN_ATTENTION, SDPBackend.MATH],
    "math": [SDPBackend.MATH],
    "auto": None,
}
_TOKEN, _POSITION, _K0, _K1, _OFFSET, _DELTA = range(6)  # the rows of the state


@dataclass(frozen=True)
class StepSettings:
    """What a step bakes in (a captured graph replays them): sampling, the idle slots' token, graph and kernel, and
    the ids never drawn (``banned``: a vision-language model's image placeholders; also the prefills')."""

    temperature: float
    top_k: int
    top_p: float
    pad_id: int
    cuda_graphs: CudaGraphs = "auto"
    attention: DecodeAttention = "efficient"
    width: DecodeWidth = "auto"
    banned: tuple[int, ...] = ()


def check_graph_width(cuda_graphs: str, width: str, cuda: bool = True) -> bool:
    """Whether a step computes only the busy slots (``decode_width`` 'busy', or 'auto' off CUDA); a ConfigError when
    ``cuda_graphs='on'`` meets such a step (a graph replays one shape). ``cuda``: the step's device (the settings'
    own check, before any device, takes 'auto' as on CUDA)."""
    busy = width == "busy" or (width == "auto" and not cuda)
    if busy and cuda_graphs == "on":
        got = f"decode_width={width!r}" + ("" if width == "busy" else ", which is 'busy' off CUDA")
        raise ConfigError(
            f"cuda_graphs='on' needs decode_width 'pool' or 'auto' (a graph replays one shape); got {got}"
        )
    return busy


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
        settings: sampling, pad token, CUDA graphs ('auto': capture on CUDA, eager elsewhere; 'on':
            capture, error if impossible; 'off') and the SDPA kernel (a key of ``ATTENTION_BACKENDS``).
        failures: the captures that failed before, shared with the steps built after this one (the pool
            keeper's); default: this step's own.
        runtime: the CUDA calls a capture makes (default on CUDA: :class:`GraphRuntime`; none elsewhere,
            where a CPU test may pass a fake device's).
    """

    def __init__(
        self,
        model: PreTrainedModel,
        pool: SlotPool,
        settings: StepSettings,
        failures: CaptureFailures | None = None,
        runtime: GraphRuntime | None = None,
    ) -> None:
        self.model, self.pool, self.settings = model, pool, settings
        device = pool.kv.device
        self.cuda = device.type == "cuda"
        self.runtime = runtime if runtime is not None else GraphRuntime() if self.cuda else None
        if settings.cuda_graphs == "on" and self.runtime is None:
            raise ValueError(f"cuda_graphs='on' needs a CUDA device; the model is on {device}. Use 'auto' or 'off'.")
        self.busy_width = check_graph_width(settings.cuda_graphs, settings.width, self.cuda)
        self.use_graph = self.runtime is not None and settings.cuda_graphs != "off" and not self.busy_width
        self.failures = failures if failures is not None else CaptureFailures()
        self.strict = settings.cuda_graphs == "on"
        self.backends = ATTENTION_BACKENDS[settings.attention] if self.cuda else None
        S = pool.num_slots
        family = family_of(model.config)
        self.scheme = family.positions if family is not None else None  # "mrope": rotary positions + each delta
        self.banned = torch.tensor(settings.banned, dtype=torch.long, device=device) if settings.banned else None
        # (6, S, 1): rows are (S, 1) views, the shape input_ids, position_ids and the uniforms take as they are
        self.state = torch.zeros(6, S, 1, dtype=torch.long, device=device)  # what the step reads
        self.out = torch.zeros(S, 2, dtype=torch.float64, device=device)  # what it writes: token, log-prob
        if self.cuda:
            self.host_state = torch.zeros(6, S, 1, dtype=torch.long, pin_memory=True)
            self.host_out = torch.zeros(S, 2, dtype=torch.float64, pin_memory=True)
            self.done = torch.cuda.Event()
        else:
            self.host_state, self.host_out = self.state, self.out
        self.rows = self.state.unbind(0)  # six (S, 1) views, made once
        self._host = self.host_state.numpy()[:, :, 0]  # the host's (6, S) view, written by the operations below
        self.width = S  # rows the next step computes: every slot, or (busy_width) the busy front of the pool
        self.reset()
        self.graph: torch.cuda.CUDAGraph | None = None
        self.fingerprint: tuple | None = None
        self.captures = 0
        """Graphs this step captured so far (a kept step replays its graph in later rollouts)."""
        self.fallback: str | None = None
        """Why the step runs eagerly although graphs are on: a failed capture's one-line reason, or None."""

    # -- the host's operations on the state (no device work) ------------------------------------
    def start(self, slot: int, token: int, position: int, key: tuple[int, int], t: int, delta: int = 0) -> None:
        """A sequence enters ``slot``: feed ``token`` at ``position`` and sample its token of index ``t``; its
        prompt's rotary ``delta`` (M-RoPE prompts with images; else 0)."""
        self._host[:, slot] = (token, position, key[0], key[1], position - t, delta)

    def advance(self, slot: int, token: int) -> None:
        """The sequence in ``slot`` feeds ``token`` next, one position further (its length grows by one)."""
        self._host[_TOKEN, slot] = token
        self._host[_POSITION, slot] += 1

    def idle(self, slot: int) -> None:
        """``slot`` runs idle: the pad token at position 0 (it sees only that position; its output is unused)."""
        self._host[:, slot] = (self.settings.pad_id, 0, 0, 0, 0, 0)

    def reset(self) -> None:
        """Every slot idle."""
        self._host[:] = 0
        self._host[_TOKEN] = self.settings.pad_id
        self.width = self.pool.num_slots

    def move(self, src: int, dst: int) -> None:
        """The sequence in slot ``src`` goes on in the idle slot ``dst``: its K/V (positions before its
        next one) are copied there, ``dst`` takes its state, ``src`` idles. Its tokens do not change:
        its random stream is its own, and each row of the step is computed alone."""
        self.pool.move(src, dst, int(self._host[_POSITION, src]))
        self._host[:, dst] = self._host[:, src]
        self.idle(src)

    def set_busy(self, busy: int) -> None:
        """Slots ``0 .. busy - 1`` are the busy ones: a busy-width step computes them (at least
        :data:`MIN_BUSY_WIDTH` rows, idle ones filling up); a pool-width step always computes every slot."""
        S = self.pool.num_slots
        self.width = min(S, max(busy, MIN_BUSY_WIDTH)) if self.busy_width else S

    # -- the device work ----------------------------------------------------------------------
    def forward(self) -> None:
        """The step itself: forward over every slot, then sampling; reads ``state``, writes ``out``."""
        n = self.width  # S, or fewer on a busy-width step (rows 0 .. n - 1)
        rows = self.rows if n == self.pool.num_slots else tuple(r[:n] for r in self.rows)
        tokens, positions, k0, k1, offsets, deltas = rows  # (n, 1) each
        mask = self.pool.prepare_step(positions)  # (n, 1, 1, T); the forward below writes K/V at `positions`
        rotary = decode_positions(positions, deltas, self.scheme) if self.scheme == "mrope" else positions
        logits = self.model(
            input_ids=tokens,
            position_ids=rotary,  # (n, 1); M-RoPE: (3, n, 1), the cache position + the prompt's delta
            attention_mask=mask,
            cache=self.pool,
            use_cache=True,
            logits_to_keep=1,
        ).logits[:, -1]  # (n, V)
        dtype = torch.float64 if logits.dtype == torch.float64 else torch.float32
        u = counter_uniform(k0, k1, positions - offsets, dtype)  # (n, 1): token index t of each slot's stream
        s = self.settings
        new, logps = sample_tokens(logits, u, s.temperature, s.top_k, s.top_p, self.banned)  # (n, 1) each
        out = self.out if n == self.pool.num_slots else self.out[:n]
        torch.cat((new, logps), dim=1, out=out)  # (n, 2) float64: one tensor to copy out

    def kernels(self) -> contextlib.AbstractContextManager:
        """The pinned SDPA backend (CUDA), or no constraint."""
        return sdpa_kernel(self.backends, set_priority=True) if self.backends else contextlib.nullcontext()

    # -- CUDA graphs ----------------------------------------------------------------------------
    def prepare(self) -> None:
        """Called before a rollout's first step: drops a captured graph the model no longer matches, and
        looks up whether capturing for this model and these settings failed before."""
        if not self.use_graph:
            return
        fingerprint = model_fingerprint(self.model)
        if self.graph is not None and fingerprint != self.fingerprint:
            self.graph = None
        self.fingerprint = fingerprint
        self.fallback = self.failures.reason(self.capture_key())

    def capture_key(self) -> tuple:
        """What a capture depends on: the model's fingerprint and the step's settings."""
        fingerprint = self.fingerprint if self.fingerprint is not None else model_fingerprint(self.model)
        return fingerprint, self.settings

    def ensure_graph(self) -> None:
        """Captures the step unless it has a graph or capturing it failed before ('on': raises then)."""
        if self.graph is not None:
            return
        if self.fallback is None:
            self.capture()
        elif self.strict:
            raise RuntimeError(f"cuda_graphs='on' but the decode step could not be captured: {self.fallback}")

    def capture(self) -> None:
        """Warms the step up on a side stream, then captures it as a CUDA graph; see the module docstring.

        The warm-up runs on the state already copied in: it writes the same K/V at the same
        positions as the step about to run, so it changes nothing.
        """
        try:
            graph = capture_graph(self.forward, self.kernels, self.runtime)
        except Exception as err:  # noqa: BLE001 - out of memory goes on as such; anything else means: run eagerly
            if is_memory_error(err):
                if isinstance(err, torch.OutOfMemoryError):
                    raise
                raise torch.OutOfMemoryError(f"capturing the decode step: {one_line(err)}") from err
            self.fallback = reason = one_line(err)
            self.failures.remember(self.capture_key(), reason)
            if self.strict:
                raise RuntimeError(f"cuda_graphs='on' but the decode step could not be captured: {reason}") from err
            warnings.warn(
                f"[infgrpo] the decode step runs without CUDA graphs: capturing it failed ({reason}); not "
                "retried for this model. Set model.sampler.cuda_graphs: off to skip trying.",
                InfgrpoWarning,
                stacklevel=2,
            )
            return
        self.graph = graph
        self.captures += 1

    # -- one step -------------------------------------------------------------------------------
    @torch.no_grad()
    def __call__(self) -> np.ndarray:
        """Runs one step on the host's state; returns the (S, 2) host array of tokens and log-probs.

        The array is overwritten by the next call; on a busy-width step its rows past ``width`` are stale.
        """
        if self.cuda:
            self.state.copy_(self.host_state, non_blocking=True)
        if self.use_graph:
            self.ensure_graph()
        if self.graph is not None:
            self.graph.replay()
        else:
            with self.kernels():
                self.forward()
        if not self.cuda:
            return self.host_out.numpy()
        self.host_out.copy_(self.out, non_blocking=True)
        self.done.record()
        self.done.synchronize()  # the step's one wait: the host needs the tokens to refill and stop
        return self.host_out.numpy()
