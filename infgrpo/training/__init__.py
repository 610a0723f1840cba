"""The glue of one GRPO step, without Lightning: scoring and its cross-rank gather, metrics, random state."""
