"""Predicting speculative runs by replaying a recorded path: no model in the loop.

Under greedy decoding a round's outcome is fixed by the path the target takes. A draft is
accepted exactly when it equals the target's next token on that path, and a model drafter's
drafts stay on the path while its argmax, teacher-forced on the path, equals the path's next
token. So one plain run (the path) and the drafter teacher-forced along it (profile.py)
give, for every drafter, policy and gamma, the rounds a real run would make: `replay` runs
the real drafter and policy objects through the loop of core/generate.py with the target's
verify pass replaced by a comparison with the path, and the model drafter replaced by
`PathDrafter`, which reads the recorded rows instead of running the model.

Under sampling the replay reads the target's sampled path and its processed rows p too: the
draft at output position t is accepted with probability
    alpha_t = sum_x min(p_t(x), q_t(x))      a model draft (q_t: the drafter's row at t)
    alpha_t = p_t(x)                         a table draft of token x (a one-hot q)
drawn with one uniform per position, and `replay_sampled` averages REPLICAS such replays.
What this assumes: the context after an accepted draft or a correction is the recorded path
(in a real run the accepted text is another sample from the same distribution), and each
position's acceptance is independent of the others given the path.

Where greedy predictions can miss a real run (each is a near tie, or the path's end):
  * a drafter that scores every id (--draft-vocab 0) is recorded through its own forward
    fed one path token at a time, and a real run feeds it two tokens at once after a fully
    accepted round: a near-tied argmax can fall the other way. A restricted draft step
    (the default) computes every row it feeds as a one-row step (lean_step.py's row-wise
    attention, exact int8 kernels), and the profile records through that step, so its
    rows are the real run's bit for bit where those kernels run. A drafter with bfloat16
    twins (speed/twins.py) runs a catch-up of TWIN_ROWS ids or more after copies through
    them in one forward, which can round otherwise (the prompt goes through them in both);
  * after a draft that leaves the path, the real drafter continues on its own wrong path;
    the replay reads rows on the target's path there. That changes which later rows a
    policy sees (so where an adaptive policy stops), never what a round accepts;
  * past an end-of-sequence token the real target goes on scoring drafts the stop then
    cuts; the replay accepts nothing past the path's end.

The oracle (`OracleDrafter`) knows each round's run length: it drafts exactly the drafts
that will be accepted, or none where those would cost more than the rounds without drafts
they replace (c per drafter forward plus v(k + 1) against k + 1 single steps, each round
with the loop's own work: a drafter slower than the target never pays). So it does as well
as any policy that drafts nothing and, where accepted drafts pay, as every policy over
that drafter: the reference the summary measures them against.
It pays a drafter forward per kept draft and none for the catch-up of a round that drafts
nothing (a slight overestimate). Over model+lookup, profile.predict takes the better of it
and the oracle of the copies alone, which never pays the drafter's read of the prompt.

Knows nothing about models, timing or files: rows in, GenerationResults out.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass, field

import torch

from specbench.core.generate import GenerationConfig, GenerationResult, Stopper
from specbench.core.protocols import Draft, Drafter, ForwardPays, GammaPolicy, Keep, KeepDrafting
from specbench.core.sampling import SamplingConfig, greedy_tokens, logits_to_probs, sample_from_cdf
from specbench.core.stats import BONUS, CORRECTION, FIRST, RunStats, StepRecord
from specbench.drafters.model import draft_loop

REPLICAS = 16  # sampled replays averaged per prediction (each draws its own acceptances)


# ---------------------------------------------------------------------------- the recorded path


@dataclass
class RecordedPath:
    """What a prediction needs of one prompt (profile.py records it).

    output: the target's new tokens from a plain run (greedy, or sampled with the sweep's
    seed); draft_logits[t]: the drafter's logits for output[t] given prompt + output[:t]
    (teacher-forced; None without a drafter model); target_probs[t]: the target's processed
    p for output[t] (sampling only).
    """

    prompt_ids: list[int]
    output: list[int]
    sampling: SamplingConfig = field(default_factory=SamplingConfig)
    draft_logits: torch.Tensor | None = None  # [n, vocab]
    target_probs: torch.Tensor | None = None  # [n, vocab]
    limit: int = 1 << 30  # the target's context (core.generate.context_limit), as the real loop's stop rule reads it
    boundary: int | None = None  # core.generate.rope_boundary of the target, which bounds gamma as in the real loop
    draft_limit: int | None = None  # the drafter model's context: draft_logits stop there, as ModelDrafter's drafts do
    kept: int = 0  # prompt ids the drafter's cache starts with (its kept head: drafters.model.kept_length)
    # the drafter's processed rows, shared by every replay of this path (PathDrafter._row)
    draft_rows: dict = field(default_factory=dict, repr=False, compare=False)


class Acceptance:
    """Which drafts the target accepts on the path: greedy compares with the path's tokens;
    sampling draws against alpha_t with one uniform per output position (`uniforms`), so the
    verdict of a position is the same whoever asks (the oracle asks before the verify)."""

    def __init__(self, path: RecordedPath, uniforms: torch.Tensor | None = None):
        self.path = path
        self.uniforms = uniforms

    def accepted(self, position: int, draft: Draft) -> int:
        """How many of draft's tokens, proposed at output position `position`, are accepted."""
        output, n = self.path.output, 0
        for j, token in enumerate(draft.tokens.tolist()):
            t = position + j
            if t >= len(output):
                break
            row = None if draft.probs is None else draft.probs[j]
            if not self._accepts(t, token, row):
                break
            n += 1
        return n

    def _accepts(self, t: int, token: int, q_row: torch.Tensor | None) -> bool:
        if self.uniforms is None:
            return token == self.path.output[t]
        p_row = self.path.target_probs[t]
        alpha = float(p_row[token]) if q_row is None else float(torch.minimum(p_row, q_row).sum())
        return float(self.uniforms[t]) < alpha


