"""A model drafter that scores only part of the vocabulary (`--draft-vocab N`).

Why: a small drafter's output head (vocabulary x hidden; 151,936 x 896 for Qwen2.5-0.5B) is
a large share of the weights a draft step reads, yet nearly every token it drafts comes from
a small frequent subset. A byte-pair tokenizer numbers its merges in the order it learned
them, most frequent first, so the first N ids are a good data-free choice of that subset. To
them we add every id of the prompt (names and words a reply copies), the end-of-sequence
ids, and every id the output produces as it goes: tokens such as Qwen's "```" (id 73594) or
LaTeX's "\\[" (78045) lie past 65536 yet recur within one reply.

Lossless: q is the drafter's distribution over the kept ids and zero elsewhere. Greedy
verification compares a draft with the target's argmax, whatever the drafter could score;
rejection sampling accepts x with min(1, p(x)/q(x)) and on a rejection samples from
max(0, p - q), which holds all of p's mass outside the subset. The target is untouched.
When the subset does not cover a reply (text in another script or language), the drafter
puts much of its mass outside it and acceptance falls, so it goes back to every id for the
rest of the generation: once its output has brought in at least MISSES_TO_WIDEN ids the
subset lacked, and more than MISS_SHARE_TO_WIDEN of its tokens (`covers_output`).

The logits come from the bare head weights: a model that post-processes its logits (Gemma
2's soft-capping) drafts from a slightly different q, which is still lossless.

RestrictedStep is the model drafter's draft step (drafters/step.py) that does all this:
make_drafter plugs it in for vocab_limit > 0. It builds a RestrictedHead (restricted_head)
once per generation from the prompt, adds the ids the context gains (or drops the head when
covers_output says so), and scores the model's last hidden state with it (restricted_logits,
through lean_step.py's forward where the model's layout allows). Knows nothing about
decoding beyond that contract. The default limit, 65536 ids, gives a higher speedup than the
whole vocabulary (a quarter of a draft step's bytes is the head) and than 32768 ids, which
miss ids that some outputs need (LaTeX in math).

A q4k drafter's int8 head also holds its first rows, those ids, as Q4_K blocks
(models/build.py), and every way of scoring an id below their count goes through them
(q4k_head_rows): 4.5 bits a weight where int8 reads 8, so a draft step reads some 40% fewer
head bytes. Its q is whatever it computes, so this is as lossless as the int8 head; the
argmax moves only at near ties, where the int8 rows' own rounding already decides.
"""

from __future__ import annotations

from collections.abc import Iterable

import torch
import torch.nn.functional as F

from specbench.core.cache import cache_arg, new_cache
from specbench.speed.gguf_blocks import Q4K_BUFFERS, TWIN_ROWS, Q4KLinear, q4k_linear
from specbench.speed.lean_step import MAX_LEAN_ROWS, lean_decoder
from specbench.speed.quantize import Int8Linear, dequantize_rows, fast_int8_linear, runs_int8
from specbench.speed.twins import has_twins


class RestrictedStep:
    """The model drafter's draft step over part of the vocabulary (drafters/step.py's
    contract; make_drafter plugs it in for vocab_limit > 0).

    start builds the generation's RestrictedHead over ids below vocab_limit, the prompt's and
    keep_ids (no head when that is every id); observe keeps the ids the context gains, and
    drops the head once covers_output fails; a step runs restricted_logits through the head,
    or through the model's whole head on the same body when there is none.
    """

    def __init__(self, vocab_limit: int, keep_ids: Iterable[int] = ()):
        if vocab_limit < 1:
            raise ValueError(f"a draft vocabulary needs at least one token, got {vocab_limit}")
        self.vocab_limit = vocab_limit
        self.keep_ids = tuple(int(i) for i in keep_ids)  # kept whatever the prompt (the EOS ids)
        self.head: RestrictedHead | None = None
        self.missed = self.output_tokens = 0  # ids the output needed beyond the subset, of how many

    @classmethod
    def for_model(cls, model, vocab_limit: int, keep_ids: Iterable[int] = ()) -> RestrictedStep:
        """A RestrictedStep for this model; a model without a plain output head is refused
        now (output_head's ValueError), not mid-generation."""
        output_head(model)
        return cls(vocab_limit, keep_ids)

    def start(
        self,
        model,
        prompt: torch.Tensor,  # [n] ids
    ) -> None:
        self.head = restricted_head(model, self.vocab_limit, [*prompt.tolist(), *self.keep_ids])
        self.missed = self.output_tokens = 0

    def observe(
        self,
        new_ids: torch.Tensor,  # [m] ids
    ) -> None:
        if self.head is None:
            return
        self.missed += self.head.add(new_ids)
        self.output_tokens += new_ids.shape[0]
        if not covers_output(self.missed, self.output_tokens):
            self.head = None  # the reply lives outside the subset: score every id from now on

    def __call__(
        self,
        model,
        input_ids: torch.Tensor,  # [1, n] ids
        cache,
    ) -> torch.Tensor:
        """input_ids [1, n] after the cache -> the next token's logits [vocab]; after the
        head is dropped, the whole head on the same body (path_logits' arithmetic)."""
        return restricted_logits(model, self.head, input_ids, cache)[0]


