"""A drafter with another tokenizer (drafters/translated.py): greedy parity with plain
decoding at every gamma on pairs whose tokenizers split words differently, realignment
after rejections, the lossless sampling (chi-square), and the one-line errors."""

from __future__ import annotations

from itertools import product

import pytest
import torch
from chi_square import pvalues
from conftest import tiny_model
from mock_lm import ScriptedLM, random_trigram
from tiny_hf import char_tokenizer, merge_tokenizer
from tokenizers import Tokenizer, decoders, models, pre_tokenizers
from transformers import PreTrainedTokenizerFast

from specbench.core.generate import GenerationConfig, plain_generate, speculative_generate
from specbench.core.sampling import SamplingConfig, logits_to_probs
from specbench.drafters import LookupFirstDrafter
from specbench.drafters.translated import TextCodec, TranslatedDrafter, check_translatable
from specbench.policies import FixedGamma

pytestmark = pytest.mark.usefixtures("single_thread")

TEXT_PROMPTS = ["the cat and the dog", "<|im_start|>user:sing a song<|im_end|><|im_start|>assistant:", "x"]
CONFIG = GenerationConfig(max_new_tokens=30)


@pytest.fixture(scope="module")
def tokenizers_():
    """(merge tokenizer, character tokenizer, merge tokenizer with its characters' ids reversed)."""
    return merge_tokenizer(), char_tokenizer(), merge_tokenizer(reverse=True)


def pairs(toks):
    """(target tokenizer, drafter tokenizer) with pieces that split words differently, both ways."""
    merges, chars, reversed_merges = toks
    return {"merges<-chars": (merges, chars), "chars<-merges": (chars, reversed_merges)}


def scripted(target, target_tok, draft_tok, prompt, config=CONFIG):
    """A drafter that drafts the target's own greedy text, wrong every 5th character."""
    script = TextCodec(target_tok).decode(prompt + plain_generate(target, prompt, config).token_ids)
    return ScriptedLM(draft_tok, script, len(draft_tok))


@pytest.mark.parametrize("pair", ["merges<-chars", "chars<-merges"])
@pytest.mark.parametrize("gamma", range(1, 9))
def test_greedy_parity_with_another_tokenizer(tokenizers_, pair, gamma):
    """Greedy output equals plain decoding, with a random drafter (drafts mostly rejected)
    and with a drafter that knows the text (mostly accepted, a rejection every 5th char)."""
    target_tok, draft_tok = pairs(tokenizers_)[pair]
    target = tiny_model(0, vocab=96)
    random_drafter = tiny_model(1, layers=1, hidden=16, vocab=96)
    for text in TEXT_PROMPTS:
        prompt = target_tok.encode(text)
        expected = plain_generate(target, prompt, CONFIG).token_ids
        for drafter in (random_drafter, scripted(target, target_tok, draft_tok, prompt)):
            made = TranslatedDrafter(drafter, draft_tok, target_tok, 96)
            result = speculative_generate(target, made, prompt, CONFIG, FixedGamma(gamma))
            assert result.token_ids == expected, (text, gamma, pair)


class CheckedCache(TranslatedDrafter):
    """Checks, at every propose, that the drafter's cache holds the context's text re-encoded
    in the drafter's ids (ScriptedLM keeps the ids it was fed as its cache's keys)."""

    def propose(self, context, max_tokens, keep_drafting, forward_pays=None):
        draft = super().propose(context, max_tokens, keep_drafting, forward_pays)
        text_ids = self.drafter.encode_context(self.target.decode(context.tolist()))
        cached = self.model.cache.layers[0].keys[0, 0, :, 0].long().tolist()
        assert self.held[: len(text_ids)] == text_ids
        assert cached == self.held[: len(cached)] and len(cached) >= len(text_ids)
        return draft


