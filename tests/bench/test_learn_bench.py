"""bench learn: infgrpo and TRL's GRPOTrainer on the same job (the figures are the lead's, in benchmarks/).

The wiring runs on the tiny model and task: 2 steps x 2 prompts x G=2, each trainer and each evaluation
in its own process. What is checked against a reference outside the benchmark: the prompts of each step
(the data module's own seeded batch sampler), the untrained accuracy (``infgrpo.evaluation.evaluate`` in
this process), TRL's logged reward (the values our reward function gave it), TRL's batch arithmetic
(``GRPOConfig``'s own ``generation_batch_size``).
"""

import json

import pytest
import torch

import benchmarks.learn as learn
from benchmarks.learn import BENCH, job_of, main, run_one, runs_of, same_job, tables
from benchmarks.learn_infgrpo import module_kwargs
from benchmarks.learn_job import (
    CHAIN_SUM,
    KINDS,
    TRL_ACCURACY,
    VARIANTS,
    TrainingMemory,
    answer_kind,
    data_kwargs,
    digest,
    trl_answer_kind,
    write_trl_data,
)
from benchmarks.table import render
from infgrpo.data import PromptDataModule
from infgrpo.data.resumable import ResumableBatchSampler
from infgrpo.evaluation import evaluate
from infgrpo.policy.load import load_policy, load_tokenizer

TINY = ["--model", "tiny", "--task", "tiny", "--prompts", "2", "--group-size", "2", "--max-new-tokens", "8"]


def job(*argv: str) -> dict:
    return job_of(BENCH.parser().parse_args(list(argv)))


@pytest.mark.slow  # over 20 s on a busy 2-core machine
def test_both_trainers_train_on_the_same_prompts_and_are_evaluated_by_the_same_code(tmp_path, capsys):
    out, png = tmp_path / "learn.json", tmp_path / "learn.png"
    argv = [*TINY, "--steps", "2", "--eval-size", "8", "--threads", "1", "--lr-schedule", "linear", "--eval-every", "1"]
    result = main([*argv, "--json", str(out), "--png", str(png)])
    rows = result["rows"]
    assert [(r["trainer"], "skipped" in r) for r in rows] == [("infgrpo", False), ("trl", False)]
    infgrpo, trl = rows

    # 1) the same prompts each step, in the data module's own order, as each trainer saw them
    data = PromptDataModule(path="tiny", tokenizer="tiny", batch_size=2, eval_size=8, seed=0)
    data.setup("fit")
    order = list(ResumableBatchSampler(len(data.train_items), 2, seed=0))[:2]
    want = [digest([data.train_items[i]["prompt_text"] for i in batch]) for batch in order]
    want_ids = [digest([data.train_items[i]["prompt_ids"] for i in batch]) for batch in order]
    for r in rows:
        assert [s["prompts_sha"] for s in r["per_step"]] == want
        assert [s["prompt_ids_sha"] for s in r["per_step"]] == want_ids  # TRL's chat template gave our ids
        assert [s["completions"] for s in r["per_step"]] == [4, 4]
    assert result["same_job"] == {"same": True, "runs": 2, "steps": 2, "first_difference": None}

    # 2) the same start, the same settings read back from both trainers; both adapters trained
    assert infgrpo["initial_adapter_sha"] == trl["initial_adapter_sha"]
    assert infgrpo["matched"] == trl["matched"]
    assert infgrpo["matched"]["lr_schedule"] == "linear" and infgrpo["matched"]["loss_type"] == "grpo"
    for r in rows:
        assert r["final_adapter_sha"] != r["initial_adapter_sha"]
        assert r["eval"]["adapter_sha"] == r["final_adapter_sha"]  # the evaluation loaded the trained adapter
        # the held-out curve: untrained, the adapter written after step 1 (neither the first nor the last), the last
        assert [e["step"] for e in r["eval_curve"]] == [0, 1, 2] and r["eval_curve"][-1] == r["eval"]
        assert r["eval_curve"][1]["adapter_sha"] not in (r["initial_adapter_sha"], r["final_adapter_sha"], None)

    # 3) TRL's logged reward is our reward function's; infgrpo's step splits into rollout and update
    for s in trl["per_step"]:
        assert s["reward"] == pytest.approx(s["reward_fn_mean"])
    for s in infgrpo["per_step"]:
        assert 0 < s["rollout_s"] and 0 < s["update_s"] and s["rollout_s"] + s["update_s"] <= s["seconds"]
    for r in rows:
        assert r["rss_peak_bytes"] > r["rss_rise_bytes"] >= 0 and r["device"] == "cpu" and r["torch_threads"] == 1

    # 4) one evaluation function, one set of held-out prompts: the untrained figure equals evaluate() here
    before = result["eval_before"]
    assert {before["eval_prompts_sha"]} == {r["eval"]["eval_prompts_sha"] for r in rows}
    reference = evaluate(
        load_policy("tiny").eval(), load_tokenizer("tiny"), data.eval_items, {"synthetic": 1.0}, "synthetic", 8
    )
    assert before["eval_prompts"] == 8
    assert (before["accuracy"], before["reward"]) == (reference["accuracy"], reference["reward"])
    assert before["completion_length"] == reference["completion_length"]

    # 5) the JSON re-prints the tables as printed; the figure is a PNG
    printed = capsys.readouterr().out
    assert render(out) in printed and "same prompts (user turns and token ids) and completions" in printed
    assert "| step | infgrpo (checkpointing off, share_prompt auto): held-out accuracy |" in printed
    assert json.loads(out.read_text())["rows"] == rows
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_the_default_job_is_the_one_of_issue_19():
    default = job()
    assert {k: default[k] for k in ("model", "task", "task_config", "prompt_template", "reward_function")} == {
        "model": "smollm2",
        "task": "chain_sum",
        "task_config": CHAIN_SUM,
        "prompt_template": "{question} Give only the final answer.",
        "reward_function": "reasoning_gym",
    }
    assert (default["prompts"], default["group_size"], default["max_new_tokens"], default["steps"]) == (4, 8, 48, 40)
    assert (default["lora_r"], default["lora_alpha"], default["lr"], default["temperature"]) == (16, 32, 1e-4, 1.0)
    assert (default["loss_type"], default["beta"], default["scale_rewards"]) == ("grpo", 0.0, "group")
    assert (default["eval_size"], default["threads"]) == (500, 2)


