"""Finds the commands the docs show a reader: ``python -m infgrpo.fit``, ``infgrpo.from_trl`` and ``benchmarks``.

    from tests.written_commands import commands_in_checkout
    for cmd in commands_in_checkout(ROOT):
        print(cmd.where, cmd.module, cmd.args)   # README.md:21 infgrpo.fit ['--config', 'configs/tiny.yaml']

Where a command is read (the rule, not a list of files):
- Markdown (the README, ``docs/``, ``benchmarks/``) and the notebooks' Markdown cells: fenced code blocks and inline
  code spans. A fence continues a line that ends in ``\\``; ``#`` starts a shell comment.
- The configs' comments, and the notebooks' code cells: a comment line (or a ``!`` shell line) that starts with
  the command. A code cell's ``[sys.executable, "-m", ...]`` runs when the notebook runs, so it is not read here.
- Inside a shell line, each simple command (split at ``;``, ``&&``, ``|``, ``>``, ...) that runs ``-m <module>``
  with ``python`` or ``torchrun`` before it.

What is not checked, by rule:
- A command under a Markdown heading that says ``as run at <commit>`` (a historical recording keeps the command it
  ran, with the commit): :attr:`WrittenCommand.historical`.
- A command with a placeholder the reader fills in: ``<name>``, ``...``, a usage bracket ``[--json PATH]``, a word
  in capitals (``PATH``, ``N``, ``CONFIG.yaml``), or a shell variable that no ``for`` loop of the same block sets
  (``for s in 0 1; do ... --seed $s; done`` is checked with ``s=0``): :attr:`WrittenCommand.placeholder`.
Files the reader writes first (``grpo.yaml``, ``my.yaml``) are the caller's to replace: see
:func:`is_readers_file`.
"""

from __future__ import annotations

import json
import re
import shlex
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

MODULES = ("infgrpo.fit", "infgrpo.from_trl", "benchmarks")
"""The commands a reader types, by the module ``python -m`` runs."""
CHECKOUT_FOLDERS = ("configs/", "benchmarks/", "tutorials/", "docs/", "tests/", "tools/", "infgrpo/")
"""A path that starts with one of these names a file of the checkout; any other relative path that does not exist
is one the reader writes (or the command writes)."""
OPERATORS = {";", "&", "&&", "|", "||", ">", ">>", "<", "(", ")", "2>", "&>", ">&"}
HISTORICAL = re.compile(r"as run at [0-9a-f]{7,40}\b", re.IGNORECASE)
SHELL_VARIABLE = re.compile(r"\$\{?([A-Za-z_][A-Za-z0-9_]*)\}?")
ANGLE_PLACEHOLDER = re.compile(r"<[A-Za-z][^<>\s]*>")
CAPITALS = re.compile(r"^[A-Z][A-Z0-9_]*(?:[.:/=-].*)?$")


@dataclass(frozen=True)
class WrittenCommand:
    """One command as a page shows it."""

    where: str
    """``path:line`` in the checkout (a notebook: ``path#cell``)."""
    module: str
    """One of :data:`MODULES`."""
    args: tuple[str, ...]
    """The words after the module, shell-quoted words unquoted, loop variables filled in."""
    text: str
    """The command as written (one line, continuations joined)."""
    historical: bool = False
    """Under a heading that says ``as run at <commit>``: kept as recorded, not checked."""
    placeholder: bool = False
    """Holds a placeholder the reader fills in: not checked."""

    @property
    def mention(self) -> bool:
        """The command's name without arguments (``python -m infgrpo.from_trl`` in a sentence): not checked."""
        return not self.args

    @property
    def checked(self) -> bool:
        """Whether the command must parse today: not historical, no placeholder, not a mention."""
        return not (self.historical or self.placeholder or self.mention)


def is_placeholder(word: str) -> bool:
    """Whether ``word`` is something the reader fills in (``<name>``, ``...``, ``[--json``, ``PATH]``, ``N``)."""
    if "<" in word or ">" in word or "..." in word or "…" in word:
        return True
    if word.startswith("[-") or (word.endswith("]") and "[" not in word):
        return True
    return bool(CAPITALS.match(word.lstrip("-")) and not word.startswith("-"))


