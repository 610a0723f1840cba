"""Every stock template TRL 1.16 trains with tools, with no setting, gives TRL's prompt ids, tool-suffix ids and parsed
turns (content, reasoning, tool calls with typed arguments); edited copies give what their stock template gives."""

import copy
import os
from pathlib import Path

import pytest
from trl.chat_template_utils import add_response_schema, parse_response, supports_tool_calling

from infgrpo.agent import chat
from infgrpo.agent.config import AgentConfig
from infgrpo.agent.formats import CALL_FORMATS, FORMATS, recognise
from infgrpo.agent.shipped import shipped_template
from infgrpo.agent.tools import tool_schema
from infgrpo.settings import ConfigError, InfgrpoWarning
from tests.agent import toolbox
from tests.agent.families import FAMILIES, STOCK, base_tokenizer, family_tokenizer, stock_template, stop_ids
from tests.agent.trl_reference import trl_prompt_ids, trl_suffix_ids, trl_tool_setup

TOOLS = [toolbox.add, toolbox.mul]
SCHEMAS = [tool_schema(t, t.__name__) for t in TOOLS]
PROMPTS = [
    [{"role": "user", "content": "12345+67890?"}],
    [{"role": "system", "content": "Use tools."}, {"role": "user", "content": "3*4?"}],
]
RESULTS = [
    [{"role": "tool", "name": "add", "content": "80235"}],
    [{"role": "tool", "name": "add", "content": "80235"}, {"role": "tool", "name": "mul", "content": "12"}],
]


def call(name, **arguments):
    return {"type": "function", "function": {"name": name, "arguments": arguments}}


TURNS = [
    {"role": "assistant", "content": "The answer is 42."},
    {"role": "assistant", "content": "", "tool_calls": [call("add", a=12, b=30)]},
    {"role": "assistant", "content": "Let me add.", "tool_calls": [call("add", a=12, b=30)]},
    {"role": "assistant", "content": "", "tool_calls": [call("add", a=1, b=2), call("mul", a=3, b=4)]},
    {"role": "assistant", "content": "42", "reasoning_content": "I add them."},
    {"role": "assistant", "content": "", "reasoning_content": "Adding.", "tool_calls": [call("add", a=5, b=6)]},
]
"""Assistant turns, as each template writes them: what a model taught the template generates."""


