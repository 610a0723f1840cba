"""LengthPredictor: how long will the completions of a prompt be, under the *current* policy?

Learned online from the policy's own finished rollouts, so it follows the policy as training changes
it (the paper's separate BERT classifier goes stale). Two estimates, blended:

1. **A ridge head on the policy's hidden state** at the prompt's last token (``features``, (P, d)
   from :func:`prompt_features`: no second language model). Target: log of the group's mean length.
   Features are L2-normalized and, when d > ``dim``, projected to ``dim`` by a fixed seeded Gaussian
   matrix. The head keeps ridge sufficient statistics ``A = sum x x^T``, ``b = sum x y`` (float64),
   multiplied by ``decay`` each update, so old rollouts fade (a window of ~1 / (1 - decay) updates);
   solving ``(A + ridge I) w = b`` is one (dim + 1)^2 system, microseconds next to a decode step.
2. **A per-prompt history** (prompts seen before, e.g. in the next epoch): an exponential moving
   average of the log mean length, keyed by a hash of the prompt's token ids and images (at most
   ``max_history`` prompts, least recently seen dropped first). It weighs ``min(count, 4)`` against
   the head's 1.

Cold start (nothing learned yet): every prompt gets ``max_length / 2``; equal predictions make every
length-aware refill policy fall back to prompt-major order. The head is used once it has seen
``min_rows`` prompts; before that, the running mean over all prompts.

Predictions are per prompt, so the ``G`` samples of one prompt share one; their spread within the
group is not predictable before they start. Updates are deterministic sums, so ranks of a
distributed run stay identical when ``sync`` reduces them (see :meth:`update`).

    predictor = LengthPredictor("learned", max_length=256)
    preds = predictor.predict(keys, feats)          # (P,) lengths in tokens
    predictor.update(keys, feats, group_lengths)    # after the rollout

    seen = predictor.look(model, prompt_ids)        # the same for a rollout: keys, features, predictions
    predictor.learn(seen, lengths, group_size)      # ... and its lengths, prompt-major

    looks = Looks(predictor, model)                 # a rollout that sees its prompts in parts (dynamic sampling)
    looks.one(prompt); looks.all(prompts)           # predicted lengths, each look recorded per prompt position
    predictor.learn(looks.picked(trained), lengths, group_size)
"""

from __future__ import annotations

import hashlib
import math
import time
from collections import OrderedDict
from collections.abc import Callable, Sequence
from typing import Any, Literal, NamedTuple

import torch

from infgrpo.registry import check_choice, choices
from infgrpo.vision.features import block_types
from infgrpo.vision.forward_inputs import forward_inputs
from infgrpo.vision.inputs import VisionInputs, image_digest

Mode = Literal["learned", "history"]
"""What a :class:`LengthPredictor` blends: the ridge head and the history ('learned'), or the history alone."""
LengthPrediction = Literal[Mode, "none"]
"""``SamplerConfig.length_predictor``: a :data:`Mode`, or 'none' (no predictor)."""
HISTORY_CAP = 4.0  # a prompt's own history counts at most this many times the head


class Prediction(NamedTuple):
    """What :meth:`LengthPredictor.look` saw and said: prompt keys, features (P, d) or None, lengths, seconds."""

    keys: list[str]
    features: torch.Tensor | None
    lengths: list[float]
    seconds: float


def prompt_key(prompt_ids: list[int], vision: VisionInputs | None = None) -> str:
    """A stable 16-hex-digit hash of a prompt's token ids and, for an image prompt, of its images
    (:func:`~infgrpo.vision.inputs.image_digest`: prompts with the same text and different images are different
    prompts); it keys the per-prompt history. A text prompt's key is the hash of its ids alone."""
    data = b"".join(int(t).to_bytes(4, "little", signed=True) for t in prompt_ids) + image_digest(vision)
    return hashlib.blake2b(data, digest_size=8).hexdigest()


