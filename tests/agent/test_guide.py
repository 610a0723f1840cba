"""The agents guide's first example runs as written: Qwen3-0.6B with tools and no template setting, offline, with a
stand-in that carries Qwen3's stock chat template, is accepted and renders and parses as TRL 1.16 does."""

import re
import shutil
from pathlib import Path

from datasets import Dataset
from transformers import AutoTokenizer
from trl.chat_template_utils import parse_response

from infgrpo.agent import chat
from infgrpo.agent.formats import FORMATS
from infgrpo.agent.shipped import shipped_template
from infgrpo.assets import TINY_TOOLS_MODEL_DIR
from infgrpo.assets.calculator import add, make_split
from infgrpo.training.agent_rollout import prompt_format
from tests.agent.families import stock_template
from tests.agent.trl_reference import trl_prompt_ids, trl_suffix_ids, trl_tool_setup

GUIDE = Path(__file__).resolve().parents[2] / "docs" / "guides" / "agents.md"


def guide_example() -> str:
    """The guide's infgrpo code block, the one after 'infgrpo (the tools by import path ...):'."""
    text = GUIDE.read_text()
    after = text[text.index("infgrpo (the tools by import path") :]
    return re.search(r"```python\n(.*?)```", after, re.S).group(1)


def qwen3_stand_in(folder: Path) -> str:
    """A Qwen3-0.6B stand-in: the tiny tool model, its tokenizer given Qwen3's stock template and, as Qwen3's has,
    no response template."""
    for name in ("config.json", "generation_config.json", "model.safetensors"):
        shutil.copy(TINY_TOOLS_MODEL_DIR / name, folder / name)
    tok = AutoTokenizer.from_pretrained(TINY_TOOLS_MODEL_DIR)
    tok.chat_template, tok.response_template = stock_template("qwen3"), None
    tok.save_pretrained(folder)
    return str(folder)


def test_the_guides_first_example_runs_offline_and_renders_and_parses_as_trl(tmp_path):
    code = guide_example()
    assert '"Qwen/Qwen3-0.6B"' in code and "chat_template=" not in code.replace("chat_template_kwargs=", "")
    model = qwen3_stand_in(tmp_path)
    code = code.replace('"Qwen/Qwen3-0.6B"', repr(model)).replace("my_tools:add", "infgrpo.assets.calculator:add")
    code = code.replace("my_rewards:correct", "infgrpo.assets.calculator:correct")
    fit = "L.Trainer(max_steps=500).fit(module, data)"
    assert fit in code
    rows = make_split(4, seed=3)
    scope = {"dataset": Dataset.from_list(rows)}
    exec(code.replace(fit, ""), scope)  # the example as written, up to the training itself
    module, data = scope["module"], scope["data"]

    agent, tok = module.agent, module.tokenizer
    assert agent.template == shipped_template("qwen3")  # Qwen3's template swapped, as TRL swaps it
    assert tok.response_template == FORMATS["qwen"].response_template
    theirs = AutoTokenizer.from_pretrained(model)
    trl_template = trl_tool_setup(theirs)
    kwargs = {"enable_thinking": False}
    items = [{"prompt": row["prompt"], "meta": row} for row in rows]
    prompts = agent.prompt_ids(items, prompt_format(data))
    assert prompts == [
        list(p) for p in trl_prompt_ids(theirs, trl_template, [r["prompt"] for r in rows], [add], kwargs)
    ]
    assert tok.decode(prompts[0]).endswith("<|im_start|>assistant\n<think>\n\n</think>\n\n")
    results = [{"role": "tool", "name": "add", "content": "80235"}]
    suffix = chat.tool_suffix_ids(tok, results, agent.template, agent.format.chat_template_kwargs)
    assert suffix == trl_suffix_ids(theirs, trl_template, results, kwargs)
    turn = tok('<tool_call>\n{"name": "add", "arguments": {"a": "12", "b": 3}}\n</tool_call><|im_end|>')["input_ids"]
    message = chat.parse_turn(tok, turn, prompts[0], agent.box.schemas)
    assert message == parse_response(theirs, turn, prefix=prompts[0], tools=[add])
    assert message["tool_calls"][0]["function"] == {"name": "add", "arguments": {"a": 12, "b": 3}}
    agent.close()
