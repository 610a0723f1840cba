"""bench vlm-learn: held-out accuracy before training and at each validation of a config's fit run, shrunk."""

import pytest

from benchmarks.vlm_learn import main, tables
from infgrpo.fit import make_cli

SHRUNK = ["--data.batch_size", "2", "--data.train_size", "4", "--data.eval_size", "4", "--model.group_size", "2",
          "--model.sampler.num_slots", "4", "--model.sampler.max_new_tokens", "8", "--model.threads", "1",
          "--trainer.max_steps", "2", "--trainer.val_check_interval", "1", "--trainer.log_every_n_steps", "1",
          "--trainer.enable_progress_bar", "false", "--trainer.enable_checkpointing", "false"]  # fmt: skip


@pytest.mark.slow  # two fits of tiny-vl (the benchmark's, and Lightning's own validation as the reference)
def test_the_start_is_lightnings_validation_and_the_curve_ends_where_the_after_scoring_is(tmp_path):
    result = main(["--config", "configs/vlm-tiny.yaml", *SHRUNK])
    assert [v["step"] for v in result["validations"]] == [1, 2] and result["max_steps"] == 2
    assert [r["step"] for r in result["train_reward"]][-1] == 2
    assert result["final_validation_equal"] and result["eval_prompts"] == 4
    for when in ("before", "after"):  # the shapes task's kinds alternate: 2 of each in 4 prompts
        assert {k: n for k, (_, n) in result[f"by_kind_{when}"].items()} == {"colours": 2, "count": 2}
        right = sum(r for r, _ in result[f"by_kind_{when}"].values())
        assert result[f"accuracy_{when}"] == right / 4
    # the reference: Lightning's validation loop on the same run, untrained
    cli = make_cli(["--config", "configs/vlm-tiny.yaml", "--trainer.default_root_dir", str(tmp_path), *SHRUNK])
    start = cli.trainer.validate(cli.model, cli.datamodule, verbose=False)[0]["val/accuracy"]
    assert result["accuracy_before"] == pytest.approx(start, abs=1e-6)
    for when in ("before", "after"):  # every answer is right, the task's flawed one, or another: by kind and shapes
        answers = result[f"answers_{when}"]
        assert sum(sum(c) for c in answers.values()) == 4 and all(k.split()[0] in ("colours", "count") for k in answers)
        assert sum(c[0] for c in answers.values()) == round(4 * result[f"accuracy_{when}"])
    assert "held-out accuracy (greedy, 4 prompts), 2 steps" in tables(result)