def test_each_trainer_and_setting_is_one_run():
    def runs(*argv: str) -> list[tuple]:
        args = BENCH.parser().parse_args(list(argv))
        return [(r["trainer"], r["gradient_checkpointing"], r["share_prompt"]) for r in runs_of(args, job_of(args))]

    assert runs() == [("infgrpo", False, "auto"), ("trl", False, None)]
    assert runs("--gradient-checkpointing", "both", "--share-prompt", "both") == [
        ("infgrpo", False, "on"), ("infgrpo", False, "off"), ("trl", False, None),
        ("infgrpo", True, "on"), ("infgrpo", True, "off"), ("trl", True, None),
    ]  # fmt: skip
    assert runs("--gradient-checkpointing", "default") == [("infgrpo", False, "auto"), ("trl", True, None)]
    assert runs("--trainers", "trl", "--gradient-checkpointing", "on") == [("trl", True, None)]


def test_trl_sees_prompts_times_g_completions_per_optimizer_step(tmp_path):
    from benchmarks.learn_trl import trl_config

    for argv, micro, accumulate in (([], 8, 4), (["--group-size", "32"], 8, 16), ([*TINY], 4, 1)):
        cfg = dict(job(*argv), gradient_checkpointing=True)
        args = trl_config(cfg, str(tmp_path))
        g = cfg["group_size"]
        assert (args.per_device_train_batch_size, args.gradient_accumulation_steps) == (micro, accumulate)
        assert args.generation_batch_size == cfg["prompts"] * g and args.num_generations == g  # TRL's own arithmetic
        assert args.gradient_checkpointing and args.gradient_checkpointing_kwargs == {"use_reentrant": False}
        assert not trl_config(dict(cfg, gradient_checkpointing=False), str(tmp_path)).gradient_checkpointing
        assert (args.lr_scheduler_type.value, args.warmup_steps, args.shuffle_dataset) == ("constant", 0, False)
        assert trl_config(dict(cfg, lr_schedule="cosine"), str(tmp_path)).lr_scheduler_type.value == "cosine"
        assert (args.top_k, args.top_p, args.bf16, args.use_cpu) == (0, 1.0, False, not torch.cuda.is_available())


