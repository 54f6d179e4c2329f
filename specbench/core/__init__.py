"""The algorithm: the speculative loop and the plain baseline, verification, sampling, the
KV-cache wrapper, and the records and metrics of a run.

core/ imports nothing from specbench outside core/ (tests/core/test_layers.py reads the
imports and fails if it does): the CPU fast paths in speed/, the drafters and the policies
plug in through the protocols in protocols.py, so a reader of the loop never steps through
them to follow a draft.
"""