# ---------------------------------------------------------------------------- the pieces


def draft_token_ids(limit: int, vocab_size: int, extra: Iterable[int] = ()) -> torch.Tensor:
    """The ids a restricted drafter scores: 0 .. limit-1 and every extra id below vocab_size,
    sorted and without repeats ([n] long). draft_token_ids(4, 10, [7, 2, 12]) -> [0, 1, 2, 3, 7]."""
    if limit < 1:
        raise ValueError(f"a draft vocabulary needs at least one token, got {limit}")
    head = torch.arange(min(limit, vocab_size), dtype=torch.long)
    more = torch.tensor(sorted({int(i) for i in extra if limit <= int(i) < vocab_size}), dtype=torch.long)
    return torch.cat([head, more])


MISSES_TO_WIDEN = 3  # ids the output needed that the subset lacked, before giving up on it
MISS_SHARE_TO_WIDEN = 0.05  # ... and as a share of the output's tokens


def covers_output(missed: int, tokens: int) -> bool:
    """Whether a subset that lacked `missed` distinct ids over `tokens` output tokens still
    serves: a few misses (a code fence, a LaTeX bracket) are kept and cost one round each;
    a steady stream means the reply lives outside the subset. covers_output(2, 20) is True,
    covers_output(3, 40) False, covers_output(3, 60) True."""
    return missed < MISSES_TO_WIDEN or missed <= MISS_SHARE_TO_WIDEN * tokens


def output_head(model) -> torch.nn.Module:
    """The model's output head (hidden -> vocab logits): a module with a 2-d weight and maybe
    a bias, or an int8 head (quantize.Int8Linear); a one-line error if it has neither."""
    head = model.get_output_embeddings() if hasattr(model, "get_output_embeddings") else None
    if isinstance(head, Int8Linear):
        return head
    if head is None or getattr(head, "weight", None) is None or head.weight.dim() != 2:
        raise ValueError(
            f"--draft-vocab needs a drafter with a plain linear output head ({type(model).__name__} has none); "
            "pass --draft-vocab 0"
        )
    return head


def restricted_head(model, limit: int, extra: Iterable[int] = ()) -> RestrictedHead | None:
    """A RestrictedHead over the model's head for draft_token_ids(limit, ..., extra), or None
    when those ids are the whole vocabulary (the model's own head does the same, cheaper).
    An int8 head (quantize.py) lends its int8 rows too."""
    head = output_head(model)
    vocab = head.out_features if isinstance(head, Int8Linear) else head.weight.shape[0]
    ids = draft_token_ids(limit, vocab, extra)
    if ids.shape[0] >= vocab:
        return None
    return RestrictedHead(head, ids)


def restricted_logits(
    model,
    head: RestrictedHead | None,
    input_ids: torch.Tensor,  # [1, n] ids
    cache,
    lean: bool = True,
) -> torch.Tensor:
    """Feed input_ids ([1, n]) over the cache through draft_hidden, then the restricted head
    (None: the model's whole head, through its int8 rows where it has them): the last
    position's logits, [1, vocab]."""
    hidden = draft_hidden(model, input_ids, cache, lean)[0, -1:]
    return head(hidden) if head is not None else full_head_logits(model, hidden)


def draft_hidden(
    model,
    input_ids: torch.Tensor,  # [1, n] ids
    cache,
    lean: bool = True,
) -> torch.Tensor:
    """The decoder's final hidden states for input_ids ([1, n]) over the cache -> [1, m,
    hidden], m the rows of the last call. Through lean_step.py's forward where the layout
    allows and lean is True, so that every row is computed as a one-row step computes it
    (what the sweep's profile, which feeds one token a step, relies on to predict real
    rounds): with native layers (fused_step.py) any number of rows in one call, the prompt
    and the ids a deferred first model round reads after it included; in PyTorch a step of
    at most MAX_LEAN_ROWS rows, or any number over a cache in calls of that many (a round's
    catch-up after copied drafts), a longer prompt through HF's decoder in one call. A call
    of TWIN_ROWS ids or more for a drafter with bfloat16 twins (twins.py) goes through HF's
    decoder, whose layers run it through the twins: faster, not the same bits. Off the CPU
    there is no lean decoder (lean_decoder), so every call goes through HF's decoder at once."""
    decoder = lean_decoder(model) if lean else None
    n = input_ids.shape[1]
    twins = n >= TWIN_ROWS and has_twins(model)
    if decoder is not None and decoder.fused is not None and not twins:
        return decoder(input_ids, cache)
    rows_alone = cache.get_seq_length() > 0 and not twins
    if decoder is not None and (n <= MAX_LEAN_ROWS or rows_alone):
        for start in range(0, n, MAX_LEAN_ROWS):
            hidden = decoder(input_ids[:, start : start + MAX_LEAN_ROWS], cache)
        return hidden
    body = model.get_decoder()
    return body(input_ids=input_ids, **cache_arg(body, cache), use_cache=True).last_hidden_state


