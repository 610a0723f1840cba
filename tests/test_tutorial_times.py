"""Each notebook states its time on 2 CPU cores in its first cell, and docs/tutorials.md states the same; the runner
that measures them (``tools/run_tutorials.py``) rewrites both. Nothing here runs a notebook."""

import importlib.util
import re
from pathlib import Path

import nbformat
import pytest

ROOT = Path(__file__).resolve().parents[1]
NOTEBOOKS = sorted((ROOT / "tutorials").glob("*.ipynb"))
spec = importlib.util.spec_from_file_location("run_tutorials", ROOT / "tools" / "run_tutorials.py")
runner = importlib.util.module_from_spec(spec)
spec.loader.exec_module(runner)


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.stem)
def test_each_notebook_states_its_time_and_the_tutorials_page_states_the_same(path):
    first = "".join(nbformat.read(path, as_version=4).cells[0].source)
    lines = runner.TIME_LINE.findall(first)
    assert len(lines) == 1, f"{path.name}: its first cell needs one line that starts with **Time:**"
    assert re.search(r"\((estimated; |measured: \d+ s at commit \w+, )`python tools/run_tutorials.py`", lines[0])
    row = next(r for r in (ROOT / "docs" / "tutorials.md").read_text().splitlines() if f"[`{path.stem}`]" in r)
    assert row.endswith(f"| {runner.time_phrase(lines[0])} on 2 CPU cores |"), (row[-60:], lines[0])


def test_a_measured_time_replaces_the_line_and_the_row():
    cell = "# 09 · A title\n\nText.\n\n**Time:** about 3 minutes on 2 CPU cores (estimated; ...).\n\nMore."
    line = runner.time_line(754.4, "abc1234")
    assert line.startswith("**Time:** about 13 minutes on 2 CPU cores") and "754 s at commit abc1234" in line
    assert runner.with_time_line(cell, line) == cell.replace(cell.split("\n\n")[2], line)
    page = "| [`09_new`](x) | shows | about 3 minutes on 2 CPU cores |\n| [`10_other`](y) | more | about a minute |"
    assert runner.with_table_time(page, "09_new", runner.time_phrase(line)).split("\n") == [
        "| [`09_new`](x) | shows | about 13 minutes on 2 CPU cores |",
        "| [`10_other`](y) | more | about a minute |",
    ]
    assert runner.minutes(40) == "about a minute" and runner.minutes(100) == "about 2 minutes"
    with pytest.raises(ValueError, match="exactly one"):
        runner.with_time_line("no time here", line)
    with pytest.raises(ValueError, match="exactly one row"):
        runner.with_table_time(page, "11_missing", "about a minute")
