"""Every command the docs show parses today: ``python -m infgrpo.fit``, ``infgrpo.from_trl`` and ``benchmarks``.

Where commands are read, and what is left out by rule (historical recordings, placeholders, files the reader
writes first), is :mod:`tests.written_commands`. Nothing trains: a fit command goes through the command line's own
parse step (the preflight's checks of the words, then LightningCLI's parser, ``--print_config`` and ``--help`` as
written), on one parser built once by ``infgrpo.fit.main``; a
converter command converts (a reader's TRL file replaced by a real TRL config, the output into a temporary folder);
a benchmark's arguments go through its own parser, its ``--infgrpo-config`` pairs through the ``learn``
benchmark's check, and ``train-tiny``'s pass-through overrides through the fit parser with its config.
"""

from __future__ import annotations

import contextlib
import importlib
import io
from pathlib import Path

import pytest

from tests.written_commands import (
    WrittenCommand,
    commands_in_checkout,
    commands_in_markdown,
    commands_in_shell,
    commands_in_yaml_comments,
    is_readers_file,
)

ROOT = Path(__file__).resolve().parents[1]
TRL_STAND_IN = ROOT / "tests" / "fixtures" / "trl" / "trl_docs_cli.yaml"  # a TRL docs config: the reader's file


class _Built(Exception):
    """Raised by :class:`_ParserOnly` once the fit command's parser is built."""


def fit_parser():  # noqa: ANN201 - jsonargparse's parser
    """``python -m infgrpo.fit``'s parser, built by ``infgrpo.fit.main`` itself (its arguments, links and help)."""
    from infgrpo import fit

    class _ParserOnly(fit.GRPOCLI):
        def parse_arguments(self, parser, args) -> None:  # noqa: ANN001
            type(self).built = parser
            raise _Built

    original, fit.GRPOCLI = fit.GRPOCLI, _ParserOnly
    try:
        fit.main([])
    except _Built:
        pass
    finally:
        fit.GRPOCLI = original
    return _ParserOnly.built


def run_quietly(function, *args) -> tuple[int, str, object]:  # noqa: ANN001
    """``function(*args)``'s exit status (0 when it returns), what it printed on stderr, and what it returned."""
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        try:
            return 0, err.getvalue(), function(*args)
        except SystemExit as stop:
            if isinstance(stop.code, int) or stop.code is None:
                return stop.code or 0, err.getvalue(), None
            return 2, f"{err.getvalue()}{stop.code}", None
        except Exception as error:  # noqa: BLE001 - a benchmark's check raises ValueError: the line is the finding
            return 2, f"{type(error).__name__}: {error}", None


def fit_args(args: list[str]) -> list[str]:
    """A fit command's words with a ``--config`` the reader writes first left out (the rest is still parsed)."""
    kept, skip = [], False
    for i, arg in enumerate(args):
        if skip:
            skip = False
            continue
        name, eq, value = arg.partition("=")
        if name in ("--config", "-c"):
            path = value if eq else (args[i + 1] if i + 1 < len(args) else "")
            if is_readers_file(path, ROOT):
                skip = not eq
                continue
        kept.append(arg)
    return kept


