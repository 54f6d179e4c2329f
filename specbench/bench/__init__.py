"""Benchmarks: prompt sets (shipped in prompt_sets/), the sweep, HF assisted generation as a
baseline, results tables (pandas) and charts."""
