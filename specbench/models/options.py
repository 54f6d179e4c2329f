"""The pair options' defaults: what each one is when the user does not say.

Kept apart from specs.py, which checks the values a user gives, because this module imports
nothing: the command line reads these defaults in its option signatures, and `specbench --help`
must not load torch to draw them. What an "auto" dtype stands for on a device and a machine is
dtypes.py's, which also says why those are the fastest choices that keep greedy parity.
"""

from __future__ import annotations

DEFAULT_DTYPE = "auto"  # the target's weights
DEFAULT_DRAFT_DTYPE = "auto"  # the drafter model's weights
# A model drafter scores ids below this, plus the prompt's and EOS (draft_vocab.py); 0 scores
# all. Chosen by measuring acceptance and draft-step time against the limit.
DEFAULT_DRAFT_VOCAB = 65536
# A model drafter copies from the context instead when its last 3 tokens occurred before
# (drafters.LookupFirstDrafter, "model+lookup"). Chosen by a greedy sweep.
DEFAULT_LOOKUP = True
