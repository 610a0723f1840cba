"""Writing a benchmark's results: one JSON file, its folder created if needed."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any


def write_json(path: str | None, result: Any) -> None:
    """Writes ``result`` as indented JSON to ``path`` (nothing when ``path`` is None)."""
    if path:
        Path(path).parent.mkdir(parents=True, exist_ok=True)
        Path(path).write_text(json.dumps(result, indent=2) + "\n")
