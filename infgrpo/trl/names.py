"""TRL's ``GRPOConfig`` names on infgrpo's command line, pointed to infgrpo's keys before parsing.

    trl_keys(["--model.num_generations", "8"], known)
    # "model.num_generations is TRL's num_generations; infgrpo's key is model.group_size"

A TRL user writes ``--model.num_generations 8``, ``--num_generations 8`` or ``max_completion_length: 64`` in a
config file; the parser answered "unrecognized arguments" (or "key not expected"), naming no key of ours. Every
flag and config-file key the parser does not know, whose last part is a field of TRL's table
(:data:`~infgrpo.trl.fields.TRL_FIELDS`, older names such as ``torch_dtype`` and fields older releases had, such as
``max_prompt_length``: :data:`TRL_NAMES`), is named here with infgrpo's keys, or with the reason infgrpo has none
(``use_vllm``). ``known`` is the parser's keys (``model.group_size``, ``trainer.callbacks``, ...); a key under one
that takes any value (``trainer.callbacks``, ``data.task_config``) is known. Called by ``GRPOCLI.parse_arguments``
after :func:`~infgrpo.training.compat_v01.old_keys` (infgrpo 0.1's flat keys, some of which are TRL's names).
"""

from __future__ import annotations

from collections.abc import Collection, Iterator, Mapping
from pathlib import Path
from typing import Any

import yaml

from infgrpo.settings import config_paths
from infgrpo.trl.fields import TRL_FIELDS, Target
from infgrpo.trl.how import BATCH
from infgrpo.trl.other_keys import OTHER_GROUPS, RENAMED

SHOWN = 4
"""TRL names spelled out in one message (the rest counted)."""
TRL_NAMES: dict[str, Target] = {
    **TRL_FIELDS,
    **{old: TRL_FIELDS[new] for old, new in RENAMED.items()},
    **dict(OTHER_GROUPS)["Older TRL and transformers fields"],
}
"""The names pointed to infgrpo's keys: TRL 1.16's fields, their older names and fields older releases had (not
recipe scripts' arguments or launcher keys, whose names are too common to tell)."""
NOTES = dict.fromkeys(("per_device_train_batch_size", "gradient_accumulation_steps"), f"data.batch_size counts {BATCH}")
"""What a TRL name's message adds, where infgrpo's key counts otherwise."""


def parents(known: Collection[str]) -> set[str]:
    """The keys of ``known`` that have keys under them (``model``, ``model.policy``), so take no other subkey."""
    return {key.rsplit(".", 1)[0] for key in known if "." in key and not key.endswith(".help")}


def is_known(key: str, known: Collection[str], groups: set[str]) -> bool:
    """Whether the parser takes ``key``: one of ``known``, or under a known key that is no group (it takes any
    value, e.g. ``trainer.callbacks``)."""
    parts = key.split(".")
    return key in known or any(
        ".".join(parts[:i]) in known and ".".join(parts[:i]) not in groups for i in range(1, len(parts))
    )


def pointed(key: str) -> str:
    """``<key> is TRL's <name>; infgrpo's key is <ours>`` (or why infgrpo has none) for a key ending in a TRL name."""
    name = key.rsplit(".", 1)[-1]
    target = TRL_NAMES[name]
    field = RENAMED.get(name, name)
    trls = f"TRL's older name of {field}" if name in RENAMED else f"TRL's {name}"
    if isinstance(target, str):
        return f"{key} is {trls}, which has no infgrpo key: {target}"
    ours = f"key is {target[0]}" if len(target) == 1 else f"keys are {', '.join(target)}"
    how = f" ({NOTES[field]})" if field in NOTES else ""
    return f"{key} is {trls}; infgrpo's {ours}{how}"


def flag_keys(argv: list[str]) -> Iterator[str]:
    """The dotted keys of ``argv``'s flags (``--model.group_size=8`` and ``--trainer.callbacks+=...`` included)."""
    for arg in argv:
        if arg.startswith("--") and len(arg) > 2:
            yield arg[2:].partition("=")[0].rstrip("+")


def file_keys(section: Any, prefix: str, groups: set[str]) -> Iterator[str]:
    """The dotted keys of a config file's ``section``, descending into the parser's groups (and ``init_args``)."""
    if not isinstance(section, Mapping):
        return
    section = section.get("init_args", section) if "class_path" in section else section
    for name, value in section.items():
        key = f"{prefix}{name}"
        yield key
        if key in groups:
            yield from file_keys(value, f"{key}.", groups)


def read_yaml(path: str) -> Any:
    """The YAML file ``path``, or None when it cannot be read (the parser says why)."""
    try:
        return yaml.safe_load(Path(path).read_text())
    except (OSError, yaml.YAMLError):
        return None


def trl_keys(argv: list[str], known: Collection[str]) -> str | None:
    """One line naming every TRL name in ``argv``'s flags and config files that the parser (its keys ``known``)
    would refuse, each with infgrpo's key; None when there is none."""
    groups = parents(known)

    def trl(key: str) -> bool:
        return key.rsplit(".", 1)[-1] in TRL_NAMES and not is_known(key, known, groups)

    found = [(key, "") for key in flag_keys(argv) if trl(key)]
    whole_files = []
    for path in filter(None, config_paths(argv)):  # the files given to -c / --config
        keys = [key for key in file_keys(read_yaml(path), "", groups) if trl(key)]
        found += [(key, f" (in {path})") for key in keys]
        if sum("." not in key for key in keys) > 1:  # several TRL fields at the top: a TRL config file
            whole_files.append(path)
    if not found:
        return None
    messages = [f"{pointed(key)}{where}" for key, where in dict.fromkeys(found)]
    more = f"; and {len(messages) - SHOWN} more TRL names" if len(messages) > SHOWN else ""
    line = "; ".join(messages[:SHOWN]) + more
    for path in whole_files:
        line += f"; {path} looks like a TRL config: convert it with python -m infgrpo.from_trl {path} -o infgrpo.yaml"
    return line