def test_extra_infgrpo_settings_reach_the_module_and_matched_ones_are_refused():
    cfg = job("--infgrpo-config", "update.token_budget=auto", "sampler.num_slots=16", "sampler.refill=fifo")
    assert cfg["infgrpo_config"] == {"update.token_budget": "auto", "sampler.num_slots": 16, "sampler.refill": "fifo"}
    kwargs = module_kwargs(dict(cfg, gradient_checkpointing=False, share_prompt="auto", adapter_dir=None))
    assert kwargs["update"]["token_budget"] == "auto" and kwargs["optimizer"]["learning_rate"] == 1e-4
    assert kwargs["optimizer"]["lr_scheduler_type"] == "constant"
    decayed = job("--lr-schedule", "cosine")
    settings = module_kwargs(dict(decayed, gradient_checkpointing=False, share_prompt="auto", adapter_dir=None))
    assert settings["optimizer"]["lr_scheduler_type"] == "cosine"
    sampler = kwargs["sampler"]
    assert (sampler["num_slots"], sampler["refill"], sampler["max_new_tokens"]) == (16, "fifo", 48)
    with pytest.raises(ValueError, match="learning_rate=1 is a setting matched with TRL; set it with --lr"):
        job("--infgrpo-config", "optimizer.learning_rate=1")
    with pytest.raises(ValueError, match="sampler.top_k=5 is a setting matched with TRL; it is fixed by the job"):
        job("--infgrpo-config", "sampler.top_k=5")
    with pytest.raises(ValueError, match="'nope' is not a GRPOModule setting; valid: .*update.token_budget"):
        job("--infgrpo-config", "nope=1")
    with pytest.raises(ValueError, match="'update.token_budget' is not KEY=VALUE"):
        job("--infgrpo-config", "update.token_budget")


def test_bad_flags_are_errors_naming_the_flag():
    with pytest.raises(ValueError, match=r"--task-config='\{min_terms' is not JSON"):
        job("--task-config", "{min_terms")
    with pytest.raises(ValueError, match="--task-config=.*for a reasoning-gym --task only"):
        job("--task", "tiny", "--task-config", "{}")
    with pytest.raises(ValueError, match=r"--trl-micro-batch=3 must divide the 32 completions of a step"):
        job("--trl-micro-batch", "3")
    with pytest.raises(ValueError, match="--group-size=1 must be >= 2"):
        job("--group-size", "1")
    assert job("--task", "leg_counting")["task_config"] == {} and job(*TINY)["prompt_template"] is None


def test_a_step_that_differs_between_runs_is_named():
    step = {"prompts_sha": "a", "prompt_ids_sha": "b", "completions": 4}
    rows = [
        {"run": "x", "per_step": [step, step]},
        {"run": "y", "per_step": [step, {**step, "prompts_sha": "c"}]},
        {"run": "z", "skipped": "over 5 s"},
    ]
    assert same_job(rows) == {"same": False, "runs": 2, "steps": 2, "first_difference": {"step": 1, "runs": ["x", "y"]}}
    assert same_job(rows[:1] + rows[2:])["same"]


def test_skipped_runs_show_as_rows_with_their_reason():
    proof = {"prompts_sha": "a", "prompt_ids_sha": "b", "completions": 4}
    steps = [
        {"step": i, "seconds": 2.0 + i, "rollout_s": 1.0, "update_s": i, "reward": i / 4} | proof for i in range(3)
    ]
    ran = {"run": "infgrpo (a)", "per_step": steps, "rss_peak_bytes": 3 * 2**20, "rss_rise_bytes": 2**20}
    ran |= {"eval": {"accuracy": 0.5}, "matched": {"lr": 0.1}}
    result = {"eval_before": {"run": "untrained", "skipped": "over 9 s"}, "rows": [ran, {"run": "trl", "skipped": "x"}]}
    lines = tables(result).splitlines()
    assert lines[2] == "| infgrpo (a) | 3 | 2.0 | 3.5 | 1.0 | 1.5 | 0.250 | 0.250 | 0.500 | 3.0 | 1.0 |"
    assert lines[3] == "| trl | skipped: x |" + "  |" * 9
    assert lines[5].startswith("held-out accuracy before training: skipped (over 9 s)")
    assert "| lr | 0.1 | yes |" in lines and "| 3 | 0.500 | 4.0 |" in lines


