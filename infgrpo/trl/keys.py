"""infgrpo's side: the keys of a ``python -m infgrpo.fit`` config being written, with infgrpo's defaults.

    out = Keys(children)                     # children(path): the keys under a dotted path, with their defaults
    out.put("model.group_size", 16)          # written: not infgrpo's default
    out.put("model.sampler.top_k", 0)        # not written: infgrpo's default, and the TRL config did not set it
    out.nest()                               # {"model": {"group_size": 16}}, in the order of infgrpo's parameters

The shape of the config (which keys there are, their defaults and their order) is asked of ``children``:
:func:`infgrpo.from_trl.config_keys` reads it from the command line's classes (Lightning's ``Trainer``,
``GRPOModule`` and its settings groups, ``PromptDataModule``), which stand above this wing: the wing reads
nothing of them itself.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

Children = Callable[[str], Mapping[str, Any]]
"""The keys under a dotted path (``""``, ``"trainer"``, ``"model"``, ``"model.sampler"``, ...) with their defaults,
in their order; a KeyError for a path that holds no keys (a leaf, or no key at all)."""


def is_section(key: str, children: Children) -> bool:
    """Whether ``key`` holds keys (``trainer``, ``model``, ``model.sampler``) rather than a value."""
    try:
        children(key)
    except KeyError:
        return False
    return True


def default(key: str, children: Children) -> Any:
    """infgrpo's default of a dotted key (``model.sampler.max_new_tokens`` -> 128); a KeyError for a key that
    ``python -m infgrpo.fit`` does not have, or for a section (``model.sampler``)."""
    parent, _, leaf = key.rpartition(".")
    try:
        keys = children(parent)
    except KeyError:
        raise KeyError(key) from None
    if leaf not in keys or is_section(key, children):
        raise KeyError(key)
    return keys[leaf]


def nest(flat: Mapping[str, Any], children: Children) -> dict[str, Any]:
    """Dotted keys (``model.sampler.temperature``) as nested dicts, in the order of infgrpo's parameters."""

    def rank(key: str) -> tuple[int, ...]:
        parts = key.split(".")
        order = []
        for i, part in enumerate(parts):
            names = list(children(".".join(parts[:i])))
            order.append(names.index(part) if part in names else len(names))
        return tuple(order)

    root: dict[str, Any] = {}
    for key in sorted(flat, key=rank):
        *parents, leaf = key.split(".")
        node = root
        for part in parents:
            node = node.setdefault(part, {})
        node[leaf] = flat[key]
    return root


class Keys:
    """The infgrpo keys being written: a key is kept when the TRL config set it or its value is not infgrpo's
    default."""

    def __init__(self, children: Children) -> None:
        self.children = children
        self.flat: dict[str, Any] = {}

    def default(self, key: str) -> Any:
        """infgrpo's default of ``key``; a KeyError for a key ``python -m infgrpo.fit`` does not have."""
        return default(key, self.children)

    def put(self, key: str, value: Any, given: bool = False) -> None:
        """Writes ``key`` when ``given`` (the TRL config set it) or ``value`` differs from infgrpo's default."""
        default = self.default(key)  # a KeyError for a key infgrpo lacks, written or not
        if given or value != default:
            self.flat[key] = value

    def get(self, key: str) -> Any:
        """The value written for ``key``, else infgrpo's default."""
        return self.flat[key] if key in self.flat else self.default(key)

    def nest(self) -> dict[str, Any]:
        """The keys written, nested (:func:`nest`)."""
        return nest(self.flat, self.children)