@torch.no_grad()
def prompt_features(
    model: torch.nn.Module,
    prompts: list[list[int]],
    batch_size: int = 16,
    visions: Sequence[VisionInputs | None] | None = None,
    dtype: torch.dtype = torch.float32,
) -> torch.Tensor:
    """The model's last hidden state at each prompt's last token: (P, d) in ``dtype`` on the CPU.

    Text: right-padded batches (under causal attention, padding after a prompt's last token cannot change the hidden
    state at it). A batch with images (``visions``: each prompt's, or None) is left-padded and runs as the engine's
    prefill does (:func:`~infgrpo.vision.forward_inputs.forward_inputs`): the images' features at their tokens (those
    the step keeps while the tower is fixed, so the prefill after this look reuses them) and the model's own M-RoPE
    positions. Only the last position's logits are computed (``logits_to_keep=1``).
    """
    device = next(model.parameters()).device
    rows = []
    for i in range(0, len(prompts), batch_size):
        chunk = prompts[i : i + batch_size]
        seen = None if visions is None else visions[i : i + batch_size]
        if seen is not None and any(v is not None for v in seen):
            rows.append(_image_prompt_features(model, chunk, seen, device).to("cpu", dtype))
            continue
        width = max(map(len, chunk))
        ids = torch.zeros(len(chunk), width, dtype=torch.long, device=device)
        mask = torch.zeros_like(ids)
        for r, p in enumerate(chunk):
            ids[r, : len(p)] = torch.tensor(p, device=device)
            mask[r, : len(p)] = 1
        out = model(input_ids=ids, attention_mask=mask, output_hidden_states=True, use_cache=False, logits_to_keep=1)
        last = torch.tensor([len(p) - 1 for p in chunk], device=device)
        rows.append(out.hidden_states[-1][torch.arange(len(chunk), device=device), last].to("cpu", dtype))  # (b, d)
    return torch.cat(rows)


def _image_prompt_features(
    model: torch.nn.Module, prompts: list[list[int]], visions: Sequence[VisionInputs | None], device: torch.device
) -> torch.Tensor:
    """:func:`prompt_features` of one batch holding image prompts: left-padded, every last token in the last column,
    with the prompts' images and positions; (b, d) in the model's dtype, on its device."""
    width = max(map(len, prompts))
    ids = torch.tensor([[0] * (width - len(p)) + list(p) for p in prompts], device=device)  # (b, L)
    real = torch.tensor([[0] * (width - len(p)) + [1] * len(p) for p in prompts], device=device)  # (b, L)
    positions, _, images = forward_inputs(model, ids, real, visions)
    images |= block_types(model, visions, width, 0, device)  # Gemma 3: its image blocks, from the token types
    out = model(
        input_ids=ids, attention_mask=real, position_ids=positions, output_hidden_states=True, use_cache=False,
        logits_to_keep=1, **images,
    )  # fmt: skip
    return out.hidden_states[-1][:, -1]  # (b, d)


def pool_over_ranks(gather: Callable[[torch.Tensor], torch.Tensor]) -> Callable[[dict[str, Any]], dict[str, Any]]:
    """A ``LengthPredictor.sync`` for data-parallel ranks that each hold the same number of prompts.

    ``gather`` maps a tensor (n, ...) of this rank to every rank's, concatenated in rank order
    (world * n, ...). The pooled update is what one process holding the global batch would learn,
    in the same order, so every rank's predictor state stays identical.
    """

    def sync(delta: dict[str, Any]) -> dict[str, Any]:
        keys = torch.tensor([int(k, 16) - 2**63 for k in delta["keys"]], dtype=torch.int64)  # 64-bit hashes
        out = {
            "keys": [f"{int(k) + 2**63:016x}" for k in gather(keys).tolist()],
            "y": gather(torch.tensor(delta["y"], dtype=torch.float64)).tolist(),
        }
        out["rows"], out["y_sum"] = float(len(out["y"])), float(sum(out["y"]))
        if "A" in delta:
            out["A"], out["b"] = (gather(delta[k][None]).sum(dim=0) for k in ("A", "b"))
        return out

    return sync


