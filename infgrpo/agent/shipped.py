"""The chat templates infgrpo ships, in ``infgrpo/agent/templates/``: the one home of their files.

    shipped_template("compact")   # ChatML with Qwen's <tool_call> blocks, small enough for the tiny models
    shipped_template("qwen3")     # Qwen3's format with every think block kept: prefix-preserving for tool results

Everything that reads a shipped template (the agent's settings, the swap of Qwen3's own template, the tiny models'
builds) reads it through here, so a template has one path and one name.
"""

from __future__ import annotations

from pathlib import Path

TEMPLATES = Path(__file__).parent / "templates"
"""The folder of the shipped chat templates (``<name>.jinja``)."""


def shipped_path(name: str) -> Path:
    """The file of the shipped template ``name`` (``compact``, ``qwen3``)."""
    return TEMPLATES / f"{name}.jinja"


def shipped_template(name: str) -> str:
    """The text of the shipped template ``name``."""
    return shipped_path(name).read_text(encoding="utf-8")
