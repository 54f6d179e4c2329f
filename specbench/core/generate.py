"""Generation: speculative_generate and the plain autoregressive baseline.

Both take token ids and return token ids; tokenization, chat templates and printing live
elsewhere. Every forward pass feeds only the tokens the model's cache has not seen yet.

Invariant of the speculative loop: before a round the target's cache holds every token of
the sequence except the last one, which is fed as the first input of the verify pass.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field

import torch

from specbench.core.cache import cache_arg, crop_cache, new_cache
from specbench.core.protocols import Draft, Drafter, GammaPolicy
from specbench.core.sampling import SamplingConfig, choose, greedy_tokens, logits_to_probs
from specbench.core.stats import FIRST, RunStats, StepRecord
from specbench.core.verify import Verdict, verify_greedy, verify_sampling


class ContextLimitError(ValueError):
    """The prompt leaves no room for a new token in the model's context."""


@dataclass(frozen=True)
class GenerationConfig:
    max_new_tokens: int = 128
    sampling: SamplingConfig = field(default_factory=SamplingConfig)
    eos_token_ids: tuple[int, ...] = ()
    stop_strings: tuple[str, ...] = ()  # need a `decode` function to be checked
    seed: int = 0

    def __post_init__(self) -> None:
        if self.max_new_tokens < 1:
            raise ValueError(f"max-new-tokens must be >= 1, got {self.max_new_tokens}")
        if not 0 <= self.seed < 2**64:  # what torch.Generator.manual_seed takes
            raise ValueError(f"seed must be in 0 .. 2**64 - 1, got {self.seed}")


@dataclass
class GenerationResult:
    token_ids: list[int]  # the new tokens only
    stats: RunStats
    steps: list[StepRecord]
    stop_reason: str


def context_limit(model) -> int:
    """Most positions the model can attend over (a very large number if it does not say)."""
    limit = getattr(model.config, "max_position_embeddings", None)
    return int(limit) if limit else 1 << 30


def rope_boundary(model) -> int | None:
    """The position where a "longrope" model (Phi-3's long-context checkpoints) switches its
    rotary frequencies, or None. transformers picks them from the largest position in each
    forward, so a verify pass that crosses it would rotate its earlier rows with the long
    frequencies where one-token steps used the short ones: no round's pass may cross it."""
    params = getattr(model.config, "rope_parameters", None) or {}
    per_layer_type = params and all(isinstance(p, dict) for p in params.values())
    bounds = [
        p.get("original_max_position_embeddings")
        for p in (params.values() if per_layer_type else [params])
        if p.get("rope_type") == "longrope"
    ]
    return min((int(b) for b in bounds if b), default=None)


def model_device(model) -> torch.device:
    return next(model.parameters()).device


def sync(device: torch.device) -> None:
    """Wait for queued GPU work, so that wall-clock timings mean what they say."""
    if device.type == "cuda":
        torch.cuda.synchronize(device)


# ---------------------------------------------------------------------------- stops


class Stopper:
    """Decides where output ends: EOS ids, stop strings, max_new_tokens, the context limit."""

    def __init__(
        self,
        config: GenerationConfig,
        prompt_len: int,
        limit: int,
        decode: Callable[[list[int]], str] | None,
        boundary: int | None = None,
    ):
        if config.stop_strings and decode is None:
            raise ValueError("stop strings need a tokenizer to decode with")
        self.config = config
        self.prompt_len = prompt_len
        self.limit = limit
        self.boundary = boundary  # rope_boundary: no verify pass crosses this position
        self.decode = decode
        self.eos = set(config.eos_token_ids)
        self._tail = max((len(s) for s in config.stop_strings), default=0) + 8  # tokens of context

    def cut(self, output: list[int], new: list[int]) -> tuple[list[int], str | None]:
        """The prefix of `new` to append after `output`, and why output stops (or None)."""
        for i, token in enumerate(new):
            n_out = len(output) + i + 1
            if token in self.eos:
                return new[: i + 1], "eos"
            if self.config.stop_strings and self._stop_string_ends(output + new[: i + 1]):
                return new[: i + 1], "stop_string"
            if n_out >= self.config.max_new_tokens:
                return new[: i + 1], "max_new_tokens"
        if self.prompt_len + len(output) + len(new) >= self.limit:
            return new, "context"
        return new, None

    def _stop_string_ends(self, output: list[int]) -> bool:
        """True if the last token completed a stop string (it was not there one token earlier)."""
        text = self.decode(output[-self._tail :])
        before = self.decode(output[-self._tail : -1])
        return any(s in text and s not in before for s in self.config.stop_strings)

    def room(self, seq_len: int, produced: int) -> int:
        """Most draft tokens a round may propose: the round emits drafts + 1 tokens, and its
        verify pass reads positions seq_len - 1 .. seq_len - 1 + drafts."""
        by_tokens = self.config.max_new_tokens - produced - 1
        by_context = self.limit - seq_len - 1
        room = min(by_tokens, by_context)
        if self.boundary is not None and seq_len <= self.boundary:
            room = min(room, self.boundary - seq_len)
        return max(0, room)