class LengthPredictor:
    """Predicts completion lengths per prompt; see the module docstring.

    Args:
        mode: ``learned`` (ridge head + history) or ``history`` (history + running mean only).
        max_length: the rollout's ``max_new_tokens``; predictions are clipped to [1, max_length].
        dim: feature dimension after projection.
        ridge: L2 penalty of the head (the bias is not penalized).
        decay: factor on the head's statistics per update (1 = never forget).
        min_rows: prompts seen before the head is trusted.
        max_history: prompts remembered by the history.
        seed: seed of the projection matrix.
    """

    def __init__(
        self,
        mode: Mode = "learned",
        max_length: int = 128,
        dim: int = 128,
        ridge: float = 1.0,
        decay: float = 0.9,
        min_rows: int = 16,
        max_history: int = 100_000,
        seed: int = 0,
    ) -> None:
        check_choice("length_predictor", mode, choices(Mode))
        if not 0 < decay <= 1:
            raise ValueError(f"decay={decay} must be in (0, 1]")
        self.mode, self.max_length, self.dim = mode, max_length, dim
        self.ridge, self.decay, self.min_rows, self.max_history, self.seed = ridge, decay, min_rows, max_history, seed
        self.sync: Callable[[dict[str, Any]], dict[str, Any]] | None = None
        """Set by a distributed run: combines the update of every rank (sums tensors, concatenates lists)."""
        self.A = torch.zeros(dim + 1, dim + 1, dtype=torch.float64)  # sum of x x^T (bias last)
        self.b = torch.zeros(dim + 1, dtype=torch.float64)  # sum of x y
        self.rows = 0.0  # decayed count of prompts seen by the head
        self.seen = 0  # prompts seen, not decayed: the head is trusted from min_rows on
        self.y_sum = 0.0  # decayed sum of targets (the running mean's numerator)
        self.history: OrderedDict[str, tuple[float, int]] = OrderedDict()  # key -> (ema of y, count)
        self._w: torch.Tensor | None = None
        self._proj: torch.Tensor | None = None

    @property
    def needs_features(self) -> bool:
        """Whether :meth:`predict` and :meth:`update` use prompt features (mode ``learned``)."""
        return self.mode == "learned"

    # -- features ---------------------------------------------------------------------------
    def design(self, features: torch.Tensor) -> torch.Tensor:
        """Rows of the ridge problem: normalized, projected features with a bias column, (P, dim + 1)."""
        x = features.double()
        x = x / x.norm(dim=1, keepdim=True).clamp_min(1e-12)
        if x.shape[1] != self.dim:
            if self._proj is None or self._proj.shape[0] != x.shape[1]:
                gen = torch.Generator().manual_seed(self.seed)
                self._proj = torch.randn(x.shape[1], self.dim, generator=gen, dtype=torch.float64)
            x = x @ self._proj
            x = x / x.norm(dim=1, keepdim=True).clamp_min(1e-12)
        return torch.cat([x * math.sqrt(self.dim), torch.ones(len(x), 1, dtype=torch.float64)], dim=1)

    def weights(self) -> torch.Tensor:
        """The ridge head's weights (dim + 1,), solved from ``A`` and ``b`` and cached until the next update."""
        if self._w is None:
            reg = torch.eye(self.dim + 1, dtype=torch.float64) * self.ridge
            reg[-1, -1] = 1e-8  # the bias is not penalized
            self._w = torch.linalg.solve(self.A + reg, self.b)
        return self._w

    # -- predict / update -------------------------------------------------------------------
    def predict(self, keys: list[str], features: torch.Tensor | None = None) -> list[float]:
        """Predicted mean completion length (tokens) of each prompt; ``features`` (P, d) for ``learned``."""
        if self.rows == 0 and not self.history:
            return [self.max_length / 2] * len(keys)  # cold start: no information, equal predictions
        mean = self.y_sum / self.rows if self.rows > 0 else math.log(self.max_length / 2)
        if self.mode == "learned" and features is not None and self.seen >= self.min_rows:
            base = (self.design(features) @ self.weights()).tolist()
        else:
            base = [mean] * len(keys)
        preds = []
        for key, y in zip(keys, base, strict=True):
            if key in self.history:
                h, count = self.history[key]
                c = min(count, HISTORY_CAP)
                y = (c * h + y) / (c + 1)
            preds.append(min(max(math.exp(y), 1.0), float(self.max_length)))
        return preds

    def update(self, keys: list[str], features: torch.Tensor | None, group_lengths: list[list[int]]) -> None:
        """Learns from finished rollouts: ``group_lengths[i]`` are the lengths of prompt ``i``'s samples."""
        y = torch.tensor([math.log(max(sum(g) / len(g), 1.0)) for g in group_lengths], dtype=torch.float64)
        delta: dict[str, Any] = {"keys": list(keys), "y": y.tolist(), "rows": float(len(keys)), "y_sum": float(y.sum())}
        if self.mode == "learned" and features is not None:
            x = self.design(features)
            delta["A"], delta["b"] = x.T @ x, x.T @ y
        if self.sync is not None:
            delta = self.sync(delta)
        self.apply(delta)

    def look(
        self, model: torch.nn.Module, prompt_ids: list[list[int]], visions: Sequence[VisionInputs | None] | None = None
    ) -> Prediction:
        """Keys, features (mode ``learned``: one forward of ``model``) and predicted lengths of a rollout's prompts
        (``visions``: each prompt's images, which its key and its features see)."""
        start = time.perf_counter()
        keys = [prompt_key(p, None if visions is None else visions[i]) for i, p in enumerate(prompt_ids)]
        features = prompt_features(model, prompt_ids, visions=visions) if self.needs_features else None
        return Prediction(keys, features, self.predict(keys, features), time.perf_counter() - start)

    def learn(self, seen: Prediction, lengths: list[int], group_size: int) -> None:
        """:meth:`update` from a rollout that :meth:`look` saw: ``lengths`` prompt-major, ``group_size`` per prompt."""
        self.update(seen.keys, seen.features, [lengths[i : i + group_size] for i in range(0, len(lengths), group_size)])

    def apply(self, delta: dict[str, Any]) -> None:
        """Folds one (possibly cross-rank) update into the state."""
        self.A.mul_(self.decay)
        self.b.mul_(self.decay)
        if "A" in delta:
            self.A += delta["A"]
            self.b += delta["b"]
        self.rows = self.rows * self.decay + delta["rows"]
        self.seen += int(delta["rows"])
        self.y_sum = self.y_sum * self.decay + delta["y_sum"]
        for key, y in zip(delta["keys"], delta["y"], strict=True):
            h, count = self.history.pop(key, (y, 0))
            self.history[key] = (0.5 * h + 0.5 * y if count else y, count + 1)
        while len(self.history) > self.max_history:
            self.history.popitem(last=False)
        self._w = None

    # -- checkpointing ----------------------------------------------------------------------
    def state_dict(self) -> dict[str, Any]:
        """The learned state: the head's statistics, the running mean and the per-prompt history, in order."""
        return {
            "A": self.A.clone(),
            "b": self.b.clone(),
            "rows": self.rows,
            "seen": self.seen,
            "y_sum": self.y_sum,
            "history_keys": list(self.history),
            "history_values": [list(v) for v in self.history.values()],
        }

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Restores a :meth:`state_dict`; the head's weights are solved again on the next prediction."""
        self.A, self.b = state["A"].clone().double(), state["b"].clone().double()
        self.rows, self.y_sum, self.seen = float(state["rows"]), float(state["y_sum"]), int(state["seen"])
        self.history = OrderedDict(
            (k, (float(v[0]), int(v[1]))) for k, v in zip(state["history_keys"], state["history_values"], strict=True)
        )
        self._w = None


