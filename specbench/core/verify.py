"""Pure acceptance of a draft: exact match for greedy, rejection sampling otherwise.

Names follow Leviathan et al. (2023), Algorithm 1, stated once here:
    q = draft_probs  (the drafter's distribution at each draft position)
    p = target_probs (the target's distribution at the same positions, plus one more)
Draft token x_i is kept with probability min(1, p_i(x_i) / q_i(x_i)); at the first rejection
the emitted token comes from the residual norm(max(0, p_i - q_i)); when all drafts are kept,
a bonus token comes from p_{gamma+1}. Both p and q must have gone through the same
temperature / top-k / top-p processor (sampling.logits_to_probs).

Drafters without a distribution (n-gram, prompt lookup) pass q = None, which means a one-hot
q on each drafted token: keep x with probability p(x), else sample from p with x removed.
That is the same algorithm with a degenerate q, so it stays lossless.

Everything here is a pure function of tensors and a torch.Generator: no models, no caches.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import torch

from specbench.core.sampling import sample
from specbench.core.stats import BONUS, CORRECTION


@dataclass(frozen=True)
class Verdict:
    n_accepted: int  # how many draft tokens were kept (a prefix)
    next_token: int  # the token after the kept prefix: correction or bonus
    kind: str  # BONUS (all drafts kept) or CORRECTION (drawn after a rejection)
    next_prob: float  # probability of next_token under the distribution it was drawn from
    draws: list[float] = field(default_factory=list)  # the uniform r used per examined draft


def verify_greedy(draft_tokens: torch.Tensor, target_choice: torch.Tensor) -> Verdict:
    """Keep drafts while they equal the target's argmax.

    draft_tokens: [k] ids; target_choice: [k + 1] the target's argmax after each prefix.
    The output is then exactly what plain greedy decoding of the target would produce.
    """
    k = draft_tokens.shape[0]
    mismatch = (draft_tokens != target_choice[:k]).nonzero()
    n = int(mismatch[0]) if mismatch.numel() else k
    return Verdict(n, int(target_choice[n]), BONUS if n == k else CORRECTION, 1.0)


def verify_sampling(
    draft_tokens: torch.Tensor,  # [k]
    draft_probs: torch.Tensor | None,  # [k, vocab] q, or None for a one-hot q
    target_probs: torch.Tensor,  # [k + 1, vocab] p
    generator: torch.Generator | None,
) -> Verdict:
    """Leviathan et al. Algorithm 1 for one round."""
    k = draft_tokens.shape[0]
    positions = torch.arange(k, device=target_probs.device)
    p_x = target_probs[positions, draft_tokens]  # [k]
    q_x = draft_probs[positions, draft_tokens] if draft_probs is not None else torch.ones_like(p_x)
    r = torch.rand(k, generator=generator, device=p_x.device)  # generator lives on that device
    # accept iff r < p/q, written without a division so that q(x) = 0 cannot make a NaN:
    # q(x) = 0 (x could not have been drafted) accepts only if p(x) > 0.
    rejected = (r * q_x >= p_x).nonzero()
    n = int(rejected[0]) if rejected.numel() else k
    draws = r[: min(n + 1, k)].tolist()
    if n == k:
        token = int(sample(target_probs[k], generator))
        return Verdict(k, token, BONUS, float(target_probs[k, token]), draws)
    q_row = draft_probs[n] if draft_probs is not None else _one_hot(draft_tokens[n], target_probs)
    residual = residual_distribution(target_probs[n], q_row)
    token = int(sample(residual, generator))
    return Verdict(n, token, CORRECTION, float(residual[token]), draws)


def residual_distribution(p: torch.Tensor, q: torch.Tensor) -> torch.Tensor:
    """norm(max(0, p - q)) over the vocabulary.

    If it sums to zero (p <= q everywhere, which happens only when p == q up to rounding),
    rejection had probability zero in exact arithmetic; falling back to p is then exact.
    """
    residual = torch.clamp(p - q, min=0.0)
    total = residual.sum()
    if total <= 0 or not torch.isfinite(total):
        return p
    return residual / total


def _one_hot(token: torch.Tensor, like: torch.Tensor) -> torch.Tensor:
    row = torch.zeros(like.shape[-1], dtype=like.dtype, device=like.device)
    row[token] = 1.0
    return row