class Checker:
    """Parses written commands; one parser for every fit command."""

    def __init__(self, tmp: Path) -> None:
        from infgrpo.fit import GRPOCLI

        self.tmp = tmp
        self.parser = fit_parser()
        self.parse_fit = GRPOCLI.parse_arguments
        self.cli = GRPOCLI.__new__(GRPOCLI)  # parse_arguments keeps the parsed config on it; nothing is built

    def fit(self, args: list[str]) -> tuple[int, str]:
        """As the command line parses them (``--print_config`` and ``--help`` included): exit 0 or the ``error:``
        line. The preflight's checks of the parsed config, which may read the model's files, are not run."""
        return run_quietly(self.parse_fit, self.cli, self.parser, fit_args(args))[:2]

    def from_trl(self, args: list[str]) -> tuple[int, str]:
        """Converts: the reader's TRL file is a real TRL config, ``-o`` goes to a temporary file."""
        from infgrpo.from_trl import main

        words, i = [], 0
        while i < len(args):
            arg = args[i]
            if arg in ("-o", "--output") and i + 1 < len(args):
                words += [arg, str(self.tmp / "converted.yaml")]
                i += 2
                continue
            if not arg.startswith("-") and is_readers_file(arg, ROOT):
                arg = str(TRL_STAND_IN)
            words.append(arg)
            i += 1
        return run_quietly(main, words)[:2]

    def benchmark(self, args: list[str]) -> tuple[int, str]:
        """The benchmark's parser on its arguments, and the checks it makes of them before it measures."""
        from benchmarks.__main__ import COMMANDS

        name, rest = args[0], args[1:]
        if name not in COMMANDS:
            return 2, f"python -m benchmarks {name}: no such benchmark; names: {', '.join(COMMANDS)}"
        module = importlib.import_module(COMMANDS[name])
        if name == "table":  # a dry run: it reads the recorded JSON and prints its tables
            return run_quietly(module.main, rest)[:2]
        parser = module.parser() if name == "learn-merge" else module.BENCH.parser()
        passes_through = hasattr(module, "BENCH") and module.BENCH.extra_args  # train-tiny: overrides go to fit
        code, error, parsed = run_quietly(parser.parse_known_args if passes_through else parser.parse_args, rest)
        if code:
            return code, error
        options, extra = parsed if passes_through else (parsed, [])
        files = [*getattr(options, "paths", []), getattr(options, "config", None)]
        missing = [f for f in files if isinstance(f, str) and not is_readers_file(f, ROOT) and not (ROOT / f).exists()]
        if missing:
            return 2, f"no such file: {', '.join(missing)}"
        if name == "learn":
            return run_quietly(module.infgrpo_config, options.infgrpo_config)[:2]
        if passes_through:
            return self.fit(["--config", options.config, *extra])
        return 0, ""

    def __call__(self, command: WrittenCommand) -> tuple[int, str]:
        """The command's exit status and error line."""
        check = {"infgrpo.fit": self.fit, "infgrpo.from_trl": self.from_trl, "benchmarks": self.benchmark}
        return check[command.module](list(command.args))


@pytest.fixture(scope="module")
def check(tmp_path_factory) -> Checker:
    return Checker(tmp_path_factory.mktemp("written"))


def test_every_written_command_parses_today(check, monkeypatch):
    monkeypatch.chdir(ROOT)  # the commands run from the root of the checkout
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    commands = [c for c in commands_in_checkout(ROOT) if c.checked]
    assert len(commands) > 100, "the pages' commands were not found: is the extraction broken?"
    results: dict[tuple[str, tuple[str, ...]], tuple[int, str]] = {}
    broken = []
    for command in commands:
        key = (command.module, command.args)
        if key not in results:
            results[key] = check(command)
        code, error = results[key]
        if code != 0:
            line = next((s for s in reversed(error.strip().splitlines()) if s.strip()), error)
            broken.append(f"{command.where}: {command.text}\n    {line.strip()[:300]}")
    assert not broken, f"{len(broken)} written commands do not parse today:\n" + "\n".join(broken)


# The rule that finds commands, on small pages.


def test_fences_inline_spans_and_continuations_are_read():
    page = (
        "Run `python -m infgrpo.fit --config configs/tiny.yaml` first, then\n"
        "`python -m benchmarks train-tiny\n--json out.json`.\n\n"
        "```bash\n"
        "HF_HUB_OFFLINE=1 python -m infgrpo.fit --config configs/tiny.yaml \\\n"
        "    --trainer.max_steps 5 > log.txt   # a comment --not.this\n"
        "pip install -e . && python -m infgrpo.from_trl grpo.yaml -o ours.yaml\n"
        "```\n"
    )
    found = [(c.where, c.module, c.args) for c in commands_in_markdown(page, "page.md")]
    assert found == [
        ("page.md:1", "infgrpo.fit", ("--config", "configs/tiny.yaml")),
        ("page.md:2", "benchmarks", ("train-tiny", "--json", "out.json")),
        ("page.md:6", "infgrpo.fit", ("--config", "configs/tiny.yaml", "--trainer.max_steps", "5")),
        ("page.md:8", "infgrpo.from_trl", ("grpo.yaml", "-o", "ours.yaml")),
    ]