def test_training_memory_keeps_the_largest_phase_peak_it_was_shown():
    with TrainingMemory() as memory:
        blob = torch.ones(2**22)  # 16 MiB while the window is open
        memory.observe(5 * 2**20, 7 * 2**20)  # infgrpo's phase peaks (CUDA), taken before it reset the counters
        memory.observe(3 * 2**20, 9 * 2**20)
    del blob
    assert (memory.cuda_allocated, memory.cuda_reserved) == (5 * 2**20, 9 * 2**20)
    result = memory.result()
    assert result["rss_peak_bytes"] >= result["rss_base_bytes"] > 0 and result["rss_rise_bytes"] >= 0
    assert ("cuda_max_allocated_bytes" in result) == torch.cuda.is_available()


# the tiny task at G=2 rarely spreads: dynamic sampling hits its cap in most steps, and warns after three in a row when
# the clock leaves time for three steps (a quicker machine does): not what this test is about
@pytest.mark.filterwarnings(
    r"ignore:\[infgrpo\] dynamic sampling hit dynamic_sampling.max_prompts=:infgrpo.settings.InfgrpoWarning"
)
def test_a_clock_stops_each_run_and_the_variants_train_with_dynamic_sampling_and_without_the_skip(
    tmp_path, children_here
):
    children_here(learn, run_one)  # the runs and evaluations here: fresh processes only cost imports (test 1 spawns)
    argv = [*TINY, "--trainers", "infgrpo", "--variants", "plain", "dynamic", "--steps", "40", "--minutes", "0.03"]
    result = main([*argv, "--eval-size", "8", "--threads", "1", "--png", str(tmp_path / "clock.png")])
    plain, dynamic = result["rows"]
    assert (plain["variant"], dynamic["variant"]) == ("plain", "dynamic") and "dynamic" in dynamic["run"]
    for r in (plain, dynamic):
        seconds = [s["seconds"] for s in r["per_step"]]
        assert 1 <= len(seconds) < 40 and sum(seconds) >= 1.8 and sum(seconds[:-1]) < 1.8  # stopped at the clock
        assert r["eval"]["train_seconds"] == pytest.approx(sum(seconds)) and r["eval_curve"][0]["train_seconds"] == 0.0
    assert all(s["update/rows_skipped"] == 0 for s in plain["per_step"])  # plain: every row through the update
    assert all(s["dynamic/groups_trained"] == 2 for s in dynamic["per_step"])
    assert "dynamic/prompts_drawn" not in plain["per_step"][0]
    assert result["same_job"]["runs"] == 1  # dynamic sampling's run chooses its own prompts: not compared
    assert "training minutes" in tables(result) and (tmp_path / "clock.png").stat().st_size > 0


def test_chain_sum_answers_fall_in_four_kinds_and_the_table_shows_each_runs_accuracy_by_kind():
    import reasoning_gym

    seen = set()
    for row in reasoning_gym.create_dataset("chain_sum", size=300, seed=0, **CHAIN_SUM):
        a, op, b = row["question"].split(":")[-1].split()[:3]  # reference: the numbers read from the text
        value = int(a) + int(b) if op == "+" else int(a) - int(b)
        assert value == int(row["answer"])
        want = "neg" if value < 0 else ("sub+" if op == "-" else ("add3" if value >= 100 else "add2"))
        assert answer_kind(row) == want
        seen.add(want)
    assert seen == set(KINDS)
    trained = {"accuracy": 0.5, "accuracy_by": {"add2": [4, 4], "neg": [0, 4]}}
    result = {
        "eval_before": {"accuracy": 0.25, "accuracy_by": {"add2": [3, 4], "neg": [0, 4]}},
        "rows": [{"run": "infgrpo (adaptive)", "eval": trained}],
    }
    from benchmarks.learn_tables import kind_table

    assert kind_table(result).splitlines()[2:] == [
        "| untrained | 0.250 | 0.750 (3/4) | 0.000 (0/4) |",
        "| infgrpo (adaptive) | 0.500 | 1.000 (4/4) | 0.000 (0/4) |",
    ]
    assert VARIANTS["adaptive"] == {"adaptive_groups.enabled": True}
    kwargs = module_kwargs(dict(job("--variants", "adaptive"), variant="adaptive", gradient_checkpointing=False,
                                share_prompt="auto", adapter_dir=None))  # fmt: skip
    assert kwargs["adaptive_groups"]["enabled"] is True


