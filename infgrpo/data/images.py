"""A row's images (TRL's ``image`` and ``images`` columns), and their injection into its conversation, as TRL does.

    images = row_images({"prompt": [...], "image": "cat.png"}, "train", 0, root=Path("data"))   # [PIL image]
    messages = inject_images([{"role": "user", "content": "What is it?"}], images)
    # [{"role": "user", "content": [{"type": "image", "image": <PIL>}, {"type": "text", "text": "What is it?"}]}]

TRL 1.16's rules (``GRPOTrainer._generate_and_score_completions`` and ``trl.data_utils.prepare_multimodal_messages``,
tested against the latter): ``images`` (a list a row) wins over ``image`` (one); None or an empty list is a text-only
row; every string content becomes a text block, and the first user message with string content gets one
``{"type": "image", "image": ...}`` block per image before its text. A conversation whose blocks already hold images is
left as it is, and its placeholders without an image take the row's images in order (their count must match).

A value may be a ``PIL.Image``, what a ``datasets.Image`` column holds in a file (``{"bytes": ..., "path": ...}``), or a
local file path (a relative one is looked up under ``root``, the data's folder, then the working folder). Images are
decoded when read and held in memory (a split of N images of P pixels holds about 3 N P bytes).
"""

from __future__ import annotations

import io
from pathlib import Path
from typing import Any

from infgrpo.settings import ConfigError

IMAGE_COLUMNS = ("images", "image")
"""TRL's image columns, the first present wins."""


def image_column(row: dict[str, Any]) -> str | None:
    """The row's image column (``images`` before ``image``, as TRL reads them), or None."""
    return next((c for c in IMAGE_COLUMNS if c in row), None)


def row_images(row: dict[str, Any], split: str, index: int, root: Path | None = None) -> list[Any] | None:
    """The row's images as decoded ``PIL`` images, or None for a text-only row; a ConfigError naming the row and
    the column for a value of the wrong type or a missing file."""
    column = image_column(row)
    if column is None or row[column] is None:
        return None
    where = f"row {index} of split {split!r}, column {column!r}"
    value = row[column]
    if column == "images":
        if not isinstance(value, list | tuple):
            raise ConfigError(
                f"{where} holds a {type(value).__name__}; 'images' holds a list of images a row (PIL images, "
                "datasets.Image values or local file paths); one image a row goes in an 'image' column"
            )
        images = [open_image(v, f"{where} (image {i})", root) for i, v in enumerate(value)]
    else:
        if isinstance(value, list | tuple):
            raise ConfigError(
                f"{where} holds a list; 'image' holds one image a row: rename the column to 'images' (TRL's name for "
                "a list of images)"
            )
        images = [open_image(value, where, root)]
    return images or None


def open_image(value: Any, where: str, root: Path | None = None) -> Any:
    """One image value as a decoded ``PIL.Image`` (see the module docstring); a ConfigError naming ``where``."""
    try:
        from PIL import Image
    except ImportError as err:  # pragma: no cover - the vision extra is missing
        raise ConfigError(f'{where} holds images, which need Pillow: pip install -e ".[vision]"') from err
    if isinstance(value, Image.Image):
        return value
    if isinstance(value, dict) and ("bytes" in value or "path" in value):
        if value.get("bytes") is not None:
            image = Image.open(io.BytesIO(value["bytes"]))
            image.load()
            return image
        value = value.get("path")
    if isinstance(value, str | Path) and str(value):
        path = find_image_file(Path(value), root)
        if path is None:
            looked = [Path(value)] if Path(value).is_absolute() else [*([root / value] if root else []), Path(value)]
            places = ", ".join(str(p.resolve()) for p in looked)
            raise ConfigError(f"{where}: image file {str(value)!r} does not exist (looked at {places})")
        image = Image.open(path)
        image.load()  # decoded now, and the file closed
        return image
    raise ConfigError(
        f"{where} holds a {type(value).__name__}; an image is a PIL image, a datasets.Image value "
        "({'bytes', 'path'}) or a local file path"
    )


def image_root(path: str) -> Path | None:
    """The folder a data source's relative image paths are read under: a local folder, a local file's folder; None
    for a hub dataset or a generated task."""
    source = Path(path).expanduser()
    return source if source.is_dir() else source.parent if source.is_file() else None


def find_image_file(path: Path, root: Path | None) -> Path | None:
    """``path`` if it is a file (absolute, or relative to the working folder), else ``root / path``; None if neither."""
    path = path.expanduser()
    candidates = [path] if path.is_absolute() else [*([root / path] if root is not None else []), path]
    return next((p for p in candidates if p.is_file()), None)


def holds_images(messages: Any) -> bool:
    """Whether ``messages`` (a conversation) hold an image block with its image (TRL's rewrite already happened)."""
    return isinstance(messages, list) and any(
        isinstance(m.get("content"), list) and any(b.get("type") == "image" and "image" in b for b in m["content"])
        for m in messages
        if isinstance(m, dict)
    )


def inject_images(messages: list[dict[str, Any]], images: list[Any] | None) -> list[dict[str, Any]]:
    """``messages`` in content blocks with ``images`` placed as TRL places them (module docstring); new dicts, the
    input untouched. A ConfigError when the conversation's empty image placeholders do not match the images."""
    images = list(images or [])
    out, placed = [], False
    for message in messages:
        content = message.get("content")
        if isinstance(content, str):
            blocks = [{"type": "text", "text": content}]
            if message["role"] == "user" and not placed:
                blocks = [{"type": "image"} for _ in images] + blocks
                placed = True
            message = {**message, "content": blocks}
        out.append(message)

    def fillable(message: dict[str, Any]) -> bool:
        return message["role"] != "tool" and isinstance(message.get("content"), list)

    def empty(block: dict[str, Any]) -> bool:
        return block.get("type") == "image" and "image" not in block

    count = sum(empty(b) for m in out if fillable(m) for b in m["content"])
    if count != len(images):
        raise ConfigError(
            f"the conversation has {count} image placeholders without an image, and its row {len(images)} images; "
            "they must match (TRL's rule)"
        )
    fill = iter(images)
    return [
        {**m, "content": [{**b, "image": next(fill)} if empty(b) else b for b in m["content"]]} if fillable(m) else m
        for m in out
    ]