@pytest.mark.parametrize("pair", ["merges<-chars", "chars<-merges"])
def test_drafts_realign_after_rejections(tokenizers_, pair):
    """After every round the drafter's cache holds exactly the target's accepted text
    re-encoded in the drafter's ids (then its own fed drafts), and only what changed is fed:
    each round's first drafter forward after the first (which reads the prompt) feeds a few
    ids, never the context again. Guards the
    parity test: the scripted drafter's rounds both accept and reject."""
    target_tok, draft_tok = pairs(tokenizers_)[pair]
    target = tiny_model(0, vocab=96)
    prompt = target_tok.encode(TEXT_PROMPTS[0])
    config = GenerationConfig(max_new_tokens=60)
    made = CheckedCache(scripted(target, target_tok, draft_tok, prompt, config), draft_tok, target_tok, 96)
    result = speculative_generate(target, made, prompt, config, FixedGamma(4))
    rounds = result.steps[1:]
    assert {r.emitted_kind for r in rounds} == {"bonus", "correction"}
    assert result.stats.acceptance_rate > 0.4, result.stats.acceptance_rate
    firsts = [r.drafter_feeds[0] for r in rounds if r.drafter_feeds]
    assert firsts[0] > 6 >= max(firsts[1:])  # the deferred prefill (the prompt in drafter ids), then what changed
    assert result.token_ids == plain_generate(target, prompt, config).token_ids


def test_acceptance_counts_target_tokens(tokenizers_):
    """drafted and accepted count the target's tokens (the translated drafts), so acceptance
    compares with a same-tokenizer drafter's; the drafter's own steps are its feeds."""
    merges, chars, _ = tokenizers_
    target = tiny_model(0, vocab=96)
    prompt = merges.encode(TEXT_PROMPTS[0])
    made = TranslatedDrafter(scripted(target, merges, chars, prompt), chars, merges, 96)
    result = speculative_generate(target, made, prompt, CONFIG, FixedGamma(3))
    rounds = result.steps[1:]
    assert all(len(r.draft_tokens) <= 3 for r in rounds)
    assert result.stats.drafted == sum(len(r.draft_tokens) for r in rounds)
    # a character drafter needs more forwards than the merged target tokens it drafts
    assert sum(len(r.drafter_feeds) for r in rounds) > result.stats.drafted


def test_model_plus_lookup_wraps_a_translated_drafter(tokenizers_):
    merges, chars, _ = tokenizers_
    target = tiny_model(0, vocab=96)
    prompt = merges.encode("the cat the cat the cat the")
    made = LookupFirstDrafter(TranslatedDrafter(tiny_model(1, layers=1, hidden=16, vocab=96), chars, merges, 96))
    for gamma in (1, 4, 8):
        result = speculative_generate(target, made, prompt, CONFIG, FixedGamma(gamma))
        assert result.token_ids == plain_generate(target, prompt, CONFIG).token_ids


# ---------------------------------------------------------------------------- sampling


def small_bpe(tokens: list[str], merges: list[tuple[str, str]]) -> PreTrainedTokenizerFast:
    """A tokenizer with exactly these tokens (ids in order) and merges, no special tokens."""
    backend = Tokenizer(models.BPE({t: i for i, t in enumerate(tokens)}, merges, unk_token=None))
    backend.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    backend.decoder = decoders.ByteLevel()
    return PreTrainedTokenizerFast(tokenizer_object=backend)


# the target's 6 ids include merged pieces; the drafter spells the same text one letter a token
TARGET_PIECES = ["a", "b", "c", "ab", "bc", "ca"]
TARGET_MERGES = [("a", "b"), ("b", "c"), ("c", "a")]
PROMPT = [0, 4]  # "a" "bc"
SAMPLES = 3000


def exact_joint(model, sampling, prompt=PROMPT) -> dict[tuple, float]:
    """P(x1, x2, x3 | prompt) of the trigram target under the sampling processor."""
    p = lambda prev, cur: logits_to_probs(model.next_logits(prev, cur), sampling)  # noqa: E731
    vocab = model.table.shape[-1]
    p1 = p(prompt[-2], prompt[-1])
    return {(a, b, c): float(p1[a] * p(prompt[-1], a)[b] * p(a, b)[c]) for a, b, c in product(range(vocab), repeat=3)}