# ---------------------------------------------------------------------------- the model drafter, replayed


class PathDrafter:
    """The model drafter (drafters/model.py) over recorded rows: the same feeds, cache
    bookkeeping and draws, no forward pass.

    Its cache accounting mirrors ModelDrafter's, so that Draft.feeds (what each forward
    would feed) and hence the drafter's cost come out as a real run's. With a restricted
    draft vocabulary (`vocab`, a VocabTracker) its rows are masked to the ids the real
    drafter would score at that round. Under sampling each replica draws its tokens from
    the rows with its own generator.
    """

    name = "model"

    def __init__(self, path: RecordedPath, vocab: VocabTracker | None = None):
        if path.draft_logits is None:
            raise ValueError("this path was recorded without a drafter model")
        self.path, self.vocab = path, vocab
        self.start(path.sampling, None)

    def start(self, sampling: SamplingConfig, generator: torch.Generator | None) -> None:
        self.sampling, self.generator = sampling, generator
        self.cache_len = self._context_len = 0
        self._started = False

    def prefill(
        self,
        prompt: torch.Tensor,  # [n] ids
        target_cache=None,
    ) -> None:
        self._observe(prompt)  # ModelDrafter.prefill feeds nothing: the first model round reads the prompt
        self.cache_len = self.path.kept  # ... after the kept head its cache starts with

    def _observe(self, context: torch.Tensor) -> None:
        if not self._started:
            self._started = True
            if self.vocab is not None:
                self.vocab.start(context.tolist())
        elif context.shape[0] > self._context_len and self.vocab is not None:
            self.vocab.observe(context[self._context_len :].tolist())
        self._context_len = context.shape[0]

    def propose(
        self,
        context: torch.Tensor,  # [n] ids
        max_tokens: int,
        keep_drafting: KeepDrafting,
        forward_pays: ForwardPays | None = None,
    ) -> Draft:
        """ModelDrafter.propose over the recorded rows: the same draft_loop, the same bound."""
        self._observe(context)
        draft = draft_loop(self, context, max_tokens, keep_drafting, self.path.draft_limit, forward_pays)
        if draft.feeds:  # the cache now holds the context and every draft fed
            self.cache_len = context.shape[0] + len(draft.feeds) - 1
        return draft

    def unread(
        self,
        context: torch.Tensor,  # [n] ids
    ) -> int:
        """The ids of context ([n]) a real drafter's cache would not have seen."""
        return context.shape[0] - self.cache_len

    def row(
        self,
        context: torch.Tensor,  # [n] ids
        step: int,
        previous: int | None,
    ) -> tuple[torch.Tensor, int]:
        """The recorded row for draft `step` after context ([n] ids), and its draw."""
        return self._row(context.shape[0] - len(self.path.prompt_ids) + step)

    def commit(self, n_accepted: int) -> None:
        self.cache_len = min(self._context_len + n_accepted, self.cache_len)

    def _row(self, t: int) -> tuple[torch.Tensor, int]:
        """q at output position t (the last recorded row past the path's end) and the token
        drawn from it: the argmax, or a draw from this replica's generator as sampling.sample
        draws (a real model drafter's rule).

        Rows are processed one at a time when first read, and kept on the path for every
        replay (16 replicas, every gamma and policy) under the vocabulary they were masked
        with (VocabTracker.key). Processing the whole [n, vocab] matrix at every change of
        the mask, in every replay, was most of a sampled prediction's time."""
        t = min(t, len(self.path.output) - 1)
        key = (self.sampling, None if self.vocab is None else self.vocab.key, t)
        entry = self.path.draft_rows.get(key)
        if entry is None:
            logits = self.path.draft_logits[t : t + 1]
            if self.vocab is not None and self.vocab.mask is not None:
                logits = logits.masked_fill(~self.vocab.mask, float("-inf"))
            entry = self.path.draft_rows[key] = [
                logits_to_probs(logits, self.sampling)[0],
                int(greedy_tokens(logits)[0]),
                None,
            ]
        probs, argmax, cdf = entry
        if self.sampling.greedy:
            return probs, argmax
        if cdf is None:  # the row's float64 CDF, summed once for all of its draws
            cdf = entry[2] = torch.cumsum(probs, dim=-1, dtype=torch.float64)
        return probs, sample_from_cdf(probs, cdf, self.generator)


