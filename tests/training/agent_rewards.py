"""Rewards the agent-rollout tests name by import path (``tests.training.agent_rewards:final_count``)."""


def final_count(completions, environments, **kwargs):
    """Each completion's environment's count (TRL's ``environments=``: one instance per completion)."""
    return [float(env.count) for env in environments]


def called_a_tool(completions, **kwargs):
    """1 when the completion (its messages) holds a tool result, else 0."""
    return [float(any(m["role"] == "tool" for m in c)) for c in completions]


def asked(prompts, completions, **kwargs):
    """The length of the prompt's last message (TRL gives the prompt each completion decoded, with its observation)."""
    return [float(len(p[-1]["content"])) for p in prompts]