def full_head_logits(
    model,
    hidden: torch.Tensor,  # [rows, hidden]
) -> torch.Tensor:
    """hidden [rows, hidden] through the model's whole head: an int8 head's rows through
    fast_int8_linear (a restricted head's logit of an id is this one's, bit for bit), else
    the head module."""
    head = output_head(model)
    low = q4k_head_rows(head)
    if low is not None:  # ids below its rows through them, as a RestrictedHead scores them
        rows, n = hidden.to(torch.bfloat16), low.out_features
        if n == head.out_features:
            return q4k_linear(rows, low)
        if runs_int8(rows):
            bias = None if head.bias is None else head.bias[n:]
            high = fast_int8_linear(rows, head.qweight[n:], head.scales[n:], bias)
        else:
            high = head(rows)[..., n:]
        return torch.cat([q4k_linear(rows, low), high], dim=-1)
    if isinstance(head, Int8Linear) and runs_int8(rows := hidden.to(torch.bfloat16)):
        return fast_int8_linear(rows, head.qweight, head.scales, head.bias)
    return head(hidden)


def q4k_head_rows(head: torch.nn.Module) -> Q4KLinear | None:
    """The Q4_K blocks an int8 head holds of its first rows (a q4k drafter's, models/build.py),
    as a layer over views of them; None where it holds none. Every way an id below their
    count is scored (a RestrictedHead, the whole head, path_logits) goes through them, so an
    id gets the same bits whichever way scores it."""
    blocks = head.q4k_rows() if isinstance(head, Int8Linear) else None
    if blocks is None:
        return None
    made = head.__dict__.get("_q4k_layer")  # in __dict__, not a submodule: no state_dict entry
    if made is None or made.qs.data_ptr() != blocks["qs"].data_ptr():
        bias = None if head.bias is None else head.bias[: blocks["d"].shape[0]]
        made = head.__dict__["_q4k_layer"] = Q4KLinear(blocks, bias, head.in_features)
    return made


def path_logits(model, prompt_ids: list[int], output: list[int]) -> torch.Tensor:
    """The logits a RestrictedStep computes for output[t] given prompt + output[:t], over
    every id ([n, vocab], float32): the prompt in one call, then one token a step, as
    draft_hidden computes every row a generation feeds."""
    device = next(model.parameters()).device
    cache = new_cache(model)
    tokens = [list(prompt_ids)] + [[t] for t in output[:-1]]
    rows = [
        full_head_logits(model, draft_hidden(model, torch.tensor([ids], device=device), cache)[0, -1:])[0]
        for ids in tokens
    ]
    return torch.stack(rows).float().cpu()


