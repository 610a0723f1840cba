"""Environments: TRL 1.16's rules for instances, reset, observations, tool methods and get_reward."""

import asyncio
import inspect
import random

import pytest

from infgrpo.agent.config import AgentConfig
from infgrpo.agent.environments import AgentError, Environments, environment_reward
from infgrpo.agent.tools import environment_tools
from tests.agent import toolbox

T = "tests.agent.toolbox"
ROWS = [
    {"prompt": [{"role": "user", "content": "Count up"}], "start": 3},
    {"prompt": [{"role": "system", "content": "s"}, {"role": "user", "content": "Count"}], "start": 5},
]


def test_tool_methods_are_trls_a_to_z_without_reset_reward_and_private():
    assert environment_tools(toolbox.Counter) == ["peek", "step"]
    assert environment_tools(toolbox.Quiet) == ["peek", "step"]  # inherited


def test_one_instance_per_sample_reset_with_its_row_and_the_observation_appended():
    envs = Environments.from_config(AgentConfig(tools=[f"{T}:add"], environment=f"{T}:Counter"))
    probe = envs._pool[None][0]
    envs.start(ROWS)
    assert envs.prompt(0) == [{"role": "user", "content": "Count up (start at 3)"}]  # no separator
    assert envs.prompt(1)[0] == ROWS[1]["prompt"][0] and envs.prompt(1)[1]["content"] == "Count (start at 5)"
    assert ROWS[0]["prompt"][0]["content"] == "Count up"  # the row is left as it was
    a, b = envs.instance(0, 0), envs.instance(0, 1)
    assert a is probe and a is not b and envs.instance(0, 1) is b  # the probe is handed out first, TRL's pool
    assert (a.count, b.count, a.resets, b.resets) == (3, 3, 1, 1)
    names = [s["function"]["name"] for s in envs.schemas(0)]
    assert names == ["add", "peek", "step"]  # standalone tools first, then the methods A-Z
    box = envs.box(0, 1)
    assert sorted(box.sync) == ["add", "peek", "step"] and box.sync["step"].__self__ is b
    assert box.schemas is envs.schemas(0)
    assert envs.instances([(0, 1), (1, 0), (0, 0)]) == [b, envs.instance(1, 0), a]
    made = list(envs._pool[None])
    assert made == [a, envs.instance(1, 0), b]  # handed out in the order first needed: prompt(1) came before (0, 1)
    envs.start(ROWS[:1])  # the next rollout reuses the pool, in order, reset again
    assert [envs.instance(0, 0), envs.instance(0, 1)] == made[:2] and a.resets == 2 and envs._pool[None] == made


def test_a_mapping_picks_per_row_and_drops_the_environment_column():
    envs = Environments.from_config(AgentConfig(environment={"count": f"{T}:Counter", "plain": f"{T}:Plain"}))
    rows = [{**ROWS[0], "environment": "count"}, {"prompt": ROWS[0]["prompt"], "environment": "plain"}]
    envs.start(rows)
    assert isinstance(envs.instance(0, 0), toolbox.Counter) and isinstance(envs.instance(1, 0), toolbox.Plain)
    assert [s["function"]["name"] for s in envs.schemas(1)] == ["wait"]
    assert list(envs.box(1, 0).asynchronous) == ["wait"]
    assert envs.prompt(1) == ROWS[0]["prompt"]  # None: unchanged
    with pytest.raises(ValueError, match=r"^row 1 has environment='chess', which is none of agent\.environment's "):
        envs.start([rows[0], {"environment": "chess"}])


def test_a_row_without_prompt_gets_trls_empty_user_message():
    envs = Environments({None: toolbox.Counter})
    envs.start([{"start": 1}])
    assert envs.prompt(0) == [{"role": "user", "content": " (start at 1)"}]
    assert envs.instance(0, 0).count == 1


def test_samples_of_a_row_may_get_their_own_observations_but_not_where_they_share_one_prompt():
    envs = Environments({None: toolbox.Moody})
    envs.start([{"prompt": "p"}], group_size=2)  # TRL's rule: each sample its own observation
    first, second = envs.observations(0)
    assert first != second and envs.prompt(0, 1) == "p" + second  # a string prompt: the observation appended
    one_prompt = r"sample 0; dynamic sampling and adaptive groups decode a row's samples from one prompt"
    with pytest.raises(
        ValueError, match=r"^row 0: Moody\.reset\(\*\*row\) returned '\d+' for sample 2 but '\d+' for " + one_prompt
    ):
        envs.instance(0, 2)  # an adaptive group's extra sample decodes its row's one prompt
    with pytest.raises(ValueError, match=r"^row 1: Moody\.reset\(\*\*row\) returned .* for sample 1") as err:
        envs.add({"prompt": "q"}, group_size=2)  # a row drawn by dynamic sampling
    assert "\n" not in str(err.value)


