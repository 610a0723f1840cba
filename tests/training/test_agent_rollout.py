"""A run's multi-turn rollout (``model.agent``): settings refused before loading, prompts rendered with the tools, and
the rewards fed as TRL feeds them (exchanges, ``environments=``, ``get_reward``), on the real tiny model."""

import pytest
import torch

from infgrpo.agent import AgentConfig
from infgrpo.agent.chat import TEMPLATES
from infgrpo.policy.load import load_policy, load_tokenizer
from infgrpo.sampler import MicroGroupSampler, SamplerConfig
from infgrpo.scoring import Scorer
from infgrpo.settings import ConfigError
from infgrpo.training.agent_rollout import AgentRollout
from infgrpo.training.hparams import check_settings

TOOLS = ["tests.agent.toolbox:add"]


@pytest.mark.parametrize(
    "settings, expected",
    [
        ({"sampler": {"decoder": "hf_full"}}, "agent.tools or agent.environment needs sampler.decoder='engine'"),
    ],
)
def test_settings_that_cannot_carry_tools_are_refused(settings, expected):
    with pytest.raises(ConfigError) as err:
        check_settings(agent={"tools": TOOLS}, **settings)
    assert str(err.value).startswith(expected) and "\n" not in str(err.value)


def test_every_feed_takes_tools():
    for judged in ({"dynamic_sampling": {"enabled": True}}, {"adaptive_groups": {"enabled": True}}):
        assert check_settings(agent={"tools": TOOLS}, **judged).agent.enabled  # judged from the exchanges


def test_a_reward_that_needs_environments_needs_an_environment():
    rewards = {"functions": {"tests.training.agent_rewards:final_count": 1.0}, "accuracy": None}
    with pytest.raises(ConfigError, match=r"needs environments= .* set agent.environment"):
        check_settings(rewards=rewards, agent={"tools": TOOLS})
    settings = check_settings(rewards=rewards, agent={"environment": "tests.agent.toolbox:Counter"})
    assert settings.agent.enabled


def test_a_template_without_tools_is_refused_when_the_rollout_is_built():
    with pytest.raises(ConfigError, match="agent.chat_template=None: the tokenizer's own chat template drops"):
        AgentRollout(AgentConfig(tools=TOOLS), load_tokenizer("tiny"))


@pytest.fixture(scope="module")
def tiny_float64():
    return load_policy("tiny", dtype="float64").eval()


def test_environment_rollout_feeds_the_rewards_as_trl_does(tiny_float64):
    tok = load_tokenizer("tiny")
    agent = AgentRollout(AgentConfig(environment="tests.agent.toolbox:Counter", chat_template="compact"), tok, 2)
    items = [{"prompt": [{"role": "user", "content": "count"}], "meta": {"start": s, "answer": "x"}} for s in (3, 7)]
    prompts = agent.prompt_ids(items)
    # the prompt is the row's with the environment's observation appended, rendered with the Counter's methods
    expected = tok.apply_chat_template(
        [{"role": "user", "content": "count (start at 7)"}],
        tools=agent.envs.schemas(1),
        chat_template=(TEMPLATES / "compact.jinja").read_text(),
        add_generation_prompt=True,
        return_dict=False,
    )
    assert prompts[1] == list(expected) and "peek() step(by)" in tok.decode(prompts[1])
    sampler = MicroGroupSampler(tiny_float64, tok, SamplerConfig(num_slots=3, max_new_tokens=12))
    scorer = Scorer(tok, {"tests.training.agent_rewards:final_count": 1.0}, "raise", 12, sources=agent.sources)
    rollouts, _ = agent.decode(sampler, items, 2, seed=0)
    scores = scorer(rollouts, items)
    # get_reward is one more source named after the class (weight 1), and the reward read environments=
    assert set(scores.parts) == {"tests.training.agent_rewards:final_count", "Counter"}
    assert scores.parts["Counter"].tolist() == [3.0, 3.0, 7.0, 7.0]
    assert scores.parts["tests.training.agent_rewards:final_count"].tolist() == [3.0, 3.0, 7.0, 7.0]
    assert torch.equal(scores.total, torch.tensor([6.0, 6.0, 14.0, 14.0], dtype=scores.total.dtype))
    assert rollouts.tools is not None and rollouts.tools.samples == 4  # every rank has one (tools/* reduce it)
    assert [x.environment for x in rollouts.exchanges] == agent.envs.instances(rollouts.sample_keys)
    agent.close()


@pytest.mark.parametrize(
    "flags, expected",
    [
        (["--model.agent.tools", "[tests.agent.toolbox:add]"], "error: model.agent.chat_template=None: the tokenizer"),
        (["--model.agent.tools", "[tests.agent.toolbox:no_hints]"], "error: model.agent.tools"),
        (["--model.agent.environment", "tests.agent.toolbox:NOT_CALLABLE"], "error: model.agent.environment"),
        (["--model.agent.max_turns", "0"], "error: model.agent.max_turns=0 must be an integer >= 1"),
    ],
)
def test_the_command_line_refuses_bad_agent_settings_before_loading(flags, expected, capsys, monkeypatch, tmp_path):
    from tests.helpers import refuse_model_load
    from tests.test_fit import ROOT, cli_error

    refuse_model_load(monkeypatch, tmp_path)
    line = cli_error(capsys, "--config", str(ROOT / "configs" / "tiny.yaml"), *flags)
    assert line.startswith(expected), line
