"""A drafter with another tokenizer: it drafts in its own ids, and text carries the drafts
to the target (Universal Assisted Generation's idea, transformers' AssistedCandidate
GeneratorDifferentTokenizers, built on specbench's protocol).

Each round:
  1. the context (target ids) is decoded to text and re-encoded in the drafter's ids; the
     drafter's cache is cropped to the longest prefix it shares with what the cache holds,
     and only the rest is fed. After a rejection the target's accepted text differs from
     what the drafter drafted, and this is where both sides align again: the drafts that
     survived stay in the cache, what changed is fed anew (commit has nothing to do);
  2. the model drafter (model.py) drafts in the drafter's ids; after each drafter token the
     draft's text is encoded in the target's ids (continuing the context's last tokens
     where they re-encode alike, else on its own), until the draft holds more target tokens
     than the round asked for, so that the last one kept is closed by the text after it;
  3. the first max_tokens target ids are the round's drafts, with probs=None.

Sampling stays lossless because the drafts are verified as one-hot q (core.verify): keep x
with probability p(x), else draw from p without x. That holds for drafts chosen in any way
that does not look at the verification's random draws, so it needs no correspondence
between the vocabularies. (transformers' sampling mode instead maps the drafter's q onto the
target's vocabulary where tokens match one to one; that drafts one target token per drafter
token, which a drafter whose pieces split words differently rarely gets accepted.)

Greedy output equals plain decoding whatever the drafts are: the target's argmax decides.
A context that ends inside a character (a byte-level token that is half of one) gets no
drafts that round, since its text is not yet text. This module knows nothing about the
loop or the target model: only the two tokenizers and the drafter model.
"""

from __future__ import annotations

import string
import time

import torch

from specbench.core.cache import cache_length, crop_cache
from specbench.core.protocols import Draft, ForwardPays, Keep, KeepDrafting
from specbench.core.sampling import SamplingConfig
from specbench.drafters.model import ModelDrafter, common_prefix

INCOMPLETE = "\ufffd"  # what a decoder writes for the bytes of a character not yet complete
TAIL = 4  # context tokens re-encoded with a draft, so that the draft continues them
STEPS_PER_TOKEN = 4  # most drafter tokens per target token asked for (a finer tokenizer)
PROBE = string.ascii_letters + string.digits + string.punctuation + " \n"


class TextCodec:
    """One tokenizer's ids <-> text as translation needs them: special tokens kept as text
    (a chat template's markers mean the same to both sides when both have them), no
    clean-up of spaces, and the ids the tokenizer puts before a text (a BOS) apart."""

    def __init__(self, tokenizer):
        self.tokenizer = tokenizer
        plain = tokenizer.encode("a", add_special_tokens=False)
        marked = tokenizer.encode("a")
        self.prefix = marked[: len(marked) - len(plain)] if marked[len(marked) - len(plain) :] == plain else []
        self.eos = {tokenizer.eos_token_id} if tokenizer.eos_token_id is not None else set()

    def decode(self, ids: list[int]) -> str:
        return self.tokenizer.decode(ids, skip_special_tokens=False, clean_up_tokenization_spaces=False)

    def encode(self, text: str) -> list[int]:
        return list(self.tokenizer.encode(text, add_special_tokens=False))

    def encode_context(self, text: str) -> list[int]:
        """The ids of a whole context: its text, after the prefix unless it already has one."""
        ids = self.encode(text)
        return ids if ids[: len(self.prefix)] == self.prefix else self.prefix + ids

    def round_trips(self, text: str) -> bool:
        return self.decode(self.encode(text)) == text


def check_translatable(target: TextCodec, drafter: TextCodec) -> None:
    """ValueError (one line) if text cannot carry drafts between the two tokenizers: the
    drafter's cannot decode, or no character comes back from both tokenizers unchanged."""
    try:
        decoded = drafter.decode(drafter.encode("a"))
    except Exception as error:  # a tokenizer without a decoder raises anything
        first_line = str(error).splitlines()[0] if str(error) else ""
        raise ValueError(
            f"the drafter's tokenizer cannot decode ({type(error).__name__}: {first_line}); "
            "it cannot draft for another tokenizer"
        ) from None
    if not isinstance(decoded, str):
        raise ValueError("the drafter's tokenizer cannot decode ids to text; it cannot draft for another tokenizer")
    if not any(target.round_trips(c) and drafter.round_trips(c) for c in PROBE):
        raise ValueError(
            "the tokenizers have no common text: no letter, digit or punctuation mark survives both, "
            "so drafts cannot be translated"
        )