class VocabTracker:
    """Which ids a restricted model drafter scores as a generation goes (speed/draft_vocab.py's
    RestrictedStep rule, without the head): ids below `limit`, the prompt's and keep_ids, and
    every id the context gains, until covers_output says the subset does not serve (then
    every id).

    key names the set across trackers of the same path: a replay's context is always a
    prefix of the path, so from the same limit and keep_ids the set only grows along it
    (the prompt's ids, then each id the path brings), and two such sets of the same size are
    the same set. key is (limit, keep_ids, that size), or "all" once every id is scored."""

    def __init__(self, limit: int, vocab_size: int, keep_ids: Iterable[int] = ()):
        self.limit, self.vocab_size, self.keep_ids = limit, vocab_size, tuple(keep_ids)
        self.mask: torch.Tensor | None = None
        self.size = vocab_size

    @property
    def key(self) -> tuple | str:
        return "all" if self.mask is None else (self.limit, self.keep_ids, self.size)

    def start(self, prompt: list[int]) -> None:
        from specbench.speed.draft_vocab import draft_token_ids

        ids = draft_token_ids(self.limit, self.vocab_size, [*prompt, *self.keep_ids])
        self.mask = None
        if ids.shape[0] < self.vocab_size:
            self.mask = torch.zeros(self.vocab_size, dtype=torch.bool)
            self.mask[ids] = True
            self.size = int(self.mask.sum())
        self.missed = self.output_tokens = 0

    def observe(self, new_ids: list[int]) -> None:
        from specbench.speed.draft_vocab import covers_output

        if self.mask is None:
            return
        fresh = {i for i in new_ids if 0 <= i < self.vocab_size and not self.mask[i]}
        self.output_tokens += len(new_ids)
        if fresh:
            self.mask[list(fresh)] = True
            self.size += len(fresh)
            self.missed += len(fresh)
        if not covers_output(self.missed, self.output_tokens):
            self.mask = None


# ---------------------------------------------------------------------------- the oracle


class OracleDrafter:
    """A drafter that knows the verdicts: it asks `inner` for up to max_tokens drafts (the
    policy is not asked) and keeps exactly those the target will accept, or none when
    pays(k, forwards) says that k drafts from that many drafter forwards cost more than
    they save (profile.oracle_pays; None: always keep them).

    Its forwards are those of a drafter run in the kept model rounds alone: a kept round of
    k drafts feeds, in its first forward, every context id such a drafter has not read (the
    prompt after the kept head, in the first; ids that rounds it dropped would have read),
    then k - 1 drafts.
    What `inner` fed in a round the oracle drops, or for a draft past the kept ones, is not
    read there: the next kept round pays for it."""

    def __init__(
        self,
        inner: Drafter,
        acceptance: Acceptance,
        prompt_len: int,
        pays: Callable[[int, int], bool] | None = None,
        kept: int = 0,
    ):
        self.inner, self.acceptance, self.prompt_len, self.pays = inner, acceptance, prompt_len, pays
        self.kept = kept  # prompt ids the drafter's cache starts with (RecordedPath.kept)
        self.name = f"oracle({inner.name})"
        self._read = kept  # context ids read by a drafter that ran the kept forwards alone

    def start(self, sampling: SamplingConfig, generator: torch.Generator | None) -> None:
        self.inner.start(sampling, generator)
        self._read = self.kept

    def prefill(
        self,
        prompt: torch.Tensor,  # [n] ids
        target_cache=None,
    ) -> None:
        self.inner.prefill(prompt, target_cache)

    def propose(
        self,
        context: torch.Tensor,  # [n] ids
        max_tokens: int,
        keep_drafting: KeepDrafting,
        forward_pays: ForwardPays | None = None,
    ) -> Draft:
        """Every draft inner makes (neither the policy's keep nor its price is asked), cut
        to what the target accepts; the feeds of the forwards those drafts take."""
        draft = self.inner.propose(context, max_tokens, lambda *_: Keep.YES)
        n = self.acceptance.accepted(context.shape[0] - self.prompt_len, draft)
        if n and self.pays is not None and not self.pays(n, len(draft.feeds[:n])):
            n = 0
        feeds = []
        if n and draft.feeds:  # a model round kept (a copy runs no forward)
            feeds = [context.shape[0] - self._read] + [1] * (n - 1)
            self._read = context.shape[0] + n - 1  # the last draft is never fed
        probs = None if draft.probs is None else draft.probs[:n]
        return Draft(draft.tokens[:n], probs, 0.0, feeds)

    def commit(self, n_accepted: int) -> None:
        self.inner.commit(n_accepted)


