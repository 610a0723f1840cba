"""The benchmark harness: time boxes, failing children, the recorded command, tables re-printed from JSON."""

import importlib
import json
import re
import shlex
import time
from pathlib import Path

import pytest

from benchmarks import BENCHMARKS, harness, rollout
from benchmarks.models import TINY_VOCAB, random_prompt_stop_ids, save_bench_model, tokenizer_stop_ids
from benchmarks.results import logged_steps
from benchmarks.table import cell, markdown_table, render
from benchmarks.train_tiny import read_train_curves
from infgrpo.policy import load_tokenizer

ROOT = Path(__file__).resolve().parents[2]
TOOLS = sorted((ROOT / "benchmarks/tools").glob("*.json"))  # written by tools/*.py, not by benchmarks
RECORDED = sorted(set((ROOT / "benchmarks").rglob("*.json")) - set(TOOLS))
PAGES = [ROOT / "benchmarks/README.md", *sorted((ROOT / "benchmarks/results").glob("*.md"))]  # the recorded figures
CFG = dict(model="tiny", prompts=1, group_size=2, decoder="engine", seed=0, num_slots=2, max_new_tokens=4, threads=1)


def test_a_configuration_over_its_time_box_comes_back_as_a_skipped_row():
    start = time.monotonic()
    row = harness.spawn("rollout", CFG, timeout=0.5)  # the child cannot even import torch in 0.5 s
    assert row == {**CFG, "skipped": "over 0.5 s"}
    assert time.monotonic() - start < 10  # killed at its time box, not waited for


def test_a_failing_child_comes_back_with_its_error_line():
    cfg = dict(CFG, model="no-such-model")
    row = harness.spawn("rollout", cfg, timeout=300)
    assert row["skipped"].startswith("failed: ValueError: model='no-such-model' is not known; valid: tiny, qwen3-42m")
    assert {k: row[k] for k in cfg} == cfg


def test_spawn_all_keeps_rows_left_out_and_starts_none_without_time_left():
    configs = [dict(CFG, skipped="2 sequences > --max-sequences"), CFG]
    rows = harness.spawn_all("rollout", configs, deadline=time.monotonic() + harness.MIN_BOX_S / 2)
    assert rows == [configs[0], {**CFG, "skipped": "time box spent"}]


def test_the_recorded_command_reparses_to_the_same_arguments(tmp_path):
    argv = ["--model", "tiny", "--group-sizes", "4", "8", "--json", str(tmp_path / "a b.json"), "--threads", "auto"]
    words = shlex.split(harness.recorded_command("rollout", argv))
    assert words[:4] == ["python", "-m", "benchmarks", "rollout"]
    parser = rollout.BENCH.parser()
    assert parser.parse_args(words[4:]) == parser.parse_args(argv)
    assert parser.parse_args(argv).json == str(tmp_path / "a b.json") and parser.parse_args(argv).threads == 0


def test_threads_has_one_meaning_and_each_benchmark_keeps_its_recorded_default():
    assert harness.threads_setting(0) == "auto" and harness.threads_setting(None) == "auto"
    assert harness.threads_setting(3) == 3
    assert harness.threads_arg("auto") == 0 and harness.threads_arg("2") == 2
    with pytest.raises(Exception, match="--threads='-1' is not valid"):
        harness.threads_arg("-1")
    defaults = {}
    for name, module in BENCHMARKS.items():
        bench = importlib.import_module(module).BENCH
        defaults[name] = bench.parser().parse_known_args([])[0].__dict__.get("threads", "no flag")
    assert defaults == {
        "train-tiny": "no flag",  # the fit config's threads (--model.threads passes through)
        "rollout": 0,
        "step": 0,  # GRPOModule's own default was auto, whatever torch.set_num_threads said before
        "schedule": 2,  # min(torch's default, 2) on the 2-core machine that recorded schedule.json
        "decode-step": 1,
        "paper": 0,
        "busy-cpu": "no flag",  # its --settings are the --model.threads values compared
        "learn": 2,  # the job of issue #19: 2 threads for both trainers
        "update": 0,
        "dynamic": 1,  # counts (steps, tokens) are its result; one thread keeps its wall-clock ratios stable
        "skip": 1,
        "adaptive": 1,  # counts are its result, as dynamic's
        "adaptive-memory": 1,  # peak RSS of one process per cap: one thread keeps it from torch's thread pools
        "reward-model": 1,  # peak RSS of one process per scoring, as adaptive-memory
        "sharded-memory": 1,  # counts bytes; one thread a rank, as the 2-rank tests run
        "vlm-learn": "no flag",  # the fit config's threads, as train-tiny
        "agent": 1,  # wall times of two trainers side by side in one process, and peak RSS of one process per G
        "vlm": 1,  # two trainers' seconds per step, one process a run, and peak RSS of one process per G
    }


def test_markdown_table_shows_a_skipped_row_by_its_configuration_and_reason():
    columns = [("name", cell("name")), ("x", cell("x", ".1f")), ("y", cell("y"))]
    rows = [{"name": "a", "x": 0.5, "y": 3}, {"name": "b", "x": 1.0, "skipped": "over 5 s"}]
    assert markdown_table(columns, rows, keys=1).splitlines() == [
        "| name | x | y |",
        "|---|---|---|",
        "| a | 0.5 | 3 |",
        "| b | skipped: over 5 s |  |",
    ]
    with pytest.raises(ValueError, match="keys=3 is not valid for 3 columns"):
        markdown_table(columns, rows, keys=3)


