"""The package's import graph against the floors docs/architecture.md draws (used by its ``infgrpo-import-map``).

    floors = parse_floors(["fit.py from_trl.py   the commands", "module.py", "training/ trainer/"])
    problems(Path("infgrpo"), floors)   # [] when every import goes down or along, with no circle

A floor is one line: its rooms (a folder below ``infgrpo/`` with a slash, or a module file), then, after three
spaces, what they are. A module may import its own floor or any floor below it; an import inside a function or
under ``TYPE_CHECKING`` counts too (a circle of type-only imports is still a circle to a reader). The package's
``__init__.py`` re-exports from every floor and is left out.
"""

from __future__ import annotations

import ast
import re
from pathlib import Path


def parse_floors(lines: list[str]) -> list[list[str]]:
    """Each non-blank line's rooms (``training``, ``fit.py``), top floor first."""
    floors = []
    for line in lines:
        rooms = re.split(r"\s{3,}", line.strip())[0].split()
        if rooms:
            floors.append([room.rstrip("/") for room in rooms])
    return floors


def module_names(package: Path) -> dict[str, Path]:
    """``{dotted name: file}`` of every module below ``package`` (a package is its ``__init__``)."""
    out = {}
    for path in sorted(package.rglob("*.py")):
        parts = list(path.relative_to(package.parent).with_suffix("").parts)
        out[".".join(parts[:-1] if parts[-1] == "__init__" else parts)] = path
    return out


def imports_of(name: str, path: Path, modules: dict[str, Path]) -> set[str]:
    """The package's modules that ``path`` imports anywhere, each resolved to the deepest module that exists."""
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    found = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            found |= {alias.name for alias in node.names}
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                parts = package.split(".")
                base = ".".join(parts[: len(parts) - node.level + 1] + ([node.module] if node.module else []))
            found |= {base} | {f"{base}.{alias.name}" for alias in node.names}
    resolved = set()
    for target in found:
        while target not in modules and "." in target:
            target = target.rpartition(".")[0]
        if target in modules and target != name:
            resolved.add(target)
    return resolved


def room_of(name: str, rooms: list[str]) -> str | None:
    """The room holding module ``name`` (``infgrpo.training.preflight.door`` -> ``training``), or None."""
    path = "/".join(name.split(".")[1:])
    for room in sorted(rooms, key=len, reverse=True):
        stem = room.removesuffix(".py")
        if path == stem or path.startswith(stem + "/"):
            return room
    return None


def circles(edges: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components of more than one module (Tarjan's algorithm, iterative)."""
    order: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on: set[str] = set()
    found = []
    for root in edges:
        if root in order:
            continue
        work = [(root, iter(sorted(edges[root])))]
        order[root] = low[root] = len(order)
        stack.append(root)
        on.add(root)
        while work:
            v, children = work[-1]
            w = next(children, None)
            if w is not None:
                if w not in order:
                    order[w] = low[w] = len(order)
                    stack.append(w)
                    on.add(w)
                    work.append((w, iter(sorted(edges.get(w, ())))))
                elif w in on:
                    low[v] = min(low[v], order[w])
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[v])
            if low[v] == order[v]:
                part = []
                while not part or part[-1] != v:
                    part.append(stack.pop())
                    on.discard(part[-1])
                if len(part) > 1:
                    found.append(sorted(part))
    return found


def problems(package: Path, floors: list[list[str]]) -> list[str]:
    """One line for each room of the map that is missing, each module in no room, each import up a floor and each
    circle; empty when the code is the map."""
    level = {room: i for i, floor in enumerate(floors) for room in floor}
    rooms = list(level)
    out = [f"the map's room {room} is not in {package.name}/" for room in rooms if not (package / room).exists()]
    modules = module_names(package)
    edges = {name: imports_of(name, path, modules) for name, path in modules.items()}
    for name in modules:
        if name != package.name and room_of(name, rooms) is None:
            out.append(f"{name} is in no room of the map")
    for source, targets in edges.items():
        a = room_of(source, rooms)
        for target in sorted(targets):
            b = room_of(target, rooms)
            if a is not None and b is not None and level[b] < level[a]:
                out.append(f"{source} ({a}) imports {target} ({b}), a floor above it")
    out += ["a circle of imports: " + " -> ".join(part) for part in circles(edges)]
    return out
