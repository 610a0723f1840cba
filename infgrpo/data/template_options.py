"""``data.chat_template_kwargs`` checked against the variables the tokenizer's chat template reads.

    check_template_kwargs(tokenizer, {"enable_thinkin": False})
    # ConfigError: data.chat_template_kwargs: 'enable_thinkin' is not read by the tokenizer's chat template (did you
    # mean 'enable_thinking'?) ...

The options reach the template as Jinja variables (TRL's ``chat_template_kwargs``); a key the template never reads
does nothing, and neither TRL nor transformers says so. A key spelt close to one the template reads is a typo: refused
with the name it meant. Any other unread key (an option of another model's template) is a warning: it does nothing
with this tokenizer.
"""

from __future__ import annotations

import difflib
import inspect
import warnings
from collections.abc import Mapping
from typing import Any

from transformers import PreTrainedTokenizerBase

from infgrpo.settings import ConfigError, InfgrpoWarning

FIELD = "data.chat_template_kwargs"
_WARNED: set[tuple[int, str]] = set()


def template_variables(tokenizer: PreTrainedTokenizerBase) -> set[str] | None:
    """The variables the tokenizer's chat template (every one of a named set) reads; None without a template, or
    for one Jinja cannot parse (transformers then says why)."""
    import jinja2
    import jinja2.meta

    template = tokenizer.chat_template
    if not template:
        return None
    sources = list(template.values()) if isinstance(template, Mapping) else [template]
    env = jinja2.Environment(extensions=["jinja2.ext.loopcontrols"])
    try:
        return set().union(*(jinja2.meta.find_undeclared_variables(env.parse(s)) for s in sources))
    except jinja2.TemplateError:
        return None


def check_template_kwargs(tokenizer: PreTrainedTokenizerBase, kwargs: Mapping[str, Any] | None) -> None:
    """A ConfigError for a key of ``kwargs`` that the template does not read but reads one spelt close to it; an
    :class:`~infgrpo.settings.InfgrpoWarning` (once per tokenizer and key) for any other key it does not read."""
    names = template_variables(tokenizer) if kwargs else None
    if names is None:
        return
    own = set(inspect.signature(tokenizer.apply_chat_template).parameters)  # transformers' options, not the template's
    for key in kwargs:
        if key in names or key in own:
            continue
        options = ", ".join(sorted(n for n in names if n not in ("messages", "add_generation_prompt")))
        close = difflib.get_close_matches(key, names, n=1, cutoff=0.8)
        if close:
            raise ConfigError(
                f"{FIELD}: {key!r} is not read by the tokenizer's chat template (did you mean {close[0]!r}?); it "
                f"reads {options or 'no options'}"
            )
        if (id(tokenizer), key) not in _WARNED:
            _WARNED.add((id(tokenizer), key))
            warnings.warn(
                f"[infgrpo] {FIELD}: the tokenizer's chat template reads no {key!r} (it reads "
                f"{options or 'no options'}): {key}={kwargs[key]!r} does nothing with this model",
                InfgrpoWarning,
                stacklevel=2,
            )
