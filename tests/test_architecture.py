"""docs/architecture.md's map is the package's: every room in it, every import down or along a floor, no circle.

The docs build checks the same (its ``infgrpo-import-map`` directive); this runs in a second, without Sphinx.
"""

import re
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "docs" / "_ext"))

from import_map import circles, parse_floors, problems  # noqa: E402


def the_map() -> list[list[str]]:
    block = re.search(r"```\{infgrpo-import-map\}\n(.*?)```", (ROOT / "docs" / "architecture.md").read_text(), re.S)
    return parse_floors(block.group(1).splitlines())


def test_the_package_is_the_map():
    floors = the_map()
    assert len(floors) >= 6 and ["module.py"] in floors
    assert problems(ROOT / "infgrpo", floors) == []


def test_every_room_of_the_map_is_named_in_its_prose():
    text = (ROOT / "docs" / "architecture.md").read_text()
    rooms = [room.removesuffix(".py").replace("/", ".") for floor in the_map() for room in floor]
    assert [room for room in rooms if f"{{mod}}`infgrpo.{room}`" not in text] == []


def write(package: Path, files: dict[str, str]) -> None:
    for name, text in files.items():
        (package / name).parent.mkdir(parents=True, exist_ok=True)
        (package / name).write_text(text)


def test_an_import_up_a_floor_a_circle_and_a_homeless_module_are_each_named(tmp_path):
    package = tmp_path / "pkg"
    write(package, {
        "__init__.py": "",
        "top.py": "from pkg.low import helper\n",
        "low/__init__.py": "",
        "low/helper.py": "def f():\n    from pkg.top import x  # lazy imports count\n",
        "low/a.py": "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from pkg.low import b\n",
        "low/b.py": "from . import a\n",
        "stray.py": "",
    })  # fmt: skip
    found = problems(package, parse_floors(["top.py   the top", "low/   below", "gone/"]))
    assert "the map's room gone is not in pkg/" in found
    assert "pkg.stray is in no room of the map" in found
    assert "pkg.low.helper (low) imports pkg.top (top.py), a floor above it" in found
    assert "a circle of imports: pkg.low.a -> pkg.low.b" in found
    assert "a circle of imports: pkg.low.helper -> pkg.top" in found  # the lazy import up closes one too
    assert len(found) == 5


def test_circles_are_found_however_long():
    ring = {f"m{i}": {f"m{(i + 1) % 50}"} for i in range(50)} | {"tail": {"m0"}}
    assert circles(ring) == [sorted(f"m{i}" for i in range(50))]
    assert circles({"a": {"b"}, "b": set()}) == []
