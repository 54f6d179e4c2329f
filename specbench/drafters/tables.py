"""Drafters without a model: n-gram counts and prompt lookup, over incremental tables.

Both return probs=None, which verification treats as a one-hot q (still lossless), and keep
tables fed one token at a time, so a round costs O(new tokens + drafts), not O(context).
"""

from __future__ import annotations

import time
from collections.abc import Callable

import torch

from specbench.core.protocols import Draft, ForwardPays, Keep, KeepDrafting
from specbench.core.sampling import SamplingConfig

# ---------------------------------------------------------------------------- n-gram


class NgramTable:
    """Next-token counts after every context of min_n - 1 .. max_n - 1 tokens, fed one token
    at a time (add). next_token(tail) predicts by the longest context that has been seen.

    For each context the prediction is its most frequent continuation; among continuations
    with equal counts, the one that reached that count most recently. Contexts of different
    lengths are tuples of different lengths, so one dict holds every order.
    """

    def __init__(self, max_n: int = 4, min_n: int = 2):
        if not 2 <= min_n <= max_n:
            raise ValueError(f"n-gram orders need 2 <= min_n <= max_n, got min_n={min_n}, max_n={max_n}")
        self.max_n = max_n
        self.min_n = min_n
        self.counts: dict[tuple[int, ...], dict[int, int]] = {}
        self.best: dict[tuple[int, ...], int] = {}
        self.tail: list[int] = []  # the last max_n - 1 tokens added
        self.size = 0  # tokens added

    def add(self, token: int) -> None:
        """Count token after each context (of every order) that ends just before it."""
        for length in range(self.min_n - 1, min(self.max_n - 1, len(self.tail)) + 1):
            context = tuple(self.tail[len(self.tail) - length :])
            counts = self.counts.setdefault(context, {})
            counts[token] = counts.get(token, 0) + 1
            best = self.best.get(context)
            if best is None or counts[token] >= counts[best]:
                self.best[context] = token
        self.tail.append(token)
        if len(self.tail) > self.max_n - 1:
            del self.tail[0]
        self.size += 1

    def next_token(self, tail: list[int]) -> int | None:
        """The prediction after tail (its last max_n - 1 tokens count), longest context first."""
        for length in range(min(self.max_n - 1, len(tail)), self.min_n - 2, -1):
            token = self.best.get(tuple(tail[len(tail) - length :]))
            if token is not None:
                return token
        return None

    def predict(self, max_tokens: int) -> list[int]:
        """Up to max_tokens chained predictions after the tokens added so far.

        Each prediction joins the tentative tail for the next lookup (the counts do not
        change); the chain stops at the first tail that matches no context.
        """
        tail, out = list(self.tail), []
        for _ in range(max_tokens):
            token = self.next_token(tail)
            if token is None:
                break
            out.append(token)
            tail.append(token)
        return out


def ngram_predict(tokens: list[int], max_tokens: int, max_n: int = 4, min_n: int = 2) -> list[int]:
    """Chained n-gram predictions after tokens: the NgramDrafter's rule as a pure function.

    Count, for every context of 1..3 tokens (2-, 3-, 4-grams by default), which token
    followed it in tokens. Then predict by the longest context ending the sequence that has
    a count (most frequent continuation; ties go to the most recent), append the prediction
    and repeat, up to max_tokens, stopping when no context matches.

    Worked example, tokens = [1, 2, 3, 1, 2, 4, 1, 2], max_tokens = 3:
        4-gram (4, 1, 2): never followed by anything yet -> fall back to the 3-gram
        3-gram (1, 2):    followed by 3 once and 4 once -> 4 (the tie goes to the later)
        4-gram (1, 2, 4): followed by 1                 -> 1
        4-gram (2, 4, 1): followed by 2                 -> 2
        => [4, 1, 2]
    and ngram_predict([5, 6], 3) == [] (the context (6,) was never followed).
    """
    table = NgramTable(max_n, min_n)
    for token in tokens:
        table.add(token)
    return table.predict(max_tokens)


