"""The chat template's side of a tool exchange equals TRL 1.16's: prompt ids, tool-result ids, parsed turns."""

import pytest
from trl.chat_template_utils import parse_response

from infgrpo.agent import chat
from infgrpo.agent.config import AgentConfig
from infgrpo.agent.formats import FORMATS
from infgrpo.agent.tools import bound_methods, tool_schema
from infgrpo.policy.load import load_tokenizer
from infgrpo.settings import ConfigError
from tests.agent import toolbox
from tests.agent.conftest import COMPACT
from tests.agent.trl_reference import trl_env_prompt_ids, trl_prompt_ids, trl_suffix_ids

PROMPTS = [
    [{"role": "user", "content": "12345+67890?"}],
    [{"role": "system", "content": "Use tools."}, {"role": "user", "content": "3*4?"}],
]
CALL = '<tool_call>\n{"name": "add", "arguments": {"a": 12, "b": 30}}\n</tool_call>'


def schemas(tools):
    """The tools' schemas, as infgrpo renders and parses with them."""
    return [tool_schema(t, t.__name__) for t in tools]


def encode(tok, text):
    """Ids of a model turn's text, ending with the EOS the model samples (a special id, as generated)."""
    return tok(text, add_special_tokens=False)["input_ids"] + [tok.eos_token_id]


def test_prompts_rendered_with_tools_are_trls_ids(tokenizer):
    tok, template = tokenizer
    tools = [toolbox.add, toolbox.mul]
    ours = [chat.render_prompt(tok, p, schemas(tools), template) for p in PROMPTS]
    assert ours == trl_prompt_ids(tok, template, PROMPTS, tools)
    assert "add" in tok.decode(ours[0]) and "mul" in tok.decode(ours[0])  # the schemas were rendered
    assert chat.render_prompt(tok, PROMPTS[0], [], template) == trl_prompt_ids(tok, template, PROMPTS[:1], [])[0]
    env = toolbox.Counter()
    per_prompt = [[toolbox.add, *bound_methods(env)], [toolbox.mul]]
    ours = [chat.render_prompt(tok, p, schemas(t), template) for p, t in zip(PROMPTS, per_prompt, strict=True)]
    assert ours == trl_env_prompt_ids(tok, template, PROMPTS, per_prompt)


def test_tool_suffix_ids_are_trls(tokenizer):
    tok, template = tokenizer
    one = [{"role": "tool", "name": "add", "content": "80235"}]
    two = [*one, {"role": "tool", "name": "mul", "content": str({"error": "Tool mul not found."})}]
    for messages in (one, two):
        ours = chat.tool_suffix_ids(tok, messages, template)
        assert ours == trl_suffix_ids(tok, template, messages)
    text = tok.decode(chat.tool_suffix_ids(tok, two, template))
    assert text == (
        "\n<|im_start|>user\n<tool_response>\n80235\n</tool_response>\n<tool_response>\n"
        "{'error': 'Tool mul not found.'}\n</tool_response><|im_end|>\n<|im_start|>assistant\n"
    )


def test_smollm2_suffix_is_the_recorded_one(smollm2):
    tok, template = smollm2
    ids = chat.tool_suffix_ids(tok, [{"role": "tool", "name": "add", "content": "5"}], template)
    recorded = [198, 1, 4093, 198, 44, 19324, 79, 7639, 46, 198, 37, 198, 9617, 19324, 79, 7639, 46, 2, 198, 1, 520]
    assert ids == [*recorded, 9531, 198]  # docs/design/agents-trl-1.16.md §7, rendered there with TRL


@pytest.mark.parametrize(
    "text",
    [
        CALL,  # a well-formed call
        CALL + "\n" + CALL.replace("add", "mul").replace("12", "7"),  # two calls
        'Let me add.\n<tool_call>\n{"name": "add", "arguments": {"a": "12", "b": "3"}}\n</tool_call>',  # cast
        '<tool_call>\n{"name": "add", "arguments": {"a": 12,\n</tool_call>',  # malformed JSON
        "The answer is 42.",  # a plain answer
        '<tool_call>\n{"name": "add"}\n</tool_call>',  # no arguments
        "",  # nothing but the EOS
    ],
)
def test_parse_turn_is_trls_parse_response(tokenizer, text):
    tok, template = tokenizer
    tools = [toolbox.add, toolbox.mul]
    prefix = chat.render_prompt(tok, PROMPTS[0], schemas(tools), template)
    ids = encode(tok, text)
    ours = chat.parse_turn(tok, ids, prefix, schemas(tools))
    assert ours == parse_response(tok, ids, prefix=prefix, tools=tools)
    assert ours["role"] == "assistant" and isinstance(ours["content"], str)


