"""The contracts between the loop and what it drives: drafters and gamma policies.

The loop (generate.py) calls these and nothing else, so it never asks which kind of drafter
or policy it holds. Implementations live outside core/ (specbench/drafters, specbench/policies)
and import these types; core/ imports nothing of theirs.

Drafter
    propose(context, max_tokens, keep_drafting, forward_pays=None) -> Draft
        context: [n] every token so far (prompt + output); max_tokens: the policy's gamma;
        keep_drafting(step, probs, token): the policy's per-step say (a Keep or a bool):
        drop the token and stop, keep it and go on, or keep it and stop. Every drafter passes
        the token: model drafters the one they drew from probs, table drafters (probs None)
        the one their table predicts. forward_pays(step, feed): asked by a drafter that runs
        a forward before the forward that would make draft `step`, feeding `feed` ids; False
        ends the round's drafting there, with nothing paid (None: every forward is run).
        Drafters that run none never ask.
    start(sampling, generator)
        a new generation begins: drop all state; use the SAME sampling processor as the target
        (rejection sampling is lossless only then) and draw from the given generator.
    prefill(prompt, target_cache)
        the prompt, before the first round; reading it now is optional (prefill time), since
        propose catches up on anything unread (draft time): the model drafter defers it to
        the first round that drafts with the model. target_cache is the target's
        KV cache, which holds the prompt by then: a drafter that runs the target's own first
        layers (drafters/early_exit.py) reads and extends those layers there, and must leave
        the cache as it found it before each propose returns; every other drafter ignores it.
    commit(n_accepted)
        the target kept the first n_accepted drafts and then emitted one more token; roll
        any internal state back to match.

GammaPolicy, asked four things a round, in this order:
    next_gamma()                      the most tokens it may draft this round;
    forward_pays(step, feed)          before a drafter forward for draft `step` that feeds
                                      `feed` ids: whether to run it (a policy that prices
                                      no forward says True);
    keep_drafting(step, probs, token) for each draft token, with the drafter's row q for it
                                      (None for drafters without one) and the token drawn
                                      from it: a Keep (or a bool: True is YES, False is NO);
    update(n_accepted, n_drafted, next_token)
                                      the outcome, once the target has verified: next_token
                                      is the token it emitted after the kept drafts (the
                                      correction, or the bonus when all were accepted).
    info() says what decided the round (for the StepRecord and the trace); the loop calls it
    after update().

Losslessness rule for policies: whether a draft is kept (NO against YES or LAST) may depend
on its row q and on everything before it, never on the token itself; the token may only decide
whether to draft the next one (YES against LAST). See specbench/policies/__init__.py.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from enum import IntEnum
from typing import Protocol

import torch

from specbench.core.sampling import SamplingConfig


class Keep(IntEnum):
    """A policy's answer for one draft step; the drafter has already paid for its row.

    NO    drop this token and end the round;
    YES   keep it and draft the next one (another drafter forward);
    LAST  keep it and end the round: no forward for a row the policy would refuse anyway.
    """

    NO = 0
    YES = 1
    LAST = 2


class GammaPolicy(Protocol):
    name: str

    def next_gamma(self) -> int: ...

    def forward_pays(self, step: int, feed: int) -> bool: ...

    def keep_drafting(self, step: int, draft_probs: torch.Tensor | None, token: int | None = None) -> Keep | bool: ...

    def update(self, n_accepted: int, n_drafted: int, next_token: int | None = None) -> None: ...

    def info(self) -> dict: ...


KeepDrafting = Callable[..., "Keep | bool"]  # (step, probs, token=None)
ForwardPays = Callable[[int, int], bool]  # (step, feed)


@dataclass
class Draft:
    tokens: torch.Tensor  # [k] proposed ids, k <= max_tokens (may be 0)
    probs: torch.Tensor | None  # [k, vocab] q after the sampling processor, or None
    seconds: float = 0.0  # wall time of the proposal
    # tokens fed to each drafter forward, in order (a model drafter's first forward of a
    # round also catches up on what the context gained since its last one); [] for none
    feeds: list[int] = field(default_factory=list)


class Drafter(Protocol):
    name: str

    def propose(
        self,
        context: torch.Tensor,
        max_tokens: int,
        keep_drafting: KeepDrafting,
        forward_pays: ForwardPays | None = None,
    ) -> Draft: ...

    def commit(self, n_accepted: int) -> None: ...

    def start(self, sampling: SamplingConfig, generator: torch.Generator | None) -> None:
        """Forget the last generation; draw with this processor and generator from now on."""
        ...

    def prefill(self, prompt: torch.Tensor, target_cache=None) -> None:
        """Read the prompt ([n] ids) ahead of the first propose; target_cache: the target's
        cache (see the module docstring), None where there is none (a replay)."""
        ...