def is_readers_file(path: str, root: Path) -> bool:
    """Whether ``path`` is a file the reader writes first: relative, not in the checkout, under none of its
    folders (:data:`CHECKOUT_FOLDERS`). A missing ``configs/x.yaml`` is a broken command, not the reader's file."""
    if path.startswith(("/", "~", "s3://")) or (root / path).exists():
        return False
    return not path.startswith(CHECKOUT_FOLDERS)


def split_simple_commands(line: str) -> list[list[str]]:
    """A shell line's simple commands, each a list of words (comments dropped, quotes removed)."""
    lexer = shlex.shlex(line, posix=True, punctuation_chars=";&|<>()")
    lexer.whitespace_split = True
    lexer.commenters = "#"
    try:
        words = list(lexer)
    except ValueError:  # an unbalanced quote: the line is prose that looks like a command
        return []
    commands, current = [], []
    for word in words:
        if word in OPERATORS or set(word) <= set(";&|<>()"):
            commands.append(current)
            current = []
        else:
            current.append(word)
    commands.append(current)
    return [c for c in commands if c]


def loop_values(block: str) -> dict[str, str]:
    """``for NAME in V1 V2 ...`` in a block -> ``{NAME: V1}``: a loop's command is checked with its first value."""
    return {m[1]: m[2].split()[0] for m in re.finditer(r"\bfor\s+(\w+)\s+in\s+([^;\n]+?)\s*;", block)}


def commands_in_shell(block: str, where: str, first_line: int = 1, historical: bool = False) -> list[WrittenCommand]:
    """The commands of :data:`MODULES` in a block of shell lines (``\\`` continues a line)."""
    values = loop_values(block)
    found = []
    lines = block.split("\n")
    i = 0
    while i < len(lines):
        start, text = i, lines[i]
        while text.rstrip().endswith("\\") and i + 1 < len(lines):
            i += 1
            text = text.rstrip()[:-1] + " " + lines[i].strip()
        i += 1
        text = ANGLE_PLACEHOLDER.sub("…", text)  # <name> (configs/<name>.yaml): before the shell reads < and >
        for words in split_simple_commands(text):
            command = command_in_words(words)
            if command is None:
                continue
            module, args = command
            unknown = False
            filled = []
            for arg in args:
                for name in SHELL_VARIABLE.findall(arg):
                    if name in values:
                        arg = re.sub(rf"\$\{{?{name}\}}?", values[name], arg)
                    else:
                        unknown = True
                filled.append(arg)
            shown = " ".join(shlex.quote(w) for w in words)
            placeholder = unknown or any(is_placeholder(a) for a in filled)
            found.append(
                WrittenCommand(f"{where}:{first_line + start}", module, tuple(filled), shown, historical, placeholder)
            )
    return found


def command_in_words(words: list[str]) -> tuple[str, list[str]] | None:
    """``(module, args)`` when the words run ``-m <module>`` with ``python`` or ``torchrun`` before it."""
    for j in range(len(words) - 1):
        if words[j] == "-m" and words[j + 1] in MODULES:
            runner = [w.rsplit("/", 1)[-1] for w in words[:j]]
            if any(re.fullmatch(r"python[0-9.]*|torchrun", w) for w in runner):
                return words[j + 1], words[j + 2 :]
    return None


FENCE = re.compile(r"^(\s*)(`{3,}|~{3,})(.*)$")
INLINE = re.compile(r"(?<!`)(`+)(?!`)(.+?)(?<!`)\1(?!`)", re.DOTALL)