def model_turns(family, tok, template, prompt_text):
    """Ids of each of TURNS as family's template writes it after ``prompt_text`` (from where the two part: a template
    that prefills an empty think block writes a thought inside it), cut after the first id generation stops on,
    plus a call cut off in the middle; a turn the template refuses (Llama 3.x's two calls) is left out."""
    stops = set(stop_ids(family, tok))
    texts = []
    for turn in TURNS:
        try:
            full = tok.apply_chat_template(PROMPTS[0] + [turn], chat_template=template, tools=SCHEMAS, tokenize=False)
        except Exception:  # noqa: BLE001 - a template may refuse a turn shape (jinja's raise_exception)
            continue
        texts.append(full[len(os.path.commonprefix([full, prompt_text])) :])
    texts.append(texts[1][: len(texts[1]) // 2] + tok.eos_token)  # a call cut off in the middle
    out = []
    for text in texts:
        ids = tok(text, add_special_tokens=False)["input_ids"]
        cut = next((k for k, i in enumerate(ids) if i in stops), None)
        out.append(ids if cut is None else ids[: cut + 1])
    return out


@pytest.mark.parametrize(("family", "stem"), STOCK, ids=[stem for _, stem in STOCK])
def test_a_stock_template_with_no_setting_gives_trls_ids_and_messages(family, stem):
    text = stock_template(stem)
    ours, theirs = family_tokenizer(family, text), family_tokenizer(family, text)
    trl_template = trl_tool_setup(theirs)  # TRL's own set-up: its parser, its training template where it swaps
    template = chat.prepare_template(ours, AgentConfig())
    assert (template is None) == (trl_template is None) == (stem != "qwen3")  # only Qwen3's is swapped
    assert ours.response_template == FORMATS[FAMILIES[family].call_format].response_template

    prompts = [chat.render_prompt(ours, p, SCHEMAS, template) for p in PROMPTS]
    assert prompts == [list(ids) for ids in trl_prompt_ids(theirs, trl_template, PROMPTS, TOOLS)]
    for results in RESULTS:
        assert chat.tool_suffix_ids(ours, results, template) == trl_suffix_ids(theirs, trl_template, results)

    prompt_text = ours.decode(prompts[0])
    turns = model_turns(family, ours, template, prompt_text)
    parsed = [chat.parse_turn(ours, ids, prompts[0], SCHEMAS) for ids in turns]
    assert parsed == [parse_response(theirs, ids, prefix=prompts[0], tools=TOOLS) for ids in turns]
    calls = [m["tool_calls"] for m in parsed if m.get("tool_calls")]
    assert calls and calls[0] == [call("add", a=12, b=30)]  # typed by the schema: ints, not strings
    if "I add them." in ours.decode(turns[-3]) and not prompt_text.endswith("</think>\n\n"):  # a thought is read
        assert any((m.get("reasoning_content") or m.get("thinking")) == "I add them." for m in parsed)


def test_every_template_trl_ships_is_trained_with_tools_by_infgrpo_where_trl_trains_it_and_one_more():
    import trl

    families = {stem: family for family, stem in STOCK}
    trained, beyond = [], {}
    for path in sorted((Path(trl.__file__).parent / "chat_templates").glob("*.jinja")):
        stem = path.stem
        if stem.endswith("_training"):
            continue
        ours, theirs = (tokenizer_for(families.get(stem), path.read_text()) for _ in range(2))
        try:
            trl_template = trl_tool_setup(theirs)
        except ValueError:
            trl_template = "refused"
        try:
            template = chat.prepare_template(ours, AgentConfig())
        except ConfigError as err:
            assert trl_template == "refused", f"{stem}: {err}"
            assert "\n" not in str(err) and "agent.chat_template" in str(err)
            continue
        if trl_template == "refused":
            beyond[stem] = recognise(ours, template).name
            continue
        trained.append(stem)
        assert (template is None) == (trl_template is None), stem
    assert sorted(trained) == sorted(families)  # a family a TRL upgrade adds fails here until the table has it
    assert beyond == {"diffusion_gemma": "gemma4"}  # renders Gemma 4's calls; TRL has no parser for its text


def tokenizer_for(family, template):
    """The family's tokenizer with ``template``; SmolLM2's own for a template of no family in the table."""
    if family is not None:
        return family_tokenizer(family, template)
    tok = copy.copy(base_tokenizer())
    tok.response_template, tok.chat_template = None, template
    return tok


EDITS = {
    # a copy whose Jinja was reformatted and commented: renders exactly as the stock one
    "qwen3": ("{%- if tools %}", "{#- re-uploaded -#}\n{%- if tools -%}\n    "),
    # Qwen3.8 with another default system prompt: prefix-preserving, renders differently, writes the same calls
    "qwen3_8": ("Reasoning effort is set to xhigh.", "Reasoning effort is set to low."),
    # Llama 3.1 with another knowledge-cutoff line
    "llama3_1": ("Cutting Knowledge Date: December 2023", "Cutting Knowledge Date: June 2025"),
    # gpt-oss with another identity
    "gptoss": ("You are ChatGPT, a large language model trained by OpenAI.", "You are a careful assistant."),
}


@pytest.mark.parametrize("stem", list(EDITS))
def test_an_edited_copy_trl_refuses_gives_what_its_stock_template_gives(stem):
    family = next(f for f, s in STOCK if s == stem)
    old, new = EDITS[stem]
    stock = stock_template(stem)
    assert old in stock
    edited = stock.replace(old, new, 1)
    theirs = family_tokenizer(family, edited)
    assert supports_tool_calling(theirs)
    with pytest.raises(ValueError, match="Unrecognized chat template"):
        add_response_schema(theirs)  # TRL matches the stock text only
    reference = family_tokenizer(family, stock)
    trl_template = trl_tool_setup(reference)  # what TRL gives for the stock one
    ours = family_tokenizer(family, edited)
    template = chat.prepare_template(ours, AgentConfig())
    assert ours.response_template == FORMATS[FAMILIES[family].call_format].response_template  # parsed as its family
    prompt = chat.render_prompt(ours, PROMPTS[1], SCHEMAS, template)
    same_text = stem == "qwen3"
    if same_text:  # renders as the stock one: the stock one's ids, Qwen3's swap included
        assert template == shipped_template("qwen3")
        assert prompt == list(trl_prompt_ids(reference, trl_template, PROMPTS[1:], TOOLS)[0])
    else:
        assert template is None and new in ours.decode(prompt)
    for results in RESULTS:
        suffix = trl_suffix_ids(reference, trl_template, results)
        assert chat.tool_suffix_ids(ours, results, template) == suffix
    for ids in model_turns(family, ours, template, ours.decode(prompt)):
        assert chat.parse_turn(ours, ids, prompt, SCHEMAS) == parse_response(reference, ids, prefix=prompt, tools=TOOLS)


def test_the_call_format_setting_names_the_parser_and_a_preset_one_wins():
    family = "qwen"
    template = shipped_template("compact").replace("<tool_call>", "<call>").replace("</tool_call>", "</call>")
    tok = family_tokenizer(family, template)
    with pytest.raises(ConfigError) as err:
        chat.prepare_template(tok, AgentConfig())
    message = str(err.value)
    assert message.startswith("agent.chat_template=None: the tokenizer's own chat template writes tool calls in a form")
    assert "agent.call_format" in message and "qwen, nemotron3, qwen3.5, llama3" in message and "\n" not in message
    assert chat.prepare_template(tok, AgentConfig(call_format="llama3")) is None  # the user names it
    assert tok.response_template == FORMATS["llama3"].response_template
    assert tok.response_template is not FORMATS["llama3"].response_template  # a copy: the table stays as it is

    preset = {"defaults": {"role": "assistant"}, "fields": {"content": {"content": "text"}}}
    tok = family_tokenizer(family, stock_template("qwen3"))
    tok.response_template = preset
    chat.prepare_template(tok, AgentConfig(call_format="gemma4"))
    assert tok.response_template is preset  # already on the tokenizer: kept, as TRL keeps it

    tok = family_tokenizer(family, stock_template("qwen3"))
    with pytest.warns(InfgrpoWarning, match=r"agent.call_format='gemma4', but .* writes tool calls in the 'qwen'"):
        chat.prepare_template(tok, AgentConfig(call_format="gemma4"))
    assert tok.response_template == FORMATS["gemma4"].response_template


def test_the_call_format_setting_is_checked_with_the_settings():
    with pytest.raises(ConfigError, match=r"^call_format='hermes' is no call format infgrpo reads; valid: null"):
        AgentConfig(tools=["tests.agent.toolbox:add"], call_format="hermes")
    assert AgentConfig.__doc__ and all(f"``{f.name}``" in _field_doc("call_format") for f in CALL_FORMATS)


def _field_doc(name):
    import ast
    import inspect

    from infgrpo.agent import config

    body = ast.parse(inspect.getsource(config)).body
    cls = next(n for n in body if isinstance(n, ast.ClassDef) and n.name == "AgentConfig")
    for k, node in enumerate(cls.body):
        if isinstance(node, ast.AnnAssign) and node.target.id == name:
            return cls.body[k + 1].value.value
    raise AssertionError(name)