# ---------------------------------------------------------------------------- the loop


def replay(
    path: RecordedPath,
    drafter: Drafter,
    policy: GammaPolicy,
    config: GenerationConfig,
    acceptance: Acceptance,
    *,
    generator: torch.Generator | None = None,
) -> GenerationResult:
    """speculative_generate's loop (core/generate.py) on a recorded path: the same first
    pass, room, drafter and policy calls and stop rule; the verify pass is `acceptance`, and
    every token emitted is the path's. Returns the run's stats and StepRecords (no timings)."""
    output_path = path.output
    drafter.start(config.sampling, generator)
    stopper = Stopper(config, len(path.prompt_ids), path.limit, None, path.boundary)
    stats, steps, output = RunStats(), [], []
    seq = list(path.prompt_ids)
    drafter.prefill(torch.tensor(seq, dtype=torch.long))

    def emit(record: StepRecord, new: list[int]) -> str | None:
        kept, reason = stopper.cut(output, new)
        output.extend(kept)
        seq.extend(kept)
        record.tokens, record.stop_reason = kept, reason
        steps.append(record)
        return reason

    stats.target_forwards = stats.first_pass_tokens = 1
    reason = emit(StepRecord(0, 0, 0, [], [], [], [], 0, output_path[0], FIRST, 1.0, []), [output_path[0]])
    while reason is None and len(output) < len(output_path):
        position = len(output)
        gamma = min(policy.next_gamma(), stopper.room(len(seq), position))
        draft = drafter.propose(torch.tensor(seq, dtype=torch.long), gamma, policy.keep_drafting, policy.forward_pays)
        k = draft.tokens.shape[0]
        n = min(acceptance.accepted(position, draft), len(output_path) - 1 - position)
        drafter.commit(n)
        policy.update(n, k, output_path[position + n])
        stats.add_round(k, n, 0.0, 0.0)
        drafted = draft.tokens.tolist()
        kind = BONUS if n == k else CORRECTION
        record = StepRecord(
            stats.rounds,
            position,
            gamma,
            drafted,
            [None] * k,
            [],
            [],
            n,
            output_path[position + n],
            kind,
            1.0,
            [],
            drafter_feeds=list(draft.feeds),
            policy_info=policy.info(),
        )
        reason = emit(record, output_path[position : position + n + 1])
    stats.new_tokens = len(output)
    return GenerationResult(output, stats, steps, reason or "path")


def replay_sampled(
    path: RecordedPath, make: callable, config: GenerationConfig, replicas: int = REPLICAS, seed: int = 0
) -> list[GenerationResult]:
    """`replicas` replays of a sampled path, each with its own uniforms and draws (seeded
    from `seed`). make(acceptance) -> (drafter, policy), fresh for each replay."""
    results = []
    for r in range(replicas):
        generator = torch.Generator().manual_seed(seed * 100_003 + r)
        uniforms = torch.rand(len(path.output), generator=generator, dtype=torch.float64)
        acceptance = Acceptance(path, uniforms)
        drafter, policy = make(acceptance)
        results.append(replay(path, drafter, policy, config, acceptance, generator=generator))
    return results


# ---------------------------------------------------------------------------- per-position acceptance


def position_counts(steps: list[StepRecord]) -> dict[int, tuple[int, int]]:
    """{i: (reached, accepted)} over draft positions i = 1, 2, ...: a draft at position i is
    reached when drafts 1..i-1 of its round were all accepted (so the target judged it), and
    accepted when it was kept. reached/accepted is the acceptance at position i given the
    drafts before it were accepted."""
    counts: dict[int, list[int]] = {}
    for step in steps:
        if step.round == 0:
            continue
        k, n = len(step.draft_tokens), step.accepted
        for i in range(1, min(k, n + 1) + 1):
            entry = counts.setdefault(i, [0, 0])
            entry[0] += 1
            entry[1] += 1 if i <= n else 0
    return {i: (r, a) for i, (r, a) in sorted(counts.items())}
