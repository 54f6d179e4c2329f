"""The model drafter: a small causal LM drafting over its own KV cache, and model+lookup.

ModelDrafter feeds only what its cache has not seen (the prompt on its first round, which
is not read ahead: see prefill; then what the target accepted or emitted since), draws each
draft with the target's sampling processor, and crops its cache back on commit. Each
forward is its draft step's (step.py): the model's own forward unless a faster step is
plugged in (make_drafter plugs in specbench/speed's for --draft-vocab). LookupFirstDrafter
copies from the context when the context repeats itself and asks the model otherwise.
Neither knows about the target, about verification, or about how a step makes its logits.

A drafter model can keep a head (keep_head): the ids every prompt is expected to begin with,
a chat template's opening (models/text.py's template_head; 24 ids for the default pair).
The first generation that reads a prompt beginning with them reads them as it would have,
and keeps its cache over them; every later generation of that model starts from a copy of
it and reads only the rest of its prompt. What a server does with a system prompt: the
work is saved once per loaded drafter, not moved, and a one-shot run still pays all of it.
The cache a drafter starts from never changes a verdict, only what its first forward costs.

The draft loop itself (draft_loop) is one function for every drafter that drafts row by
row: it asks a RowSource for each draft's row and token, and the keep_drafting callback
whether to go on. ModelDrafter's source runs a forward; the sweep's replay (bench/replay.py)
reads a recorded path. One loop, so a replay's feeds, drafts and stops are a real run's.
"""

from __future__ import annotations

import time
import weakref
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Protocol

import torch

from specbench.core.cache import cache_length, copy_cache, crop_cache, new_cache
from specbench.core.generate import context_limit
from specbench.core.protocols import Draft, ForwardPays, Keep, KeepDrafting
from specbench.core.sampling import SamplingConfig, choose
from specbench.drafters.step import DraftStep, ModelForward
from specbench.drafters.tables import PromptLookupDrafter, table_draft


def drafts_within(limit: int, context_len: int) -> int:
    """How many drafts a model that attends over `limit` positions can make after a context
    of context_len ids: draft j is read at position context_len + j - 1 (the last one is
    never fed). ModelDrafter drafts no more; a sweep's replay and its recorded rows follow."""
    return limit - context_len + 1


def common_prefix(a: Sequence[int], b: Sequence[int]) -> int:
    """Length of the longest common prefix of two id lists."""
    n = min(len(a), len(b))
    for i in range(n):
        if a[i] != b[i]:
            return i
    return n


@dataclass
class KeptHead:
    """The ids a drafter model keeps read (keep_head) and, once a generation has read them
    all, its cache over them (a DynamicCache, copied into each later generation's)."""

    ids: tuple[int, ...]
    cache: object | None = None


_HEADS: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()  # drafter model -> KeptHead


def keep_head(model, ids: Sequence[int], cache=None) -> None:
    """Let `model`'s drafters keep their cache over ids between generations (none: keep
    nothing), starting from `cache` (over exactly ids: one kept from an earlier process)
    or, by default, from nothing. Any cache kept so far is dropped: call it again when the
    model's forward changes (its kernels), and the next generation reads the head anew."""
    if len(ids):
        if cache is not None and cache_length(cache) != len(ids):
            raise ValueError(f"a kept head of {len(ids)} ids needs a cache over {len(ids)}, not {cache_length(cache)}")
        _HEADS[model] = KeptHead(tuple(int(i) for i in ids), cache)
    else:
        _HEADS.pop(model, None)


def kept_head(model) -> tuple[tuple[int, ...], object | None]:
    """The head `model` keeps and its cache over it (None until a generation has read it);
    ((), None) without a head."""
    head = _HEADS.get(model)
    return (head.ids, head.cache) if head is not None else ((), None)


def kept_length(model, prompt: Sequence[int]) -> int:
    """How many of prompt's ids a drafter of `model` starts a generation with once its head is
    read: those prompt shares with the head, less the last (the first draft is read from
    the prompt's last row, so its first forward feeds at least that). 0 without a head."""
    head = _HEADS.get(model)
    if head is None or not len(prompt):
        return 0
    return min(common_prefix(head.ids, prompt), len(prompt) - 1)


def read_length(model, prompt: Sequence[int]) -> int:
    """How many of prompt's ids a drafter of `model` starts this generation with already
    read: kept_length once a generation has read the head (its cache is kept), else 0 (this
    generation reads the head with the rest of the prompt)."""
    return kept_length(model, prompt) if kept_head(model)[1] is not None else 0