def check_prompt(prompt_len: int, limit: int) -> None:
    """A prompt must be non-empty and leave room for at least one new token."""
    if prompt_len == 0:
        raise ValueError("the prompt is empty")
    if prompt_len >= limit:
        raise ContextLimitError(
            f"the prompt is {prompt_len} tokens; the model's context holds {limit}, leaving no room to generate"
        )


def _target_forward(model, new_tokens: torch.Tensor, cache, n_logits: int) -> torch.Tensor:
    """Feed new_tokens ([n]) over the cache; logits of the last n_logits positions -> [n_logits, vocab]."""
    out = model(input_ids=new_tokens.unsqueeze(0), **cache_arg(model, cache), use_cache=True, logits_to_keep=n_logits)
    return out.logits[0, -n_logits:]


# ---------------------------------------------------------------------------- speculative


@torch.inference_mode()
def speculative_generate(
    target,
    drafter: Drafter,
    prompt_ids: list[int],
    config: GenerationConfig,
    policy: GammaPolicy,
    *,
    decode: Callable[[list[int]], str] | None = None,
    on_step: Callable[[StepRecord], None] | None = None,
    limit: int | None = None,
) -> GenerationResult:
    """Speculative decoding of one prompt (batch 1). Lossless: greedy output equals plain greedy
    decoding token for token; sampled output follows the target's distribution."""
    device = model_device(target)
    limit = limit or context_limit(target)
    check_prompt(len(prompt_ids), limit)
    sampling = config.sampling
    generator = torch.Generator(device).manual_seed(config.seed)
    drafter.start(sampling, generator)
    stopper = Stopper(config, len(prompt_ids), limit, decode, rope_boundary(target))
    stats, steps = RunStats(), []
    cache = new_cache(target)
    seq = torch.tensor(prompt_ids, dtype=torch.long, device=device)
    output: list[int] = []

    def emit(record: StepRecord, new: list[int]) -> str | None:
        nonlocal seq
        kept, reason = stopper.cut(output, new)
        output.extend(kept)
        seq = torch.cat([seq, torch.tensor(kept, dtype=torch.long, device=device)])
        record.tokens, record.stop_reason = kept, reason
        steps.append(record)
        if on_step is not None:
            on_step(record)
        return reason

    # 1. first-target pass: prefill the prompt and take the first token from the target; the
    # drafter is shown the prompt (and offered the target's cache, which a drafter that shares
    # the target's first layers reads); a model drafter defers its own prefill to its first
    # round, where it is paid as draft time, so that no speedup leaves it out
    start = time.perf_counter()
    logits = _target_forward(target, seq, cache, 1)[0]
    token, probs = choose(logits, sampling, generator)
    drafter.prefill(seq, cache)
    sync(device)
    stats.prefill_seconds = time.perf_counter() - start
    stats.target_forwards = stats.first_pass_tokens = 1
    first = StepRecord(
        0, 0, 0, [], [], [], [], 0, token, FIRST, float(probs[token]), [], verify_seconds=stats.prefill_seconds
    )
    reason = emit(first, [token])

    decode_start = time.perf_counter()
    while reason is None:
        # 2. draft up to gamma tokens (the policy may stop the draft early)
        gamma = min(policy.next_gamma(), stopper.room(seq.shape[0], len(output)))
        draft = drafter.propose(seq, gamma, policy.keep_drafting, policy.forward_pays)
        k = draft.tokens.shape[0]

        # 3. verify [last token] + drafts in ONE target forward over the cache
        t0 = time.perf_counter()
        verdict, target_probs = _verify(target, seq[-1:], draft, cache, sampling, generator)
        n = verdict.n_accepted
        pass_seconds = time.perf_counter() - t0  # the verdict is a Python int: the pass has finished on any device

        # 4. roll both caches back to the accepted prefix; tell the drafter and the policy
        crop_cache(cache, seq.shape[0] + n)
        drafter.commit(n)
        policy.update(n, k, verdict.next_token)
        sync(device)
        verify_seconds = time.perf_counter() - t0

        stats.add_round(k, n, draft.seconds, verify_seconds)
        record = _round_record(
            stats.rounds,
            len(output),
            gamma,
            draft,
            verdict,
            target_probs,
            sampling,
            verify_seconds,
            pass_seconds,
            policy.info(),
        )
        reason = emit(record, record.draft_tokens[:n] + [verdict.next_token])

    stats.decode_seconds = time.perf_counter() - decode_start
    stats.new_tokens = len(output)
    return GenerationResult(output, stats, steps, reason)