class LyingQ(TranslatedDrafter):
    """Wrong on purpose: claims its drafts were drawn from a uniform q over the target's ids."""

    def propose(self, context, max_tokens, keep_drafting, forward_pays=None):
        draft = super().propose(context, max_tokens, keep_drafting, forward_pays)
        draft.probs = torch.full((draft.tokens.shape[0], self.target_vocab_size), 1.0 / self.target_vocab_size)
        return draft


def sample_translated(make, sampling, rounds=None):
    target = random_trigram(6, seed=0)
    drafter = random_trigram(3, seed=5, sharpness=1.0)
    target_tok, draft_tok = small_bpe(TARGET_PIECES, TARGET_MERGES), small_bpe(["a", "b", "c"], [])
    outputs = []
    for seed in range(SAMPLES):
        # 4 new tokens leave room for two drafts in the first round; the first 3 are compared
        config = GenerationConfig(max_new_tokens=4, sampling=sampling, seed=seed)
        result = speculative_generate(target, make(drafter, draft_tok, target_tok, 6), PROMPT, config, FixedGamma(3))
        outputs.append(tuple(result.token_ids[:3]))
        if rounds is not None:
            rounds.extend(result.steps[1:])
    return outputs, exact_joint(target, sampling)


VIEWS = {"x1": lambda s: s[0], "x2": lambda s: s[1], "x3": lambda s: s[2], "x1x2": lambda s: s[:2]}


@pytest.mark.parametrize(
    "sampling",
    [SamplingConfig(temperature=1.0), SamplingConfig(temperature=0.8, top_k=4, top_p=0.9)],
    ids=["t1", "t0.8-topk-topp"],
)
def test_translated_sampling_follows_the_target(sampling):
    """Drafts from a drafter with another tokenizer, verified as one-hot q: the sampled
    output has the target's distribution; drafts were really made, accepted and rejected."""
    rounds: list = []
    outputs, joint = sample_translated(TranslatedDrafter, sampling, rounds)
    found = pvalues(outputs, joint, VIEWS)
    assert min(found.values()) > 1e-3, found
    drafted = sum(len(r.draft_tokens) for r in rounds)
    accepted = sum(r.accepted for r in rounds)
    assert drafted > SAMPLES and 0.1 * drafted < accepted < 0.9 * drafted, (drafted, accepted)
    assert any(t in (3, 4, 5) for r in rounds for t in r.draft_tokens)  # merged pieces drafted


def test_the_check_fails_for_drafts_verified_with_a_wrong_q():
    """Power check: the same drafts verified against a q they were not drawn from are biased,
    and the chi-square test catches it."""
    outputs, joint = sample_translated(LyingQ, SamplingConfig(temperature=1.0))
    found = pvalues(outputs, joint, VIEWS)
    assert min(found.values()) < 1e-6, found


# ---------------------------------------------------------------------------- pairs that cannot work


def test_no_common_text_is_a_one_line_error():
    digits = small_bpe(list("0123456789"), [])
    letters = small_bpe(list("abcdefghij"), [])
    with pytest.raises(ValueError, match="no common text") as error:
        check_translatable(TextCodec(digits), TextCodec(letters))
    assert "\n" not in str(error.value)


def test_a_drafter_tokenizer_that_cannot_decode_is_a_one_line_error(tokenizers_):
    merges, chars, _ = tokenizers_

    class NoDecoder:
        eos_token_id = None

        def encode(self, text, add_special_tokens=True):
            return chars.encode(text, add_special_tokens=add_special_tokens)

        def decode(self, ids, **kwargs):
            raise NotImplementedError("this tokenizer has no decoder\nsecond line")

    with pytest.raises(ValueError, match="cannot decode") as error:
        check_translatable(TextCodec(merges), TextCodec(NoDecoder()))
    assert "\n" not in str(error.value)