def test_placeholders_mentions_and_loops_follow_the_rule():
    block = (
        "python -m benchmarks <name> --json PATH\n"
        "python -m infgrpo.fit --config configs/<name>.yaml\n"
        "python -m benchmarks rollout [--json PATH]\n"
        "python -m infgrpo.fit --trainer.devices N\n"
        "python -m infgrpo.fit --seed_everything $SEED\n"
        "for s in 3 4; do python -m infgrpo.fit --seed_everything $s --trainer.default_root_dir runs/s${s}; done\n"
        "python -m infgrpo.from_trl\n"
    )
    found = commands_in_shell(block, "b")
    assert [c.checked for c in found] == [False, False, False, False, False, True, False]
    assert found[5].args == ("--seed_everything", "3", "--trainer.default_root_dir", "runs/s3")
    assert found[6].mention and not found[6].placeholder


def test_a_heading_that_says_as_run_at_a_commit_marks_its_section_historical():
    page = (
        "## Today\n`python -m infgrpo.fit --a 1`\n"
        "## Old runs (as run at 930a600, 0.1's flat keys)\n`python -m infgrpo.fit --b 1`\n"
        "### A part of it\n`python -m infgrpo.fit --c 1`\n"
        "## Later\n`python -m infgrpo.fit --d 1`\n"
    )
    assert [c.historical for c in commands_in_markdown(page, "p")] == [False, True, True, False]


def test_config_comments_are_read_where_a_line_starts_with_the_command():
    text = "# Run it:\n#   python -m infgrpo.fit --config configs/tiny.yaml\n# python -m benchmarks learn runs TRL\n"
    text += "# as the recipe says, python -m infgrpo.fit --config x.yaml\nseed_everything: 0\n"
    found = commands_in_yaml_comments(text, "c.yaml")
    assert [(c.where, c.args) for c in found][0] == ("c.yaml:2", ("--config", "configs/tiny.yaml"))
    assert all("x.yaml" not in c.args for c in found)


def test_a_missing_file_under_a_checkout_folder_is_not_the_readers():
    assert is_readers_file("grpo.yaml", ROOT)
    assert not is_readers_file("configs/tiny.yaml", ROOT)  # it exists
    assert not is_readers_file("configs/gone.yaml", ROOT)  # a stale path, reported
    assert fit_args(["--config", "my.yaml", "--model.group_size", "4"]) == ["--model.group_size", "4"]
    assert fit_args(["--config=configs/gone.yaml"]) == ["--config=configs/gone.yaml"]


@pytest.mark.parametrize(
    ("args", "ok"),
    [
        (["--config", "configs/tiny.yaml", "--model.optimizer.learning_rate", "2e-4"], True),
        (["--config", "configs/tiny.yaml", "--model.learning_rate", "2e-4"], False),  # 0.1's flat key
        (["--config", "configs/tiny.yaml", "--model.objective.loss_typo", "dapo"], False),
        (["--config", "configs/gone.yaml"], False),
    ],
)
def test_the_fit_check_fails_a_command_the_cli_refuses(args, ok, monkeypatch, check):
    monkeypatch.chdir(ROOT)
    code, error = check.fit(args)
    assert (code == 0) == ok, error


def test_the_benchmark_check_runs_the_checks_a_benchmark_makes_before_it_measures(monkeypatch, check):
    monkeypatch.chdir(ROOT)
    assert check.benchmark(["learn", "--steps", "4", "--infgrpo-config", "update.token_budget=256"]) == (0, "")
    assert "token_budget" in check.benchmark(["learn", "--infgrpo-config", "token_budget=256"])[1]  # 0.1's key
    assert check.benchmark(["train-tiny", "--model.objective.loss_type", "dapo"])[0] == 0
    assert check.benchmark(["train-tiny", "--model.loss_type", "dapo"])[0] == 2  # passed through to fit's parser
    assert check.benchmark(["skip", "--config", "configs/gone.yaml"])[0] == 2
    assert check.benchmark(["rollout", "--no-such-flag"])[0] == 2
    assert check.benchmark(["nonesuch"])[0] == 2