class RestrictedHead:
    """Logits of the kept ids through the model's own head weights, the lowest finite value
    (probability exactly 0 after softmax) everywhere else.

    The ids it starts with that run unbroken from 0 (ids below the limit: most of them) are
    views of the head's first rows, never copied, so a generation's head is ready at once;
    the other ids it starts with, and every id add(ids) keeps later, live in a second, small
    weight, so an id the output gains costs a copy of the added rows only. A call reads only
    kept rows.

    Over an Int8Linear head it scores a drafter step (up to MAX_INT8_ROWS rows) through the
    kept int8 rows (quantize.fast_int8_linear), as the full int8 head scores through its own:
    dequantized bf16 rows are twice the bytes, and a draft step is bound by reading weights
    (dev/drafter_step.py times the step both ways). A call of more rows (which a draft step
    never makes) runs through dequantized rows, made then and kept. Ids below the rows a q4k
    drafter's head holds as Q4_K blocks (q4k_head_rows) go through those blocks instead (4.5
    bits a weight against 8), in calls of any number of rows.
    """

    def __init__(self, head: torch.nn.Module, ids: torch.Tensor):
        self.int8 = head if isinstance(head, Int8Linear) else None
        self.low = q4k_head_rows(head)  # ids below low_count: through Q4_K blocks
        self.low_count = 0 if self.low is None else self.low.out_features
        self.full_weight = head.qweight if self.int8 is not None else head.weight.detach()
        self.full_bias = None if getattr(head, "bias", None) is None else head.bias.detach()
        self.vocab_size = self.full_weight.shape[0]
        device = self.full_weight.device
        self.kept = torch.zeros(self.vocab_size, dtype=torch.bool, device=device)
        ids = self._new(ids)  # sorted: the run from 0 comes first
        run = int((ids == torch.arange(ids.shape[0], device=device)).sum())
        # the ids it started with that run from 0 (views; split where the Q4_K rows end), and
        # the others, with those added since (copies)
        split = min(run, self.low_count)
        spans = ((0, split, True), (split, run, False))
        self.first = [_HeadPart(self, ids[a:b], slice(a, b), low) for a, b, low in spans if b > a]
        self.added = self._parts(ids[run:])

    def _new(self, ids: torch.Tensor) -> torch.Tensor:
        """The ids not kept yet (repeats and ids past the vocabulary skipped), now kept."""
        ids = ids.to(self.kept.device)
        ids = torch.unique(ids[(ids >= 0) & (ids < self.vocab_size)])
        new = ids[~self.kept[ids]]
        self.kept[new] = True
        return new

    def _parts(self, ids: torch.Tensor) -> list[_HeadPart]:
        """Parts holding copies of these ids' rows: those below low_count, then the others."""
        low = ids < self.low_count
        return [
            _HeadPart(self, part, low=is_low) for part, is_low in ((ids[low], True), (ids[~low], False)) if part.numel()
        ]

    def add(
        self,
        ids: torch.Tensor,  # [m] ids
    ) -> int:
        """Keep these ids too (ids already kept, repeats and ids past the vocabulary are
        skipped); returns how many were new."""
        new = self._new(ids)
        if new.numel():
            self.added = self._parts(torch.cat([*(part.ids for part in self.added), new]))
        return int(new.numel())

    @property
    def ids(self) -> torch.Tensor:
        return torch.cat([part.ids for part in (*self.first, *self.added)])

    @property
    def size(self) -> int:
        return sum(int(part.ids.shape[0]) for part in (*self.first, *self.added))

    def __call__(
        self,
        hidden: torch.Tensor,  # [..., hidden]
    ) -> torch.Tensor:
        """hidden [..., hidden] -> logits [..., vocab]."""
        dtype = torch.bfloat16 if self.int8 is not None else self.full_weight.dtype
        hidden = hidden.to(dtype)
        scored = [(part, part(hidden)) for part in (*self.first, *self.added)]
        kept = scored[0][1]
        logits = kept.new_full((*kept.shape[:-1], self.vocab_size), torch.finfo(kept.dtype).min)
        for part, values in scored:
            if part.rows is not None:  # ids that run unbroken: a slice
                logits[..., part.rows] = values
            else:
                logits[..., part.ids] = values
        return logits


class _HeadPart:
    """Some of a RestrictedHead's ids with their head rows, of one kind: Q4_K blocks (`low`:
    ids below the head's low_count) or the head's own rows. Views of them when `rows` (a
    slice) says where they lie, else a copy. An int8 head's part holds its int8 rows and
    scales; their dequantized bf16 rows are made on a first call that needs them."""

    def __init__(self, head: RestrictedHead, ids: torch.Tensor, rows: slice | None = None, low: bool = False):
        self.ids, self.rows = ids, rows
        self.q4k = _q4k_part(head.low, ids, rows) if low else None
        self.bias = None if low else _rows(head.full_bias, ids, rows)
        self.weight = None if low or head.int8 is not None else _rows(head.full_weight, ids, rows)
        self.packed = None
        if head.int8 is not None and not low:
            self.packed = (_rows(head.int8.qweight, ids, rows), _rows(head.int8.scales, ids, rows))

    def __call__(self, hidden: torch.Tensor) -> torch.Tensor:
        """hidden [..., hidden] -> this part's logits [..., ids]: through its Q4_K blocks, or
        its int8 rows when it has them and the call fits the int8 kernel, else dense rows."""
        if self.q4k is not None:
            return q4k_linear(hidden, self.q4k)
        if self.packed is not None and runs_int8(hidden):
            return fast_int8_linear(hidden, *self.packed, self.bias)
        if self.weight is None:
            self.weight = dequantize_rows(*self.packed)
        return F.linear(hidden, self.weight, self.bias)


def _rows(weight: torch.Tensor | None, ids: torch.Tensor, rows: slice | None) -> torch.Tensor | None:
    """weight's rows for ids: the view `rows` where given, else a copy (None stays None)."""
    if weight is None:
        return None
    return weight[rows] if rows is not None else weight.index_select(0, ids)


def _q4k_part(low: Q4KLinear, ids: torch.Tensor, rows: slice | None) -> Q4KLinear:
    """A layer over low's blocks and bias for ids: views where `rows` says where they lie, else copies."""
    blocks = {name: _rows(getattr(low, name), ids, rows) for name in Q4K_BUFFERS}
    return Q4KLinear(blocks, _rows(low.bias, ids, rows), low.in_features)
