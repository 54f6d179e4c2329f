"""Benchmarks: prompt sets (shipped in prompt_sets/), the sweep (plan.py: what runs in which
order; sweep.py: running it; meta.py: what meta.json records), predictions (profile.py,
replay.py), HF assisted generation as a baseline, results tables (pandas) and charts."""
