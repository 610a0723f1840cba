"""Agents: tools, environments and multi-turn rollouts with TRL 1.16's surface (``tools=``, ``environment_factory=``).

The host side of a multi-turn rollout: the ``model.agent`` settings, tool schemas, environments, the chat template's
tool messages and the calls of one turn. The engine's side is :mod:`infgrpo.sampler.engine.turns`. The design is in
docs/architecture.md ("Agents").
"""