class RowSource(Protocol):
    """Where draft_loop's rows come from (the two methods HF's candidate generators split
    into candidates and their update, here per row):

    unread(context)                 how many ids of context ([n]) the first forward of the
                                    round feeds: those its cache has not seen;
    row(context, step, previous)    q for draft `step` ([vocab]) and the token drawn from
                                    it; previous: the draft before it (None at step 0, when
                                    the unread part of context is fed).
    """

    def unread(
        self,
        context: torch.Tensor,  # [n] ids
    ) -> int: ...

    def row(
        self,
        context: torch.Tensor,  # [n] ids
        step: int,
        previous: int | None,
    ) -> tuple[torch.Tensor, int]: ...


def draft_loop(
    source: RowSource,
    context: torch.Tensor,  # [n] ids
    max_tokens: int,
    keep_drafting: KeepDrafting,
    limit: int | None = None,
    forward_pays: ForwardPays | None = None,
) -> Draft:
    """Draft up to max_tokens after context ([n] ids), no more than a model attending over
    `limit` positions can (drafts_within; None: no bound), one row at a time from source,
    while forward_pays(step, feed) agrees to each row's forward before it runs and
    keep_drafting(step, row, token) keeps its draft after. Draft.feeds counts what each
    forward fed; the tokens are on context's device and seconds is 0 (the caller times
    the round)."""
    if limit is not None:
        max_tokens = min(max_tokens, drafts_within(limit, context.shape[0]))
    tokens: list[int] = []
    rows: list[torch.Tensor] = []
    feeds: list[int] = []
    fed, previous = (source.unread(context) if max_tokens > 0 else 0), None
    for step in range(max_tokens):
        if forward_pays is not None and not forward_pays(step, fed):
            break
        probs, token = source.row(context, step, previous)
        feeds.append(fed)
        say = keep_drafting(step, probs, token)
        if not say:
            break
        tokens.append(token)
        rows.append(probs)
        if say == Keep.LAST:
            break
        fed, previous = 1, token
    probs = torch.stack(rows) if rows else None
    return Draft(torch.tensor(tokens, dtype=torch.long, device=context.device), probs, 0.0, feeds)