TRL_FORMAT = ["--model", "tiny", "--task", "chain_sum", "--format", "trl", "--prompts", "2", "--group-size", "2"]


def test_format_trl_both_trainers_read_one_conversational_jsonl_and_trls_own_accuracy_reward(tmp_path, children_here):
    from trl.rewards import accuracy_reward

    from infgrpo.rewards import score_rewards

    children_here(learn, run_one)  # every child in this process (the wiring is the parent's)
    argv = [*TRL_FORMAT, "--max-new-tokens", "8", "--steps", "2", "--eval-size", "8", "--threads", "1"]
    result = main(argv)
    cfg = job(*argv)
    assert (cfg["format"], cfg["reward_function"]) == ("trl", "trl.rewards:accuracy_reward")
    assert cfg["prompt_template"].format(question="1 + 2 =") == "1 + 2 = Put the final answer in \\boxed{}."

    # 1) the files: the default job's questions (reasoning-gym rows of the same task config), the user turn + boxed
    files = write_trl_data(cfg, tmp_path)
    assert result["data"] == {split: {"rows": f["rows"], "sha": f["sha"]} for split, f in files.items()}
    assert (files["train"]["rows"], files["eval"]["rows"]) == (1000, 8)
    source = PromptDataModule(path="reasoning_gym:chain_sum", task_config=CHAIN_SUM, eval_size=8)
    train_rows, eval_rows = source.rows()
    written = [json.loads(line) for line in open(files["eval"]["path"])]
    assert written == [
        {"prompt": [{"role": "user", "content": r["question"] + " Put the final answer in \\boxed{}."}],
         "solution": str(r["answer"])} for r in eval_rows
    ]  # fmt: skip
    assert json.loads(open(files["train"]["path"]).readline())["solution"] == str(train_rows[0]["answer"])

    # 2) both trained on the same rows each step (TRL from the file, in infgrpo's order), from the same adapter,
    #    with TRL's own accuracy_reward (TRL: as reward_funcs; its completions conversational)
    infgrpo, trl = result["rows"]
    assert (infgrpo["trainer"], trl["trainer"]) == ("infgrpo", "trl") and "skipped" not in infgrpo | trl
    assert result["same_job"] == {"same": True, "runs": 2, "steps": 2, "first_difference": None}
    assert infgrpo["initial_adapter_sha"] == trl["initial_adapter_sha"] and infgrpo["matched"] == trl["matched"]
    own = f"{accuracy_reward.__module__}.{accuracy_reward.__qualname__}"
    assert infgrpo["reward_funcs"] == trl["reward_funcs"] == [own] and trl["conversational_completions"]
    assert infgrpo["settings"]["rewards"]["on_error"] == "skip" and infgrpo["matched"]["chat_template"]
    assert all(s["reward"] == pytest.approx(s["reward_fn_mean"]) for s in trl["per_step"])
    assert "data_files" not in infgrpo and "data_files" not in result["eval_before"]

    # 3) the held-out evaluation reads eval.jsonl's conversations: the untrained figure is evaluate()'s here, and the
    #    reward gets conversational prompts and completions (a right \boxed{} answer scores 1, a wrong one 0)
    data = PromptDataModule(**data_kwargs({**cfg, "data_files": files}))
    data.setup("fit")
    items = data.eval_items
    assert [it["prompt"] for it in items] == [r["prompt"] for r in written]
    reference = evaluate(
        load_policy("tiny").eval(), load_tokenizer("tiny"), items, {cfg["reward_function"]: 1.0},
        cfg["reward_function"], 8, on_error="skip", group_by=trl_answer_kind,
    )  # fmt: skip
    before = result["eval_before"]
    assert (before["accuracy"], before["reward"]) == (reference["accuracy"], reference["reward"])
    assert before["accuracy_by"] == reference["accuracy_by"] and sum(n for _, n in before["accuracy_by"].values()) == 8
    texts = [f"So the sum is \\boxed{{{int(r['solution']) + k % 2}}}." for k, r in enumerate(written)]
    prompts = [it["prompt"] for it in items]
    scores = score_rewards({cfg["reward_function"]: 1.0}, texts, [it["meta"] for it in items], prompts=prompts)
    assert scores.total.tolist() == [1.0 - k % 2 for k in range(8)]