def commands_in_markdown(text: str, where: str) -> list[WrittenCommand]:
    """The commands in a Markdown page's fenced blocks and inline code spans, each marked historical when a heading
    above it (up to the next heading of its level or higher) says ``as run at <commit>``."""
    found: list[WrittenCommand] = []
    headings: list[tuple[int, bool]] = []  # (level, historical) of the open headings
    prose: list[tuple[int, str]] = []
    fence: tuple[str, int, list[str]] | None = None
    lines = text.split("\n")

    def historical() -> bool:
        return any(h for _, h in headings)

    def flush_prose() -> None:
        if prose:
            found.extend(commands_in_prose(prose, where, historical()))
            prose.clear()

    for number, line in enumerate(lines, 1):
        if fence is not None:
            if line.strip().startswith(fence[0]) and not line.strip().strip(fence[0][0]):
                block = "\n".join(fence[2])
                found.extend(commands_in_shell(block, where, fence[1] + 1, historical()))
                fence = None
            else:
                fence[2].append(line)
            continue
        match = FENCE.match(line)
        if match:
            flush_prose()
            fence = (match[2], number, [])
            continue
        heading = re.match(r"^(#{1,6})\s+(.*)$", line)
        if heading:
            flush_prose()
            level = len(heading[1])
            headings = [(lv, h) for lv, h in headings if lv < level]
            headings.append((level, bool(HISTORICAL.search(heading[2]))))
            continue
        if not line.strip():
            flush_prose()
            continue
        prose.append((number, line))
    flush_prose()
    return found


def commands_in_prose(lines: list[tuple[int, str]], where: str, historical: bool) -> list[WrittenCommand]:
    """The commands in the inline code spans of one paragraph (a span may cross a line break)."""
    text = "\n".join(line for _, line in lines)
    found = []
    for span in INLINE.finditer(text):
        line = lines[0][0] + text.count("\n", 0, span.start())
        code = span[2].replace("\n", " ").strip()
        found.extend(commands_in_shell(code, where, line, historical))
    return found


def commands_in_yaml_comments(text: str, where: str) -> list[WrittenCommand]:
    """The commands on comment lines that start with one (``#   python -m infgrpo.fit --config ...``)."""
    found = []
    for number, line in enumerate(text.split("\n"), 1):
        comment = line.partition("#")[2].strip() if line.lstrip().startswith("#") else ""
        if comment and command_in_words(comment.split()[:6]):
            found.extend(commands_in_shell(comment, where, number))
    return found


def commands_in_notebook(path: Path, where: str) -> list[WrittenCommand]:
    """The commands of a notebook: its Markdown cells as Markdown, its code cells' comment and ``!`` lines."""
    found = []
    for index, cell in enumerate(json.loads(path.read_text())["cells"]):
        source = "".join(cell["source"])
        if cell["cell_type"] == "markdown":
            found.extend(commands_in_markdown(source, f"{where}#cell{index}"))
        elif cell["cell_type"] == "code":
            shell = "\n".join(
                line.strip().lstrip("#!").strip() if line.strip().startswith(("#", "!")) else ""
                for line in source.split("\n")
            )
            for command in commands_in_yaml_comments(
                "\n".join("# " + s for s in shell.split("\n")), f"{where}#cell{index}"
            ):
                found.append(command)
    return found


def pages(root: Path) -> Iterator[Path]:
    """Every file whose commands are read: the README, ``docs/``, ``benchmarks/``, ``configs/``, ``tutorials/``."""
    yield root / "README.md"
    for pattern in ("docs/**/*.md", "benchmarks/**/*.md", "configs/*.yaml", "tutorials/*.ipynb"):
        yield from sorted(p for p in root.glob(pattern) if "_build" not in p.parts)


def commands_in_checkout(root: Path) -> list[WrittenCommand]:
    """Every command of :data:`MODULES` the checkout's pages show (see the module docstring for where)."""
    found = []
    for path in pages(root):
        where = str(path.relative_to(root))
        if path.suffix == ".md":
            found.extend(commands_in_markdown(path.read_text(), where))
        elif path.suffix == ".yaml":
            found.extend(commands_in_yaml_comments(path.read_text(), where))
        elif path.suffix == ".ipynb":
            found.extend(commands_in_notebook(path, where))
    return found