# ---------------------------------------------------------------------------- prompt lookup


def copy_from(tokens: list[int], start: int, max_tokens: int) -> list[int]:
    """Up to max_tokens tokens copied from tokens[start:], continuing into the copy itself.

    Positions past the end read from the copied output (as an LZ77 back-reference does), so
    a match d tokens back extends the sequence with period d: copy_from([7, 8], 0, 5) ==
    [7, 8, 7, 8, 7]. start must be < len(tokens).
    """
    n = len(tokens)
    out: list[int] = []
    for i in range(max_tokens):
        j = start + i
        out.append(tokens[j] if j < n else out[j - n])
    return out


def lookup_continuation(tokens: list[int], max_tokens: int, max_n: int = 3, min_n: int = 1) -> list[int]:
    """Prompt lookup: what followed the latest earlier occurrence of tokens' last n tokens.

    For n = min(max_n, len(tokens) - 1) down to min_n: find the largest start < len - n with
    tokens[start : start + n] == tokens[-n:] (an occurrence followed by at least one token);
    the first n that has one wins and the proposal is copy_from(tokens, start + n,
    max_tokens). No occurrence for any n gives [].

    Worked example, tokens = [4, 5, 6, 9, 4, 5, 7, 4, 5], max_tokens = 3:
        n = 3, suffix (7, 4, 5): no earlier occurrence
        n = 2, suffix (4, 5):    at starts 0 and 4; the latest is 4, followed by 7
        => copy from position 6: [7, 4, 5]   (the copy runs into the suffix itself)
    HF's PromptLookupCandidateGenerator takes the first occurrence instead and stops at the
    end of the context.
    """
    length = len(tokens)
    for n in range(min(max_n, length - 1), min_n - 1, -1):
        suffix = tokens[length - n :]
        for start in range(length - n - 1, -1, -1):
            if tokens[start : start + n] == suffix:
                return copy_from(tokens, start + n, max_tokens)
    return []


class LookupIndex:
    """lookup_continuation kept incrementally: for every n-gram (min_n <= n <= max_n) the
    position of the token that followed its latest occurrence. add is O(max_n), a lookup
    O(max_n + max_tokens), whatever the context's length."""

    def __init__(self, max_n: int = 3, min_n: int = 1):
        if not 1 <= min_n <= max_n:
            raise ValueError(f"lookup sizes need 1 <= min_n <= max_n, got min_n={min_n}, max_n={max_n}")
        self.max_n = max_n
        self.min_n = min_n
        self.tokens: list[int] = []
        self.follower: dict[tuple[int, ...], int] = {}

    @property
    def size(self) -> int:
        return len(self.tokens)

    def add(self, token: int) -> None:
        """The n-grams ending just before token are now followed, at token's position."""
        position = len(self.tokens)
        for n in range(self.min_n, min(self.max_n, position) + 1):
            self.follower[tuple(self.tokens[position - n :])] = position
        self.tokens.append(token)

    def predict(self, max_tokens: int) -> list[int]:
        """lookup_continuation(tokens added so far, max_tokens, max_n, min_n)."""
        length = len(self.tokens)
        for n in range(min(self.max_n, length - 1), self.min_n - 1, -1):
            start = self.follower.get(tuple(self.tokens[length - n :]))
            if start is not None:
                return copy_from(self.tokens, start, max_tokens)
        return []


# ---------------------------------------------------------------------------- model-free drafters


