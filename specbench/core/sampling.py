"""Logits -> probabilities, and drawing from them.

This module owns the one logits processor that both models go through: temperature, top-k
and top-p. Speculative sampling is lossless only if the drafter's q and the target's p are
processed identically, so nothing else in specbench turns logits into probabilities.

It knows nothing about models, caches or drafting.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch


@dataclass(frozen=True)
class SamplingConfig:
    temperature: float = 0.0  # 0 means greedy (argmax); > 0 samples
    top_k: int = 0  # keep the k most likely tokens; 0 keeps all
    top_p: float = 1.0  # keep the smallest set whose mass reaches top_p; 1.0 keeps all

    def __post_init__(self) -> None:
        if not (math.isfinite(self.temperature) and self.temperature >= 0):  # NaN fails every comparison
            raise ValueError(f"temperature must be >= 0 and finite, got {self.temperature}")
        if self.top_k < 0:
            raise ValueError(f"top-k must be >= 0, got {self.top_k}")
        if not 0.0 < self.top_p <= 1.0:
            raise ValueError(f"top-p must be in (0, 1], got {self.top_p}")

    @property
    def greedy(self) -> bool:
        return self.temperature == 0.0


def sanitize_logits(logits: torch.Tensor) -> torch.Tensor:
    """Float32 logits with NaN treated as impossible and +inf as certain.

    A row whose finite logits are all -inf/NaN becomes uniform: the model said nothing usable,
    and uniform is the one choice that does not favour a token (and does not crash).
    """
    logits = logits.float()
    # one pass for the common case: the row maximum is NaN if any entry is, +inf if any is,
    # -inf if all are; -inf entries alone (a restricted head's unscored ids) need nothing
    if torch.isfinite(logits.amax(dim=-1)).all():
        return logits
    logits = logits.masked_fill(torch.isnan(logits), float("-inf"))
    pos_inf = torch.isposinf(logits)
    has_pos_inf = pos_inf.any(dim=-1, keepdim=True)
    # rows with +inf: those positions share the mass equally, everything else gets none
    logits = torch.where(has_pos_inf, torch.where(pos_inf, 0.0, float("-inf")), logits)
    dead = torch.isneginf(logits).all(dim=-1, keepdim=True)
    return torch.where(dead, torch.zeros_like(logits), logits)


def logits_to_probs(logits: torch.Tensor, config: SamplingConfig) -> torch.Tensor:
    """Probabilities after temperature, top-k and top-p. logits: [..., vocab].

    For greedy decoding the rows are the plain softmax (temperature 1, no truncation): the
    decision is the argmax either way, and the softmax is what a trace shows as p and q.
    """
    logits = sanitize_logits(logits)
    if config.greedy:
        return torch.softmax(logits, dim=-1)
    logits = logits / config.temperature
    if config.top_k and config.top_k < logits.shape[-1]:
        kth = torch.topk(logits, config.top_k, dim=-1).values[..., -1:]
        logits = logits.masked_fill(logits < kth, float("-inf"))
    probs = torch.softmax(logits, dim=-1)
    if config.top_p < 1.0:
        probs = _top_p(probs, config.top_p)
    return probs


TOP_P_CANDIDATES = 1024  # ids _top_p ranks before it sorts a whole row


def _top_p(probs: torch.Tensor, top_p: float) -> torch.Tensor:
    """Keep the smallest prefix (by descending probability) whose mass reaches top_p.

    The prefix is looked for among the TOP_P_CANDIDATES most likely ids first (topk), and
    the whole row is sorted only where their mass falls short of top_p. Both give the same
    prefix: topk's values are the sorted row's first values, in the same order. Why: sorting
    a row of a 150k vocabulary takes longer than it takes a small model to score it, and a
    decoding loop processes a row at every plain step, every draft and every verified
    position; a nucleus almost always lies within a few hundred ids."""
    if probs.shape[-1] > TOP_P_CANDIDATES:
        top, order = torch.topk(probs, TOP_P_CANDIDATES, dim=-1)  # sorted, descending
        mass = torch.cumsum(top, dim=-1)
        if bool((mass[..., -1] >= top_p).all()):  # every id past the candidates is dropped
            return _keep_prefix(probs, top, order, mass, top_p)
    ranked, order = torch.sort(probs, dim=-1, descending=True)
    return _keep_prefix(probs, ranked, order, torch.cumsum(ranked, dim=-1), top_p)


def _keep_prefix(
    probs: torch.Tensor, sorted_probs: torch.Tensor, order: torch.Tensor, mass: torch.Tensor, top_p: float
) -> torch.Tensor:
    """probs with only the ids of the prefix of sorted_probs (at `order`, cumulative `mass`)
    whose mass before each id is below top_p, renormalized: the top id always stays."""
    mass_before = mass - sorted_probs
    sorted_probs = sorted_probs.masked_fill(mass_before >= top_p, 0.0)
    kept = torch.zeros_like(probs).scatter_(-1, order, sorted_probs)
    return kept / kept.sum(dim=-1, keepdim=True)


def sample(probs: torch.Tensor, generator: torch.Generator | None) -> torch.Tensor:
    """One token id per row of probs ([..., vocab] -> [...]), by inverting the CDF.

    Token i is drawn when u falls in [cdf(i - 1), cdf(i)), u uniform on [0, total): exactly
    p(i) / total, and never a token of probability 0 (its interval is empty). The CDF is
    summed in float64. Why not torch.multinomial: on a CPU it was several times slower over a
    150k-id row, a visible share of a drafter step.
    """
    flat = probs.reshape(-1, probs.shape[-1])
    return _invert(flat, torch.cumsum(flat, dim=-1, dtype=torch.float64), generator).reshape(probs.shape[:-1])


def sample_from_cdf(probs: torch.Tensor, cdf: torch.Tensor, generator: torch.Generator | None) -> int:
    """sample() for one row ([vocab]) whose float64 CDF (cumsum of probs) the caller keeps,
    for a row drawn from many times: the same draw from the same generator state."""
    return int(_invert(probs.unsqueeze(0), cdf.unsqueeze(0), generator)[0])


def _invert(flat: torch.Tensor, cdf: torch.Tensor, generator: torch.Generator | None) -> torch.Tensor:
    """The ids drawn by inverting each row's CDF ([rows, vocab] -> [rows])."""
    total = cdf[:, -1:]
    u = torch.rand(flat.shape[0], 1, generator=generator, dtype=torch.float64, device=flat.device) * total
    ids = torch.searchsorted(cdf, u, right=True)
    past = ids >= flat.shape[-1]  # u rounded up to total (odds about 1e-16): the last token with mass
    if past.any():
        last = flat.shape[-1] - 1 - torch.argmax((flat.flip(-1) > 0).to(torch.int8), dim=-1, keepdim=True)
        ids = torch.where(past, last, ids)
    return ids[:, 0]


def choose(logits: torch.Tensor, config: SamplingConfig, generator: torch.Generator | None):
    """Pick the next token from one row of logits: (token id, its processed probability row)."""
    probs = logits_to_probs(logits, config)
    if config.greedy:
        return int(greedy_tokens(logits)), probs
    return int(sample(probs, generator)), probs


def greedy_tokens(logits: torch.Tensor) -> torch.Tensor:
    """Argmax of each row, the one greedy decision rule for plain and speculative decoding."""
    return torch.argmax(sanitize_logits(logits), dim=-1)


def entropy(probs: torch.Tensor) -> torch.Tensor:
    """Shannon entropy in nats of each row ([..., vocab] -> [...])."""
    logp = torch.log(probs.clamp_min(1e-30))
    return -(probs * logp).sum(dim=-1)
