"""The visual task of the tiny vision-language models: coloured shapes in a small image, with verifiable answers.

    rows = make_split(8, "train", seed=0)   # [{"prompt": [{"role": "user", ...}], "image": <PIL>, "answer": ...}]
    correct([[{"role": "assistant", "content": "red blue"}]], ["red blue"])   # [1.0]

An image is 56 x 56 pixels on white: a grid of 4 x 4 cells of 14 pixels (one image token of the tiny models each),
with 1 to 4 shapes (a square or a disc, 10 pixels across) in distinct columns, each in a random row and one of four
colours. Two kinds of question, each one user message (TRL's conversational format; the image goes in the ``image``
column and is injected before the text, as TRL does):

- ``colours``: "colours, left to right?" -> ``red blue`` (3 to 27 characters: answers of varied length);
- ``count``: "how many shapes?" -> ``2``.

The answer depends on the image alone, so a model must look at it. :func:`flawed` is the plausible wrong answer the
warm start imitates part of the time (the last colour left out; the count one short), so the shipped models sample
right and flawed answers alike and GRPO has something to improve. Run ``python -m infgrpo.assets.shapes`` to print
a few rows.
"""

from __future__ import annotations

import random
from dataclasses import dataclass
from typing import Any

SIZE, CELL = 56, 14
"""The image's side and a grid cell's, in pixels (4 x 4 cells)."""
COLOURS = {"red": (220, 30, 30), "green": (30, 170, 60), "blue": (40, 70, 220), "yellow": (230, 200, 20)}
KINDS = ("colours", "count")
QUESTIONS = {"colours": "colours, left to right?", "count": "how many shapes?"}


@dataclass(frozen=True)
class Shape:
    """One shape: its grid column and row, colour name and form (``square`` or ``disc``)."""

    column: int
    row: int
    colour: str
    form: str


@dataclass(frozen=True)
class Scene:
    """An image's shapes, left to right."""

    shapes: tuple[Shape, ...]

    def answer(self, kind: str) -> str:
        """The correct answer to the question of ``kind``."""
        if kind == "colours":
            return " ".join(s.colour for s in self.shapes)
        if kind == "count":
            return str(len(self.shapes))
        raise ValueError(f"kind={kind!r} is no question of the shapes task; valid: {', '.join(KINDS)}")

    def flawed(self, kind: str) -> str:
        """A plausible wrong answer: the last colour left out (one shape: its colour twice), or a count one short
        (one shape: 2)."""
        if kind == "colours":
            colours = [s.colour for s in self.shapes]
            return " ".join(colours[:-1] if len(colours) > 1 else colours * 2)
        n = len(self.shapes)
        return str(n - 1 if n > 1 else 2)

    def key(self) -> str:
        """A string naming the scene (the split's uniqueness and train/eval separation)."""
        return ";".join(f"{s.column}{s.row}{s.colour[0]}{s.form[0]}" for s in self.shapes)


def sample_scene(rng: random.Random) -> Scene:
    """1 to 4 shapes in distinct columns, left to right, each in a random row, colour and form."""
    columns = sorted(rng.sample(range(SIZE // CELL), rng.randint(1, 4)))
    shapes = tuple(
        Shape(c, rng.randrange(SIZE // CELL), rng.choice(list(COLOURS)), rng.choice(("square", "disc")))
        for c in columns
    )
    return Scene(shapes)


def draw(scene: Scene) -> Any:
    """The scene as a 56 x 56 RGB ``PIL.Image`` (needs Pillow: ``pip install -e ".[vision]"``)."""
    from PIL import Image, ImageDraw

    image = Image.new("RGB", (SIZE, SIZE), (255, 255, 255))
    pen = ImageDraw.Draw(image)
    for s in scene.shapes:
        x, y = s.column * CELL + 2, s.row * CELL + 2
        box = (x, y, x + CELL - 5, y + CELL - 5)
        (pen.rectangle if s.form == "square" else pen.ellipse)(box, fill=COLOURS[s.colour])
    return image


def is_eval_scene(scene: Scene, eval_share: int = 10) -> bool:
    """Held-out scenes by a hash of the scene, so the splits never share an image."""
    import hashlib

    return int(hashlib.md5(scene.key().encode()).hexdigest(), 16) % eval_share == 0


def make_split(n: int, split: str, seed: int) -> list[dict[str, Any]]:
    """``n`` rows of ``split`` (``train`` or ``eval``): ``prompt`` (one user message), ``image`` (PIL), ``answer``,
    ``kind``; the kinds alternate, no (scene, kind) twice; reproducible from ``seed``."""
    if split not in ("train", "eval"):
        raise ValueError(f"split={split!r}; valid: 'train', 'eval'")
    rng, seen, rows = random.Random(seed), set(), []
    while len(rows) < n:
        scene, kind = sample_scene(rng), KINDS[len(rows) % len(KINDS)]
        if (scene.key(), kind) in seen or is_eval_scene(scene) != (split == "eval"):
            continue
        seen.add((scene.key(), kind))
        prompt = [{"role": "user", "content": QUESTIONS[kind]}]
        rows.append({"prompt": prompt, "image": draw(scene), "answer": scene.answer(kind), "kind": kind,
                     "flawed": scene.flawed(kind)})  # fmt: skip
    return rows


def _final_answer(completion: list[dict[str, Any]] | str) -> str:
    if isinstance(completion, str):
        return completion
    turns = [m for m in completion if m.get("role") == "assistant"]
    content = turns[-1].get("content") if turns else ""
    if isinstance(content, list):  # content blocks: the text ones
        content = "".join(b.get("text", "") for b in content if isinstance(b, dict))
    return content or ""


def correct(completions: list, answer: list[str], **kwargs: Any) -> list[float]:
    """Reward (TRL's convention): 1.0 when the completion's answer, whitespace-trimmed, is ``answer``, else 0.0.

    ``completions[i]`` is the assistant message list of a conversational row, or a string.
    """
    return [float(_final_answer(c).strip() == a) for c, a in zip(completions, answer, strict=True)]


if __name__ == "__main__":
    for row in make_split(6, "train", seed=0):
        print(f"{row['prompt'][0]['content']!r:28} -> {row['answer']!r:24} (flawed: {row['flawed']!r})")