class TableDrafter:
    """A drafter without a model: an incremental table (NgramTable or LookupIndex) over the
    context, and probs=None.

    The table only ever holds tokens of the context (propose feeds it the tokens added since
    the last call); drafts never enter it. So commit(n_accepted) has nothing to roll back:
    the accepted drafts and the target's next token arrive with the next context. If a
    context is shorter than what was fed, or holds another token at the last fed position,
    the table is rebuilt from it. Only that one token is compared, to keep a round O(1) in
    the context's length: a caller that rewrites earlier tokens must call start().
    """

    def __init__(self, name: str, make_table: Callable[[], NgramTable | LookupIndex]):
        self.name = name
        self._make_table = make_table
        self.start(SamplingConfig(), None)

    def start(self, sampling: SamplingConfig, generator: torch.Generator | None) -> None:
        """Forget the last generation. Sampling and generator are unused: drafts are
        deterministic, and the one-hot q they imply needs no processor."""
        self.table = self._make_table()
        self._last = -1  # the last token fed to the table

    def prefill(
        self,
        prompt: torch.Tensor,  # [n] ids
        target_cache=None,
    ) -> None:
        self._feed(prompt)

    def propose(
        self,
        context: torch.Tensor,  # [n] ids
        max_tokens: int,
        keep_drafting: KeepDrafting,
        forward_pays: ForwardPays | None = None,
    ) -> Draft:
        """The table's drafts, as the policy keeps them (no forward: forward_pays is never asked)."""
        start = time.perf_counter()
        return table_draft(self.predict(context, max_tokens), keep_drafting, context.device, start)

    def predict(
        self,
        context: torch.Tensor,  # [n] ids
        max_tokens: int,
    ) -> list[int]:
        """The table's prediction after context, before the policy has its say."""
        self._feed(context)
        return self.table.predict(max_tokens)

    def _feed(self, context: torch.Tensor) -> None:
        """Add the context's tokens the table has not seen (all of them after a mismatch)."""
        seen = self.table.size
        if context.shape[0] < seen or (seen and int(context[seen - 1]) != self._last):
            self.table, seen = self._make_table(), 0
        new = context[seen:].tolist()
        for token in new:
            self.table.add(token)
        if new:
            self._last = new[-1]

    def commit(self, n_accepted: int) -> None:
        """No-op: the table holds only context tokens (see the class docstring)."""


def table_draft(predicted: list[int], keep_drafting: KeepDrafting, device: torch.device, start: float) -> Draft:
    """A Draft of the predicted tokens the policy keeps (probs=None: no q to show it), timed
    from start."""
    tokens: list[int] = []
    for step, token in enumerate(predicted):
        say = keep_drafting(step, None, token)
        if not say:
            break
        tokens.append(token)
        if say == Keep.LAST:
            break
    ids = torch.tensor(tokens, dtype=torch.long, device=device)
    return Draft(ids, None, time.perf_counter() - start)


class NgramDrafter(TableDrafter):
    """The "ngram" drafter: chained ngram_predict over an incremental NgramTable.

    Example:
        >>> drafter = NgramDrafter()
        >>> draft = drafter.propose(torch.tensor([1, 2, 3, 1, 2]), 3, lambda *_: Keep.YES)
        >>> draft.tokens.tolist(), draft.probs   # (1, 2) was followed by 3, (2, 3) by 1 ...
        ([3, 1, 2], None)
    """

    def __init__(self, max_n: int = 4, min_n: int = 2):
        NgramTable(max_n, min_n)  # check the orders now, not at the first propose
        super().__init__("ngram", lambda: NgramTable(max_n, min_n))


class PromptLookupDrafter(TableDrafter):
    """The "prompt-lookup" drafter: lookup_continuation over an incremental LookupIndex.

    Example: the context's last 3 tokens (8, 5, 6) never occurred before, its last 2 (5, 6)
    did, at position 0 and followed by 7, so the draft copies from there on (and a policy
    that says Keep.NO at step 2 cuts it to two tokens):
        >>> drafter = PromptLookupDrafter()
        >>> context = torch.tensor([5, 6, 7, 8, 5, 6])  # [n] ids
        >>> drafter.propose(context, 3, lambda *_: Keep.YES).tokens.tolist()
        [7, 8, 5]
        >>> drafter.propose(context, 3, lambda step, q, token: Keep(step < 2)).tokens.tolist()
        [7, 8]
    """

    def __init__(self, max_n: int = 3, min_n: int = 1):
        LookupIndex(max_n, min_n)
        super().__init__("prompt-lookup", lambda: LookupIndex(max_n, min_n))
