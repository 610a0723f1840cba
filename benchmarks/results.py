"""Results on disk: the JSON a benchmark writes, and the CSV log of a ``python -m infgrpo.fit`` run.

write_json("benchmarks/x.json", result)    # indented, its folder created if needed
read_json("benchmarks/x.json")             # what write_json wrote
logged_steps(root)                         # the training steps a fit run logged below ``root``
"""

from __future__ import annotations

import csv
import json
from pathlib import Path
from typing import Any


def write_json(path: str | Path | None, result: Any) -> None:
    """Writes ``result`` as indented JSON to ``path`` (nothing when ``path`` is None)."""
    if path:
        Path(path).parent.mkdir(parents=True, exist_ok=True)
        Path(path).write_text(json.dumps(result, indent=2) + "\n")


def read_json(path: str | Path) -> Any:
    """The JSON in ``path``; a ValueError naming the file when it is not JSON."""
    try:
        return json.loads(Path(path).read_text())
    except json.JSONDecodeError as err:
        raise ValueError(f"{path}: not JSON ({err})") from err


def logged_steps(root: Path) -> list[dict[str, str]]:
    """The rows of every ``metrics.csv`` below ``root`` (Lightning's CSVLogger) that log a training step.

    A training step's row carries ``train/reward``; validation rows and the epoch rows do not. Values are
    the CSV's strings (empty where that step did not log the column).
    """
    rows: list[dict[str, str]] = []
    for f in sorted(root.rglob("metrics.csv")):
        with f.open(newline="") as lines:
            rows += csv.DictReader(lines)
    return [r for r in rows if r.get("train/reward")]