class Looks:
    """What a :class:`LengthPredictor` saw during one rollout, prompt position by position: a rollout may look at
    all its prompts at once (a fixed batch: one forward) or one at a time as it draws them (dynamic sampling);
    :meth:`picked` assembles the looks of the prompts it trained on for :meth:`LengthPredictor.learn`."""

    def __init__(
        self, predictor: LengthPredictor, model: torch.nn.Module, visions: Sequence[VisionInputs | None] | None = None
    ) -> None:
        self.predictor, self.model, self.visions = predictor, model, visions
        """``visions``: each prompt position's images (a draw appends to it as it draws), or None: text prompts."""
        self.rows: list[tuple[Prediction, int]] = []  # prompt position -> (the look that saw it, its row there)

    def all(self, prompt_ids: list[list[int]]) -> list[float]:
        """One look at ``prompt_ids`` (the next positions); their predicted lengths."""
        start = len(self.rows)
        visions = None if self.visions is None else self.visions[start : start + len(prompt_ids)]
        seen = self.predictor.look(self.model, prompt_ids, visions)
        self.rows += [(seen, r) for r in range(len(prompt_ids))]
        return seen.lengths

    def one(self, prompt_ids: list[int]) -> float:
        """A look at one prompt (the next position); its predicted length."""
        return self.all([prompt_ids])[0]

    def picked(self, positions: list[int]) -> Prediction:
        """The looks at ``positions`` as one :class:`Prediction` (features (len(positions), d) or None); its
        seconds are those of every look of the rollout."""
        rows = [self.rows[i] for i in positions]
        with_features = rows[0][0].features is not None
        feats = torch.cat([seen.features[r : r + 1] for seen, r in rows]) if with_features else None
        looks = {id(seen): seen for seen, _ in self.rows}.values()
        return Prediction(
            [seen.keys[r] for seen, r in rows], feats, [seen.lengths[r] for seen, r in rows],
            sum(seen.seconds for seen in looks),
        )  # fmt: skip