def _verify(
    target, last: torch.Tensor, draft: Draft, cache, sampling: SamplingConfig, generator
) -> tuple[Verdict, torch.Tensor]:
    """Score [last token] + drafts ([1 + k]) in one target forward and run the acceptance test:
    exact match under greedy, rejection sampling (Leviathan et al.) otherwise. Returns the
    verdict and the target's processed rows p ([k + 1, vocab])."""
    k = draft.tokens.shape[0]
    logits = _target_forward(target, torch.cat([last, draft.tokens]), cache, k + 1)  # [k+1, vocab]
    target_probs = logits_to_probs(logits, sampling)  # [k+1, vocab]
    if sampling.greedy:
        return verify_greedy(draft.tokens, greedy_tokens(logits)), target_probs
    return verify_sampling(draft.tokens, draft.probs, target_probs, generator), target_probs


def _round_record(
    round_: int,
    position: int,
    gamma: int,
    draft: Draft,
    verdict: Verdict,
    target_probs: torch.Tensor,
    sampling: SamplingConfig,
    verify_seconds: float,
    pass_seconds: float,
    policy_info: dict,
) -> StepRecord:
    """The StepRecord of one verified round (its tokens and stop reason are set by emit)."""
    drafted = draft.tokens.tolist()
    n, k = verdict.n_accepted, len(drafted)
    return StepRecord(
        round=round_,
        position=position,
        gamma=gamma,
        draft_tokens=drafted,
        draft_probs=_probs_of(draft.probs, drafted),
        target_probs=_probs_of(target_probs[:k], drafted),
        draws=verdict.draws,
        accepted=n,
        emitted_token=verdict.next_token,
        emitted_kind=verdict.kind,
        emitted_prob=float(target_probs[n, verdict.next_token]) if sampling.greedy else verdict.next_prob,
        tokens=[],
        draft_seconds=draft.seconds,
        verify_seconds=verify_seconds,
        pass_seconds=pass_seconds,
        drafter_feeds=draft.feeds,
        policy_info=policy_info,
    )


def _probs_of(rows: torch.Tensor | None, tokens: list[int]) -> list[float | None]:
    """Probability each row gives its token: [k, vocab] rows, k tokens -> k floats."""
    if rows is None:
        return [None] * len(tokens)
    if not tokens:
        return []
    picked = rows[torch.arange(len(tokens), device=rows.device), torch.tensor(tokens, device=rows.device)]
    return picked.tolist()


# ---------------------------------------------------------------------------- plain


@torch.inference_mode()
def plain_generate(
    target,
    prompt_ids: list[int],
    config: GenerationConfig,
    *,
    decode: Callable[[list[int]], str] | None = None,
    on_token: Callable[[int], None] | None = None,
    limit: int | None = None,
) -> GenerationResult:
    """Plain autoregressive decoding with a KV cache: one target forward per token, the same
    sampling code as the speculative loop. The baseline for parity and for speedups."""
    device = model_device(target)
    limit = limit or context_limit(target)
    check_prompt(len(prompt_ids), limit)
    generator = torch.Generator(device).manual_seed(config.seed)
    stopper = Stopper(config, len(prompt_ids), limit, decode)
    stats = RunStats()
    cache = new_cache(target)
    output: list[int] = []
    pending = torch.tensor(prompt_ids, dtype=torch.long, device=device)
    reason = None
    start = time.perf_counter()
    while reason is None:
        logits = _target_forward(target, pending, cache, 1)[0]
        token, _ = choose(logits, config.sampling, generator)
        kept, reason = stopper.cut(output, [token])
        output.extend(kept)
        if on_token is not None:
            on_token(token)
        stats.target_forwards += 1
        if stats.target_forwards == 1:
            sync(device)
            stats.prefill_seconds = time.perf_counter() - start
            stats.first_pass_tokens = 1
            start = time.perf_counter()
        pending = torch.tensor([token], device=device)
    sync(device)
    stats.decode_seconds = time.perf_counter() - start
    stats.rounds = stats.target_forwards - 1
    stats.new_tokens = len(output)
    return GenerationResult(output, stats, [], reason)