def test_format_trl_needs_a_reasoning_gym_task():
    with pytest.raises(ValueError, match="--format trl writes a reasoning-gym task's questions"):
        job("--format", "trl", "--task", "tiny")
    assert job()["format"] == "infgrpo" and job("--format", "trl")["prompt_template"].endswith("\\boxed{{}}.")


def test_recipe_boxed_gives_both_trainers_a_system_prompt_and_the_format_and_accuracy_rewards(tmp_path, children_here):
    from benchmarks.learn_job import BOXED_SYSTEM
    from benchmarks.learn_rewards import FORMAT_REWARD, RECIPE_REWARDS
    from benchmarks.learn_tables import reward_parts_table

    children_here(learn, run_one)  # every child in this process (the wiring is the parent's)
    argv = [*TRL_FORMAT, "--recipe", "boxed", "--max-new-tokens", "8", "--steps", "2", "--eval-size", "8"]
    result = main([*argv, "--threads", "1"])
    cfg = job(*argv)
    assert (cfg["recipe"], cfg["prompt_template"], cfg["reward_function"]) == ("boxed", "{question}", TRL_ACCURACY)
    assert job(*TRL_FORMAT, "--recipe", "boxed")["max_new_tokens"] == 64 and job(*TRL_FORMAT)["max_new_tokens"] == 48

    # 1) each row's prompt: the recipe's system message, then the question as the user turn
    files = write_trl_data(cfg, tmp_path)
    _, eval_rows = PromptDataModule(path="reasoning_gym:chain_sum", task_config=CHAIN_SUM, eval_size=8).rows()
    written = [json.loads(line) for line in open(files["eval"]["path"])]
    assert [w["prompt"] for w in written] == [
        [{"role": "system", "content": BOXED_SYSTEM}, {"role": "user", "content": r["question"]}] for r in eval_rows
    ]
    assert "\\boxed{}" in BOXED_SYSTEM and "Example: 3 + 4 = \\boxed{7}" in BOXED_SYSTEM

    # 2) both trained on the same prompt token ids (the system message rendered alike) with the same two functions
    infgrpo, trl = result["rows"]
    assert "skipped" not in infgrpo | trl
    assert result["same_job"] == {"same": True, "runs": 2, "steps": 2, "first_difference": None}
    names = ["benchmarks.learn_rewards.boxed_format_reward", "trl.rewards.accuracy_rewards.accuracy_reward"]
    assert infgrpo["reward_funcs"] == trl["reward_funcs"] == names
    assert infgrpo["settings"]["rewards"]["functions"] == RECIPE_REWARDS and trl["settings"]["reward_weights"] == [1, 1]

    # 3) per step and trainer, each reward's mean; the step's reward is their sum (weights 1 and 1, no None)
    for r in (infgrpo, trl):
        for s in r["per_step"]:
            assert list(s["rewards"]) == list(RECIPE_REWARDS) and all(0 <= v <= 1 for v in s["rewards"].values())
            assert s["reward"] == pytest.approx(sum(s["rewards"].values()), abs=1e-6)
        assert [e["step"] for e in r["eval_curve"]] == [0, 2] and 0 <= r["eval"]["accuracy"] <= 1
    lines = reward_parts_table(result["rows"]).splitlines()
    assert lines[0] == "| run | reward | steps | mean, first 10 steps | mean, last 10 steps |"
    assert [line.split(" | ")[:3] for line in lines[2:]] == [
        [f"| {r['run']}", name.rpartition(":")[2], "2"] for r in (infgrpo, trl) for name in RECIPE_REWARDS
    ]
    assert "boxed_format_reward" in tables(result) and FORMAT_REWARD.endswith(":boxed_format_reward")


def test_the_format_reward_wants_one_non_empty_box():
    from benchmarks.learn_rewards import boxed_format_reward

    texts = ["so \\boxed{7}", "\\boxed{\\frac{1}{2}} done", "\\boxed{ }", "\\boxed{1} or \\boxed{2}", "\\boxed{3", "7"]
    as_messages = [[{"role": "assistant", "content": t}] for t in texts]
    assert boxed_format_reward(completions=as_messages) == boxed_format_reward(completions=texts)
    assert boxed_format_reward(completions=texts, solution=["7"] * 6) == [1.0, 1.0, 0.0, 0.0, 0.0, 0.0]
    with pytest.raises(ValueError, match="--recipe boxed is a recipe of --format trl's conversational data"):
        job("--recipe", "boxed")
