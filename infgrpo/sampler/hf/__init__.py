"""The Hugging Face baselines (``sampler.decoder``): ``generate`` over the whole group, round by round, and
transformers' own continuous batching; kept for the benchmarks' side-by-side comparisons."""
