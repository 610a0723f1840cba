"""Reasoning recipes (tests/fixtures/trl/recipes/, in the shapes of open-r1's GRPO recipes) convert unedited: every
registry name is known, its script arguments reach the reward that reads them, the sandboxed rewards are the
recipe's functions with their arguments bound, and ``python -m infgrpo.fit --config OUT --print_config`` takes
each converted file."""

import contextlib
import io
import sys
from pathlib import Path

import pytest
import yaml

pytest.importorskip("trl")

from infgrpo.fit import main as fit  # noqa: E402
from infgrpo.from_trl import KNOWN, RENAMED, convert, read_trl_file  # noqa: E402
from infgrpo.training.hparams import check_settings  # noqa: E402
from infgrpo.trl.recipe_rewards import RECIPE_REWARDS  # noqa: E402

RECIPES = Path(__file__).resolve().parents[1] / "fixtures" / "trl" / "recipes"
PARTIAL = "partial(open_r1.rewards:"
WANT = {
    "recipe_tag_count": {"open_r1_accuracy": 1.0, "open_r1_format": 1.0, "open_r1_tag_count": 1.0},
    "recipe_code": {
        f"{PARTIAL}code_reward, num_parallel=2, provider_type='e2b', enforce_same_language=False)": 1.0,
        "open_r1_format": 0.1,
    },
    "recipe_ioi": {
        f"{PARTIAL}ioi_code_reward, test_batch_size=3, provider_type='piston')": 1.0,
        "infgrpo.rewards.open_r1:CodeFormat(language='cpp')": 0.1,
        "open_r1_format": 0.1,
    },
    "recipe_codeforces": {
        f"{PARTIAL}cf_code_reward, test_batch_size=-1, scoring_mode='weighted_sum')": 1.0,
        "open_r1_code_format": 0.1,
    },
    "recipe_mixture": {
        "open_r1_accuracy": 1.0,
        "open_r1_length": 1.0,
        "open_r1_reasoning_steps": 1.0,
        "infgrpo.rewards.open_r1:CosineScaled(min_value_wrong=0.0, max_value_wrong=-0.5, min_value_correct=0.5, "
        "max_value_correct=1.0, max_len=800)": 1.0,
        "infgrpo.rewards.open_r1:RepetitionPenalty(ngram_size=4, max_penalty=-1.0)": 1.0,
    },
}
SIGNATURES = """
def code_reward(completions, num_parallel: int = 2, provider_type: str = "e2b", enforce_same_language=False, **kw): ...
def binary_code_reward(completions, num_parallel=2, provider_type="e2b", enforce_same_language=False, **kw): ...
def ioi_code_reward(completions, test_batch_size: int = 1, provider_type: str = "piston", **kwargs): ...
def cf_code_reward(completions, test_batch_size=1, patch_code=False, scoring_mode="weighted_sum", **kwargs): ...
"""
"""The signatures of the recipe's sandboxed rewards (its package is not on PyPI): what binding is checked against."""


@pytest.fixture
def recipe_package(tmp_path, monkeypatch):
    """An ``open_r1.rewards`` with the recipe's signatures on ``sys.path``, as where the recipe's package is
    installed."""
    (tmp_path / "open_r1").mkdir()
    (tmp_path / "open_r1" / "__init__.py").write_text("")
    (tmp_path / "open_r1" / "rewards.py").write_text(SIGNATURES)
    monkeypatch.syspath_prepend(str(tmp_path))
    yield
    for name in ("open_r1", "open_r1.rewards"):
        sys.modules.pop(name, None)


def test_every_registry_name_is_known():
    names = {
        "accuracy", "format", "reasoning_steps", "cosine", "repetition_penalty", "length", "code", "binary_code",
        "ioi_code", "cf_code", "code_format", "tag_count", "soft_overlong_punishment",
    }  # fmt: skip  # open-r1's get_reward_funcs
    assert set(RECIPE_REWARDS) == names
    for name in names:
        assert convert({"reward_funcs": [name]}).config["model"]["rewards"]["functions"]


@pytest.mark.usefixtures("recipe_package")
@pytest.mark.parametrize("path", sorted(RECIPES.glob("*.yaml")), ids=lambda p: p.stem)
def test_a_recipe_converts_and_its_rewards_build(path):
    given = read_trl_file(path)
    result = convert(given)
    model = result.config["model"]
    assert model["rewards"]["functions"] == WANT[path.stem]
    assert all(RENAMED.get(k, k) in KNOWN for k in given)  # nothing left out as unknown
    assert result.config["data"]["as_conversation"] is True  # the recipe's prompts are conversations
    check_settings(**model)  # every reward resolves; the partials bind to the recipe's signatures
    needs = [n for n in result.notes if "runs code in a sandbox service" in n]
    assert len(needs) == sum(PARTIAL in name for name in WANT[path.stem])
    for note in needs:
        assert "the recipe's package importable where python -m infgrpo.fit runs" in note


def test_the_notes_say_what_each_service_needs_and_what_goes_unused():
    notes = " ".join(convert(read_trl_file(RECIPES / "recipe_codeforces.yaml")).notes)
    assert "Piston workers listed in PISTON_ENDPOINTS" in notes and "open-r1/codeforces' verifiable-prompts" in notes
    assert "e2b_router_url='http://localhost:8000' not mapped: the recipe's registry does not bind it" in notes
    code = " ".join(convert({"reward_funcs": ["binary_code"], "code_provider": "morph"}).notes)
    assert "provider_type='morph'" in code and "the morphcloud package and MORPH_API_KEY" in code
    assert "verification_info column" in code
    unused = convert({"reward_funcs": ["accuracy"], "code_language": "cpp", "cosine_max_len": 10}).notes
    assert "code_language='cpp' not used: an argument of the recipe's code_format reward" in " ".join(unused)
    assert "cosine_max_len=10 not used: an argument of the recipe's cosine reward" in " ".join(unused)
    length = next(n for n in convert({"reward_funcs": ["length"]}).notes if n.startswith("reward_funcs 'length'"))
    assert "one scoring call" in length and "under dynamic sampling or adaptive groups, the group's own" in length


@pytest.mark.usefixtures("recipe_package")
def test_fit_prints_the_config_of_each_converted_recipe(tmp_path):
    for path in sorted(RECIPES.glob("*.yaml")):
        out = tmp_path / f"{path.stem}.yaml"
        out.write_text(convert(read_trl_file(path)).yaml(path.name))
        printed = io.StringIO()
        with contextlib.redirect_stdout(printed), pytest.raises(SystemExit) as done:
            fit(["--config", str(out), "--print_config"])
        assert done.value.code in (0, None), path.stem
        config = yaml.safe_load(printed.getvalue())
        assert config["model"]["rewards"]["functions"] == WANT[path.stem], path.stem
        if path.stem == "recipe_mixture":
            assert config["data"]["mixture"]["seed"] == 42 and config["data"]["mixture"]["datasets"][0] == {
                "path": "open-r1/OpenR1-Math-220k", "name": "default", "data_dir": None, "data_files": None,
                "split": "train", "columns": ["problem", "solution"], "fraction": None, "weight": 0.25,
            }  # fmt: skip