class TranslatedDrafter:
    """A model drafter with its own tokenizer, drafting for a target with another (see the
    module docstring). Draft.tokens are target ids; Draft.feeds count drafter forwards.

    target_vocab_size: the target's logits width (ids at or past it are never drafted).
    """

    def __init__(
        self, drafter_model, drafter_tokenizer, target_tokenizer, target_vocab_size: int, name: str = "model", step=None
    ):
        self.model = ModelDrafter(drafter_model, name=name, step=step)
        self.drafter, self.target = TextCodec(drafter_tokenizer), TextCodec(target_tokenizer)
        check_translatable(self.target, self.drafter)
        self.name = name
        self.target_vocab_size = target_vocab_size
        self.limit = int(getattr(drafter_model.config, "max_position_embeddings", 0) or 1 << 30)
        self.start(SamplingConfig(), None)

    def start(self, sampling: SamplingConfig, generator: torch.Generator | None) -> None:
        self.model.start(sampling, generator)
        self.held: list[int] = []  # drafter ids whose prefix the drafter's cache holds

    def prefill(
        self,
        prompt: torch.Tensor,  # [n] ids
        target_cache=None,
    ) -> None:
        ids = self._sync(prompt.tolist())
        if ids is not None:
            self.model.prefill(torch.tensor(ids, dtype=torch.long))

    def _sync(self, context: list[int]) -> list[int] | None:
        """The context in drafter ids, with the drafter's cache cropped to what it shares
        with them (the model drafter feeds the rest); None while the text ends mid-character."""
        text = self.target.decode(context)
        if text.endswith(INCOMPLETE):
            return None
        ids = self.drafter.encode_context(text)
        # at least the last id is fed again: a draft needs the logits after it
        keep = min(common_prefix(ids, self.held[: cache_length(self.model.cache)]), len(ids) - 1)
        crop_cache(self.model.cache, keep)
        self.held = ids
        return ids

    def propose(
        self,
        context: torch.Tensor,  # [n] ids
        max_tokens: int,
        keep_drafting: KeepDrafting,
        forward_pays: ForwardPays | None = None,
    ) -> Draft:
        start = time.perf_counter()
        ids = self._sync(context.tolist()) if max_tokens > 0 else None
        steps = min(STEPS_PER_TOKEN * (max_tokens + 1), self.limit - len(ids) - 1) if ids is not None else 0
        if steps <= 0:
            return Draft(torch.zeros(0, dtype=torch.long, device=context.device), None, time.perf_counter() - start)
        tail = context[-TAIL:].tolist()
        drafted: list[int] = []
        found: list[int] = []  # the draft so far in target ids
        at_eos = False

        def counting(step, probs, token):
            """The policy's say on each drafter token, then: stop at the drafter's EOS, or
            once the draft holds more target tokens than asked for."""
            nonlocal at_eos
            say = keep_drafting(step, probs, token)
            if not say:
                return say
            drafted.append(token)
            found[:] = self._translate(ids[-TAIL:], drafted, tail)
            at_eos = token in self.drafter.eos
            return Keep.LAST if at_eos or len(found) > max_tokens else say

        draft = self.model.propose(torch.tensor(ids, dtype=torch.long), steps, counting, forward_pays)
        self.held = ids + drafted
        closed = found if at_eos or len(found) > max_tokens else found[:-1]  # the last may still grow
        tokens = torch.tensor(closed[:max_tokens], dtype=torch.long, device=context.device)
        return Draft(tokens, None, time.perf_counter() - start, draft.feeds)

    def _translate(self, before: list[int], drafted: list[int], tail: list[int]) -> list[int]:
        """The drafted drafter ids as target ids that follow the context: the draft's text
        (decoded after the drafter's last context ids, whose spelling it may depend on) is
        encoded after the context's last target ids `tail`; if those do not come back as
        they were, the draft's text is encoded on its own. Cut before an incomplete
        character and before any id outside the target's logits."""
        head = self.drafter.decode(before)
        whole = self.drafter.decode(before + drafted)
        text = whole[len(head) :] if whole.startswith(head) else self.drafter.decode(drafted)
        text = text.split(INCOMPLETE, 1)[0]
        if not text:
            return []
        joined = self.target.encode(self.target.decode(tail) + text)
        ids = joined[len(tail) :] if joined[: len(tail)] == tail else self.target.encode(text)
        for i, token in enumerate(ids):
            if not 0 <= token < self.target_vocab_size:
                return ids[:i]
        return ids

    def commit(self, n_accepted: int) -> None:
        """Nothing to roll back here: the next propose re-encodes the accepted text and crops
        the drafter's cache to what it shares with it."""
