"""What the sampler, the update and the module share, without Lightning: threads, ranks, hardware, memory, OOM,
the token-budget packer."""