def test_a_table_with_skipped_rows_reprints_from_its_json_as_it_was_recorded():
    text = render(ROOT / "benchmarks/rollout_qwen3_42m.json")  # 18 configurations ran, 6 were skipped
    recorded = (ROOT / "benchmarks/results/rollout.md").read_text().splitlines()
    lines = text.splitlines()
    assert [line for line in lines if "skipped" not in line and line not in recorded] == []
    skipped = [line for line in lines if "skipped" in line]
    first = "| 8 | 128 | hf_full | skipped: 1024 sequences > --max-sequences |" + "  |" * 9
    assert len(skipped) == 6 and skipped[0] == first
    assert all(line.count("|") == lines[0].count("|") for line in lines)


@pytest.mark.parametrize("path", RECORDED, ids=lambda p: str(p.relative_to(ROOT / "benchmarks")))
def test_every_recorded_json_reprints_and_its_command_parses(path):
    assert render(path).startswith(("|", "##"))
    command = json.loads(path.read_text()).get("command")
    if command:
        words = shlex.split(command)
        start = words.index("benchmarks")
        assert words[start - 2 : start] == ["python", "-m"]
        if words[start + 1] == "learn-merge":  # a command over recorded files, not a benchmark
            args = importlib.import_module("benchmarks.learn_merge").parser().parse_args(words[start + 2 :])
            assert all((ROOT / source).is_file() for source in args.paths)
            return
        bench = importlib.import_module(BENCHMARKS[words[start + 1]]).BENCH
        parse = bench.parser().parse_known_args if bench.extra_args else bench.parser().parse_args
        parse(words[start + 2 :])  # an unknown flag or a bad value exits


def page_commands(path):
    """Every ``python -m benchmarks <name> ...`` a results page records, as the words a shell would pass."""
    for match in re.finditer(r"python -m benchmarks ([a-z-]+)( [^`\n]*)?", path.read_text()):
        if match[1] in BENCHMARKS or match[1] == "learn-merge":  # not the prose's `<name>` or `table PATH`
            line = match[0].split(" #")[0].split(";")[0].split(" && ")[0].removesuffix(" &")
            yield shlex.split(line.replace("$s", "0"))  # `for s in 0 1; do ... --seed $s ...`: the loop's first seed


@pytest.mark.parametrize("path", PAGES, ids=lambda p: p.name)
def test_every_command_a_results_page_records_parses(path):
    commands = list(page_commands(path))
    # a page measured through the training command itself records `python -m infgrpo.fit` (those commands are
    # parsed by tests/test_written_commands.py)
    assert commands or "python -m infgrpo.fit" in path.read_text(), f"{path.name} records no command"
    for words in commands:
        if words[3] == "learn-merge":
            args = importlib.import_module("benchmarks.learn_merge").parser().parse_args(words[4:])
            assert all((ROOT / source).is_file() for source in args.paths)
            continue
        bench = importlib.import_module(BENCHMARKS[words[3]]).BENCH
        parse = bench.parser().parse_known_args if bench.extra_args else bench.parser().parse_args
        parse(words[4:])  # an unknown flag or a bad value exits


@pytest.mark.parametrize("path", TOOLS, ids=lambda p: p.name)
def test_every_tool_json_names_the_script_and_arguments_that_wrote_it(path):
    words = shlex.split(json.loads(path.read_text())["command"])
    script = next(word for word in words if word.startswith("tools/"))
    assert (ROOT / script).is_file() and words[-1] == f"benchmarks/tools/{path.name}"


def test_the_fit_csv_log_is_read_once_for_its_training_steps(tmp_path):
    folder = tmp_path / "lightning_logs" / "version_0"
    folder.mkdir(parents=True)
    (folder / "metrics.csv").write_text(
        "epoch,step,train/reward,train/rollout/decode_steps,val/accuracy\n"
        "0,0,0.25,10,\n"
        "0,0,,,0.5\n"  # a validation row: not a training step
        "0,1,0.75,14,\n"
    )
    assert [r["step"] for r in logged_steps(tmp_path)] == ["0", "1"]
    curves = read_train_curves(tmp_path)
    assert curves["logged_steps"] == 2 and curves["reward_first10"] == 0.5 and curves["decode_steps_mean"] == 12


def test_the_stop_rules_keep_the_slices_the_recorded_figures_used(tmp_path):
    assert TINY_VOCAB == len(load_tokenizer("tiny"))
    assert random_prompt_stop_ids(0.02) == list(range(1, 3039))  # round(151,936 x 0.02) = 3,039
    assert tokenizer_stop_ids(0.02) == list(range(103, 103 + 3039))
    assert random_prompt_stop_ids(1e-9) == [1] and tokenizer_stop_ids(1e-9) == [103]
    assert save_bench_model("tiny", tmp_path) == "tiny"
    with pytest.raises(ValueError, match="model='nope' is not known; valid: tiny, qwen3-42m, qwen3-1.7b-shape"):
        save_bench_model("nope", tmp_path)