def test_parsed_calls_are_typed_by_the_schema(tiny):
    tok, template = tiny
    prefix = chat.render_prompt(tok, PROMPTS[0], schemas([toolbox.add]), template)
    text = 'Let me add.\n<tool_call>\n{"name": "add", "arguments": {"a": "12", "b": 3}}\n</tool_call>'
    message = chat.parse_turn(tok, encode(tok, text), prefix, schemas([toolbox.add]))
    assert message["content"] == "Let me add."
    assert message["tool_calls"] == [{"type": "function", "function": {"name": "add", "arguments": {"a": 12, "b": 3}}}]
    broken = chat.parse_turn(tok, encode(tok, '<tool_call>\n{"name": "add", "a'), prefix, [])
    assert broken == {"role": "assistant", "content": '<tool_call>\n{"name": "add", "a'}  # decoded, no calls


def test_the_template_check_takes_tool_templates_and_names_the_others(tokenizer):
    tok, template = tokenizer
    chat.check_tool_template(
        tok, template, "compact" if template else None
    )  # renders a whole exchange, keeps the prefix
    plain = load_tokenizer("tiny")  # its own template is ChatML without tools: tool_calls dropped
    own = r"^agent\.chat_template=None: the tokenizer's own chat template drops the tool call's or result's name, "
    with pytest.raises(ConfigError, match=own + r"argument, value; pass agent.chat_template: compact") as err:
        chat.check_tool_template(plain, None)
    assert "\n" not in str(err.value)
    last = "{{ '<|im_end|>\\n' }}{%- endif %}{%- endfor %}"
    assert last in COMPACT
    marks_the_end = COMPACT.replace(
        last, "{{ '<|im_end|>\\n' if not loop.last else '<|im_end|>.' }}{%- endif %}{%- endfor %}"
    )
    with pytest.raises(ConfigError, match=r"^agent\.chat_template='x.jinja': the chat template 'x.jinja' renders .*"
                       r"\(not prefix-preserving\)"):  # fmt: skip
        chat.check_tool_template(plain, marks_the_end, "x.jinja")
    with pytest.raises(ConfigError, match=r"fails on a tool exchange"):
        chat.check_tool_template(plain, "{{ raise_exception('no tools here') }}", "y.jinja")
    plain.chat_template = None
    with pytest.raises(ConfigError, match=r"^agent\.chat_template=None: .* does not exist"):
        chat.check_tool_template(plain, None)


def test_response_parser_is_set_for_qwen_calls_and_kept_when_preset():
    tok = load_tokenizer("tiny")
    assert getattr(tok, "response_template", None) is None
    chat.ensure_response_parser(tok, COMPACT, "compact")
    qwen = FORMATS["qwen"].response_template
    assert tok.response_template == qwen and tok.response_template is not qwen
    from trl.chat_template_utils import add_response_schema, qwen2_5_chat_template

    trl_tok = load_tokenizer("tiny")
    trl_tok.chat_template = qwen2_5_chat_template
    assert add_response_schema(trl_tok).response_template == qwen  # what TRL sets for Qwen's
    assert load_tokenizer("tiny-tools").response_template == qwen  # the shipped tool model's: the same one
    preset = {"defaults": {"role": "assistant"}, "fields": {}}
    tok.response_template = preset
    chat.ensure_response_parser(tok, COMPACT, "compact")
    assert tok.response_template is preset
    other = load_tokenizer("tiny")
    bracketed = COMPACT.replace("'<tool_call>\\n", "'[CALL]").replace("'\\n</tool_call>'", "'[/CALL]'")
    with pytest.raises(ConfigError, match=r"^agent\.chat_template='l.jinja': .* writes tool calls in a form infgrpo "
                       "does not recognise .*; name the form the model writes with agent.call_format"):  # fmt: skip
        chat.ensure_response_parser(other, bracketed, "l.jinja")


def test_load_template_reads_the_compact_one_or_a_file(tmp_path):
    assert chat.load_template(AgentConfig()) is None
    assert chat.load_template(AgentConfig(chat_template="compact")) == COMPACT
    path = tmp_path / "t.jinja"
    path.write_text("{{ messages }}")
    assert chat.load_template(AgentConfig(chat_template=str(path))) == "{{ messages }}"


def test_the_template_check_agrees_with_trls_two_checks():
    from pathlib import Path

    import trl
    from trl.chat_template_utils import is_chat_template_prefix_preserving, supports_tool_calling

    stock = Path(trl.__file__).parent / "chat_templates"
    tok = load_tokenizer("tiny")
    own = tok.chat_template
    verdicts = {}
    for name, template in {
        "own": own, "compact": COMPACT, "qwen3": (stock / "qwen3.jinja").read_text(),
        "qwen3_training": (stock / "qwen3_training.jinja").read_text(), "llama3": (stock / "llama3.jinja").read_text(),
    }.items():  # fmt: skip
        tok.chat_template = template
        trl_says = supports_tool_calling(tok) and is_chat_template_prefix_preserving(tok)
        try:
            chat.check_tool_template(tok, None)
            verdicts[name] = True
        except ConfigError:
            verdicts[name] = False
        assert verdicts[name] == trl_says, name
    assert verdicts["compact"] and verdicts["qwen3_training"] and not verdicts["own"] and not verdicts["qwen3"]