def test_get_reward_is_one_reward_per_class_for_its_exact_type():
    envs = Environments(
        {"count": toolbox.Counter, "again": toolbox.Counter, "quiet": toolbox.Quiet, "p": toolbox.Plain}
    )
    sources = envs.reward_sources()
    assert [s.__name__ for s in sources] == ["Counter", "Quiet"]  # once per class; Plain has none
    envs.start([{**ROWS[0], "environment": "count"}, {"environment": "quiet"}, {"environment": "p"}])
    envs.instance(0, 0).step(4)
    rewards = sources[0](environments=envs.instances([(0, 0), (1, 0), (2, 0)]), completions=[])
    assert rewards == [7.0, None, None]  # a Quiet (a subclass) is not a Counter: exact type, as in TRL
    assert sources[1](envs.instances([(0, 0), (1, 0)])) == [None, 0.0]


def test_an_async_get_reward_gives_an_async_reward():
    class Judge(toolbox.Plain):
        async def get_reward(self) -> float:
            return 1.5

    reward = environment_reward(Judge)
    assert inspect.iscoroutinefunction(reward) and reward.__name__ == "Judge"
    assert asyncio.run(reward([Judge(), toolbox.Plain()])) == [1.5, None]


def test_a_rollout_deals_every_instance_then_resets_each_in_trls_batch_order():
    """TRL 1.16 (_generate_and_score_completions): the batch's rows repeated G times, an instance handed out to each
    in that order (the pool grows when short), then each reset in the same order."""
    toolbox.Ledger.log, toolbox.Ledger.made = [], 0
    envs = Environments({None: toolbox.Ledger})  # the probe is instance 1
    envs.start([{"n": 10}, {"n": 20}], group_size=3)
    made = [("made", k) for k in range(1, 7)]
    resets = [("reset", 1 + 3 * i + j, n) for i, n in enumerate((10, 20)) for j in range(3)]
    assert toolbox.Ledger.log == made + resets
    toolbox.Ledger.log = []
    envs.add({"n": 30}, group_size=2)  # a row drawn later (dynamic sampling): its instances dealt, then reset
    assert toolbox.Ledger.log == [("made", 7), ("made", 8), ("reset", 7, 30), ("reset", 8, 30)]
    toolbox.Ledger.log = []
    envs.instance(0, 3)  # an adaptive group's extra sample: when it first needs one
    assert toolbox.Ledger.log == [("made", 9), ("reset", 9, 10)]
    envs.start([{"n": 1}], group_size=2)  # the next rollout reuses the pool in order
    assert toolbox.Ledger.log[-2:] == [("reset", 1, 1), ("reset", 2, 1)]


def test_a_reset_that_raises_is_one_line_naming_the_environment_and_the_row():
    envs = Environments({"led": toolbox.Ledger, "count": toolbox.Counter})
    with pytest.raises(AgentError) as err:
        envs.start([{"environment": "count"}, {"environment": "led", "n": -1, "x": 0}], group_size=2)
    assert str(err.value).startswith(
        "environment 'led' (Ledger): reset(**row) raised KeyError: 'n must be >= 0' for row 1 of the rollout "
        "(columns: environment, n, x)"
    )
    assert "\n" not in str(err.value)
    with pytest.raises(ValueError, match=r"^row 0: Moody\.reset\(\*\*row\) returned a int; it must return None"):
        Environments({None: toolbox.Moody}).start([{"prompt": "p", "number": True}], group_size=2)  # before generating


def test_a_retry_resets_every_instance_again_in_the_order_dealt_or_names_the_sample_that_changed():
    toolbox.Ledger.log, toolbox.Ledger.made = [], 0
    envs = Environments({None: toolbox.Ledger})
    envs.start([{"n": 10}, {"n": 20}], group_size=2)
    toolbox.Ledger.log = []
    envs.replay()  # an out-of-memory retry: the same resets, in the same order
    assert toolbox.Ledger.log == [("reset", 1, 10), ("reset", 2, 10), ("reset", 3, 20), ("reset", 4, 20)]
    toolbox.Dealt.rng = random.Random(0)
    dealt = Environments({None: toolbox.Dealt})
    dealt.start([{}], group_size=4)  # a shared stream: a second reset deals other sums
    with pytest.raises(AgentError, match=r"^row 0: an out-of-memory retry of the rollout reset sample \d"):
        dealt.replay()
