"""How many tokens to draft: the GammaPolicy protocol and its policies.

A round asks the policy three things, in this order:
  1. next_gamma()                 the most tokens it may draft this round;
  2. keep_drafting(step, probs)   before each draft token, with the drafter's distribution
                                  for it (None for drafters without one): draft it or stop;
  3. update(n_accepted, n_drafted) the outcome, once the target has verified.
Policies that do not care about a step answer with the do-nothing default, so the decoding
loop never asks which kind of policy it holds. info() says what decided the round, for the
StepRecord and the trace.

This module knows nothing about models or caches.
"""

from __future__ import annotations

import math
from typing import Protocol

import torch


class GammaPolicy(Protocol):
    name: str

    def next_gamma(self) -> int: ...

    def keep_drafting(self, step: int, draft_probs: torch.Tensor | None) -> bool: ...

    def update(self, n_accepted: int, n_drafted: int) -> None: ...

    def info(self) -> dict: ...


class FixedGamma:
    """Always gamma tokens."""

    name = "fixed"

    def __init__(self, gamma: int):
        if gamma < 1:
            raise ValueError(f"gamma must be >= 1, got {gamma}")
        self.gamma = gamma

    def next_gamma(self) -> int:
        return self.gamma

    def keep_drafting(self, step: int, draft_probs: torch.Tensor | None) -> bool:
        return True

    def update(self, n_accepted: int, n_drafted: int) -> None:
        """No-op: a fixed gamma learns nothing."""

    def info(self) -> dict:
        return {}


# ---------------------------------------------------------------------------- factory

POLICIES = ("fixed",)


def make_policy(name: str, gamma: int, *, gamma_min: int = 1, gamma_max: int | None = None, egag_beta: float = 0.0, threshold: float | None = None) -> GammaPolicy:
    """A fresh policy by name (policies keep state: make one per generation)."""
    if name == "fixed":
        return FixedGamma(gamma)
    raise ValueError(f"unknown gamma policy {name!r}; choose from {', '.join(POLICIES)}")
