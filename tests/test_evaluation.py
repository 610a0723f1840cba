"""Held-out evaluation: greedy completions scored like training, length rewards included."""

import pytest
import torch

from infgrpo.evaluation import evaluate
from infgrpo.rewards import compute_rewards


def test_evaluate_scores_greedy_completions_with_length_rewards(tiny_model, tokenizer, prompts):
    items = [{"prompt_ids": p, "meta": {"prompt": tokenizer.decode(p)}} for p in prompts]
    rewards = {"overlong": 1.0}  # needs completion_lengths and max_completion_length
    got = evaluate(tiny_model, tokenizer, items, rewards, max_new_tokens=6, batch_size=2)
    # reference: HF greedy decoding of each prompt, scored by the same reward functions (before the
    # fix, evaluate() gave the rewards no lengths and 'overlong' raised)
    texts, lengths = [], []
    for p in prompts:
        out = tiny_model.generate(torch.tensor([p]), do_sample=False, max_new_tokens=6, pad_token_id=0)[0, len(p) :]
        ids = out.tolist()
        ids = ids[: ids.index(tokenizer.eos_token_id) + 1] if tokenizer.eos_token_id in ids else ids
        texts.append(tokenizer.decode(ids, skip_special_tokens=True))
        lengths.append(len(ids))
    total, _ = compute_rewards(rewards, texts, [it["meta"] for it in items], "raise", lengths, 6)
    assert got["reward"] == pytest.approx(total.mean().item())
    assert got["completion_length"] == pytest.approx(sum(lengths) / len(lengths))


def test_items_with_images_but_no_vision_inputs_are_refused_not_decoded_without_them(tiny_model, tokenizer, prompts):
    from infgrpo.settings import ConfigError

    items = [{"prompt_ids": p, "meta": {}} for p in prompts[:2]]
    items[1]["images"] = ["an image"]  # data.eval_items of an image dataset, not collated: no "vision"
    with pytest.raises(ConfigError, match=r"items\[1\] holds images but no vision inputs: .*data.collate\(items\)"):
        evaluate(tiny_model, tokenizer, items, {"overlong": 1.0}, max_new_tokens=4, batch_size=2)


def test_accuracy_by_kind_counts_right_answers_and_leaves_failed_values_out():
    from infgrpo.evaluation import accuracy_by

    items = [{"prompt_ids": [1], "meta": {"kind": k}} for k in "abab" + "c"]
    values = torch.tensor([1.0, 0.0, float("nan"), 1.5, float("nan")])
    assert accuracy_by(items, values, lambda meta: meta["kind"]) == {"a": [1, 1], "b": [1, 2]}


def test_the_0_1_keywords_are_refused_since_0_3_as_python_refuses_an_unknown_keyword(tiny_model, tokenizer, prompts):
    items = [{"prompt_ids": p, "meta": {"prompt": tokenizer.decode(p)}} for p in prompts[:2]]
    kwargs = dict(rewards={"overlong": 1.0}, max_new_tokens=4, batch_size=2)
    for old in ({"accuracy_reward": "overlong"}, {"reward_on_error": "skip"}):
        with pytest.raises(TypeError, match=f"unexpected keyword argument '{next(iter(old))}'"):
            evaluate(tiny_model, tokenizer, items, **old, **kwargs)


def test_heldout_means_take_updates_after_a_validate_run_in_inference_mode():
    """trainer.validate (inference mode) and then fit: the means' fresh states are no inference tensors."""
    from infgrpo.evaluation import HeldoutMeans
    from infgrpo.scoring import Scores

    def scores(values):
        t = torch.tensor(values)
        return Scores(total=t, lengths=t, truncated=t * 0, failed=t * 0, parts={"acc": t})

    means = HeldoutMeans()
    with torch.inference_mode():
        means.update(scores([1.0, 0.0]), "acc")
        assert means.compute("acc") == {"reward": torch.tensor(0.5), "accuracy": torch.tensor(0.5)}
    means.update(scores([1.0, 1.0]), "acc")  # raised "Inplace update to inference tensor" before
    assert means.compute("acc") == {"reward": torch.tensor(1.0), "accuracy": torch.tensor(1.0)}
