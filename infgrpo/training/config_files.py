"""The ``--config`` files of a command line read before the parser reads them, so a file that is no YAML is named.

    config_file_problem(["--config", "run.yaml"])   # 'run.yaml line 2: a tab indents it; ...', or None

jsonargparse reports a YAML error as ``Problems parsing config: ... in "<unicode string>", line 2``: no file name,
and a tab (the most common cause) is "a character that cannot start any token". Here the message names the file,
the line and, for a tab, says that YAML indents with spaces only.
"""

from __future__ import annotations

from pathlib import Path

import yaml


def config_paths(argv: list[str]) -> list[str]:
    """The values of ``-c`` / ``--config`` in ``argv`` (``--config=path`` or ``--config path``), in order."""
    paths = []
    for i, arg in enumerate(argv):
        name, eq, value = arg.partition("=")
        if name in ("-c", "--config"):
            paths.append(value if eq else (argv[i + 1] if i + 1 < len(argv) else ""))
    return paths


def yaml_problem(path: str) -> str | None:
    """What keeps the file ``path`` from being read as YAML (its name, line and the reason), or None when it reads,
    or when it is no readable file (the parser then says so, or reads the value as inline YAML)."""
    try:
        text = Path(path).expanduser().read_text()
    except (OSError, UnicodeDecodeError, ValueError):
        return None
    for number, line in enumerate(text.splitlines(), start=1):
        indent = line[: len(line) - len(line.lstrip(" \t"))]
        if "\t" in indent and line.strip() and not line.lstrip().startswith("#"):
            return (
                f"--config {path} line {number}: a tab indents it, and YAML allows only spaces for indentation "
                "(replace the tab with spaces)"
            )
    try:
        yaml.safe_load(text)
    except yaml.YAMLError as err:
        mark = getattr(err, "problem_mark", None)
        where = f" line {mark.line + 1}, column {mark.column + 1}" if mark is not None else ""
        problem = getattr(err, "problem", None) or str(err).splitlines()[0]
        return f"--config {path}{where} is not valid YAML: {problem}"
    return None


def config_file_problem(argv: list[str]) -> str | None:
    """The first :func:`yaml_problem` among the ``--config`` files of ``argv``, or None."""
    return next((p for p in map(yaml_problem, config_paths(argv)) if p is not None), None)