class ModelDrafter:
    """A small causal LM that drafts autoregressively over its own DynamicCache.

    Every forward goes through `step` (a DraftStep, default ModelForward: the model's own
    forward). The drafter tells the step about the context: start() with the prompt on a
    generation's first call, observe() with the ids the context gains after that.
    """

    def __init__(self, model, name: str = "model", step: DraftStep | None = None):
        self.model = model
        self.name = name
        self.device = next(model.parameters()).device
        self.step = step if step is not None else ModelForward()
        self.limit = context_limit(model)  # a drafter may attend over less than the target: it stops drafting there
        self.start(SamplingConfig(), None)

    def start(self, sampling: SamplingConfig, generator: torch.Generator | None) -> None:
        self.sampling = sampling
        if generator is not None and generator.device != self.device:
            # a generator cannot draw on another device: derive one here, still seeded
            generator = torch.Generator(self.device).manual_seed(generator.initial_seed() + 1)
        self.generator = generator
        self.cache = new_cache(self.model)
        self._context_len = 0  # length of the context at the last propose (or the prompt's)
        self._step_started = False  # whether the step has had this generation's prompt

    def _observe(self, context: torch.Tensor) -> None:
        """Tell the step about the context ([n] ids): start it with the prompt on the first
        call of a generation; later, pass on the ids the context gained since."""
        if not self._step_started:
            self._step_started = True
            self.step.start(self.model, context)
        elif context.shape[0] > self._context_len:
            self.step.observe(context[self._context_len :])
        self._context_len = context.shape[0]

    def prefill(
        self,
        prompt: torch.Tensor,  # [n] ids
        target_cache=None,
    ) -> None:
        """Tell the step about the prompt, and feed nothing yet: the cache reads the prompt in
        the first round that drafts with the model (its first forward feeds everything
        unread), so a generation that never needs the model never pays for its prefill,
        and one that does pays it as that round's draft time. With a kept head already read,
        the cache starts as a copy of the head's over the ids the prompt shares with it."""
        self._observe(prompt)
        kept = read_length(self.model, prompt.tolist())
        if kept:
            self.cache = copy_cache(kept_head(self.model)[1], kept)

    @torch.inference_mode()
    def propose(
        self,
        context: torch.Tensor,  # [n] ids
        max_tokens: int,
        keep_drafting: KeepDrafting,
        forward_pays: ForwardPays | None = None,
    ) -> Draft:
        """Up to max_tokens drafts after context ([n] ids), each a forward of this model."""
        start = time.perf_counter()
        self._observe(context)  # also moves _context_len on to this context
        draft = draft_loop(self, context, max_tokens, keep_drafting, self.limit, forward_pays)
        draft.seconds = time.perf_counter() - start
        return draft

    def unread(
        self,
        context: torch.Tensor,  # [n] ids
    ) -> int:
        """The ids of context ([n]) the cache has not seen: the prompt on the first round,
        then the tokens the target accepted or emitted since the last round."""
        return context.shape[0] - cache_length(self.cache)

    def row(
        self,
        context: torch.Tensor,  # [n] ids
        step: int,
        previous: int | None,
    ) -> tuple[torch.Tensor, int]:
        """Feed the unread context (step 0) or the previous draft; q [vocab] and its draw."""
        if previous is None and cache_length(self.cache) == 0:
            self._read_head(context)
        fed = context[cache_length(self.cache) :] if previous is None else torch.tensor([previous], device=self.device)
        token, probs = choose(self._forward(fed), self.sampling, self.generator)
        return probs, token

    def _read_head(
        self,
        context: torch.Tensor,  # [n] ids
    ) -> None:
        """Where the model keeps a head not yet read and context begins with all of it (and
        goes on past it), feed the head alone first and keep a copy of the cache over it;
        the rest of context is then fed as usual. The forward is the one the prompt's read
        would have been, in two calls."""
        head = _HEADS.get(self.model)
        if head is None or head.cache is not None:
            return
        n = len(head.ids)
        if context.shape[0] <= n or tuple(context[:n].tolist()) != head.ids:
            return
        self._forward(context[:n])
        head.cache = copy_cache(self.cache, n)

    def _forward(self, new_tokens: torch.Tensor) -> torch.Tensor:
        """Logits for the next token after feeding new_tokens ([n] ids) -> [vocab]."""
        return self.step(self.model, new_tokens.to(self.device).unsqueeze(0), self.cache)

    def commit(self, n_accepted: int) -> None:
        # The cache holds the context plus every draft except the last (never fed), and a
        # draft step that was stopped by keep_drafting still fed its input. Keep the context
        # and the accepted drafts that were fed.
        keep = min(self._context_len + n_accepted, cache_length(self.cache))
        crop_cache(self.cache, keep)


# ---------------------------------------------------------------------------- model + lookup


class LookupFirstDrafter:
    """The "model+lookup" drafter: copy from the context when it repeats itself, else ask the
    model.

    Each round first looks for an earlier occurrence of the context's last 3 tokens
    (LookupIndex with min_n = max_n = 3: a 1- or 2-token match is too often a coincidence).
    If there is one, the round drafts what followed it, with probs=None (a one-hot q, as
    the prompt-lookup drafter), at no forward pass; otherwise the model drafter drafts as
    usual. Summaries, edits of given code and structured output copy long runs of their
    prompt, and there the model's drafts cost c each while a copy costs nothing.

    Losslessness is each round's own: a round is wholly a model round or wholly a copy. The
    model drafter is not told about copy rounds: it neither proposes nor commits in them,
    so its cache stays a prefix of the context, and its next propose feeds everything it
    missed in one forward.
    """

    name = "model+lookup"

    def __init__(self, model: ModelDrafter, match: int = 3):
        self.model = model
        self.lookup = PromptLookupDrafter(max_n=match, min_n=match)
        self._model_round = False

    def start(self, sampling: SamplingConfig, generator: torch.Generator | None) -> None:
        self.model.start(sampling, generator)
        self.lookup.start(sampling, generator)
        self._model_round = False

    def prefill(
        self,
        prompt: torch.Tensor,  # [n] ids
        target_cache=None,
    ) -> None:
        self.model.prefill(prompt, target_cache)
        self.lookup.prefill(prompt)

    def propose(
        self,
        context: torch.Tensor,  # [n] ids
        max_tokens: int,
        keep_drafting: KeepDrafting,
        forward_pays: ForwardPays | None = None,
    ) -> Draft:
        start = time.perf_counter()
        copy = self.lookup.predict(context, max_tokens)
        self._model_round = not copy
        if self._model_round:
            return self.model.propose(context, max_tokens, keep_drafting, forward_pays)
        return table_draft(copy, keep_drafting, context.device, start)

    def commit(self, n_accepted: int) -> None:
        if self._model_round:
            self.model.commit(n_accepted)
