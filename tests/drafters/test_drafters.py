"""Model-free drafters: n-gram and prompt-lookup predictions on literal token lists, the
incremental tables against the pure functions, and state across propose/commit rounds."""

from __future__ import annotations

import random

import pytest
import torch
from conftest import tiny_model

from specbench.drafters import (
    DRAFTERS,
    LookupFirstDrafter,
    LookupIndex,
    ModelDrafter,
    ModelForward,
    NgramDrafter,
    NgramTable,
    PromptLookupDrafter,
    copy_from,
    lookup_continuation,
    make_drafter,
    ngram_predict,
)
from specbench.policies import FixedGamma, Keep


def always(step, probs, token=None):
    return True


# ---------------------------------------------------------------------------- n-gram, pure


def test_ngram_docstring_example():
    """Falls back 4-gram -> 3-gram, breaks the (1, 2) tie toward the later 4, then chains."""
    assert ngram_predict([1, 2, 3, 1, 2, 4, 1, 2], 3) == [4, 1, 2]


def test_ngram_no_match_drafts_nothing():
    assert ngram_predict([5, 6], 3) == []
    assert ngram_predict([], 3) == []
    assert ngram_predict([7], 3) == []


def test_ngram_longest_context_wins_over_frequency():
    """After (1, 2) came 9 once; after (2,) came 5 three times: the 3-gram context wins."""
    tokens = [2, 5, 2, 5, 2, 5, 1, 2, 9, 1, 2]
    assert ngram_predict(tokens, 1) == [9]


def test_ngram_most_frequent_continuation():
    """(3,) was followed by 4 twice and 8 once, and no longer context matches [.., 0, 3]."""
    assert ngram_predict([3, 4, 3, 8, 3, 4, 0, 3], 1) == [4]


def test_ngram_chains_own_predictions_up_to_max():
    tokens = [10, 11, 12, 13, 10, 11]
    assert ngram_predict(tokens, 2) == [12, 13]
    assert ngram_predict(tokens, 6) == [12, 13, 10, 11, 12, 13]  # a cycle, cut at max_tokens
    assert ngram_predict(tokens, 0) == []


def test_ngram_chain_never_strands_after_a_first_match():
    """Every predicted token followed some context, so it occurred before the end and has a
    bigram continuation: once the first lookup matches, the chain runs to max_tokens (the
    "stop when nothing matches" case is the first lookup)."""
    for seed in range(20):
        tokens = random_tokens(seed, 30, vocab=6)
        first = ngram_predict(tokens, 1)
        assert len(ngram_predict(tokens, 8)) == (8 if first else 0)


def test_ngram_orders_are_configurable():
    tokens = [1, 2, 3, 1, 2, 4, 1, 2]
    assert ngram_predict(tokens, 1, max_n=2) == [4]  # bigram (2,): 3 and 4 tie, later wins
    with pytest.raises(ValueError, match="min_n"):
        NgramTable(max_n=3, min_n=1)


# ---------------------------------------------------------------------------- lookup, pure


def test_lookup_docstring_example():
    assert lookup_continuation([4, 5, 6, 9, 4, 5, 7, 4, 5], 3) == [7, 4, 5]


def test_lookup_prefers_longer_match_over_later_one():
    """(8, 1) occurred at start 0 (followed by 2); 1 alone occurred later (followed by 3)."""
    tokens = [8, 1, 2, 1, 3, 8, 1]
    assert lookup_continuation(tokens, 2) == [2, 1]


def test_lookup_takes_latest_occurrence():
    tokens = [1, 2, 1, 3, 1]
    assert lookup_continuation(tokens, 1) == [3]


def test_lookup_copies_into_itself():
    """The latest match of (5,) is one back: the copy repeats it (period 1)."""
    assert lookup_continuation([5, 5], 4) == [5, 5, 5, 5]
    assert copy_from([7, 8], 0, 5) == [7, 8, 7, 8, 7]


def test_lookup_no_match():
    assert lookup_continuation([1, 2, 3], 4) == []
    assert lookup_continuation([1], 4) == []
    assert lookup_continuation([], 4) == []


def test_lookup_min_n():
    tokens = [1, 2, 1, 3, 1]
    assert lookup_continuation(tokens, 1, max_n=3, min_n=2) == []


# ---------------------------------------------------------------------------- incremental tables


def random_tokens(seed: int, n: int, vocab: int) -> list[int]:
    rng = random.Random(seed)
    return [rng.randrange(vocab) for _ in range(n)]


@pytest.mark.parametrize("seed", range(5))
def test_incremental_tables_equal_pure_functions(seed):
    """After every token, the incremental tables predict what the pure functions do."""
    tokens = random_tokens(seed, 200, vocab=4 + seed)
    ngram, lookup = NgramTable(), LookupIndex()
    for i, token in enumerate(tokens):
        ngram.add(token)
        lookup.add(token)
        prefix = tokens[: i + 1]
        assert ngram.predict(6) == ngram_predict(prefix, 6)
        assert lookup.predict(6) == lookup_continuation(prefix, 6)


# ---------------------------------------------------------------------------- drafters


@pytest.mark.parametrize("make, pure", [(NgramDrafter, ngram_predict), (PromptLookupDrafter, lookup_continuation)])
def test_rounds_with_commit_track_the_context(make, pure):
    """Propose, commit some drafts, append the target's token, propose again: each proposal is
    the pure function of the context so far; rejected drafts leave no trace."""
    drafter = make()
    drafter.start(None, None)
    rng = random.Random(0)
    context = random_tokens(1, 30, vocab=5)
    for _ in range(40):
        draft = drafter.propose(torch.tensor(context), 4, always)
        assert draft.probs is None
        assert draft.tokens.tolist() == pure(context, 4)
        n = rng.randrange(draft.tokens.shape[0] + 1)
        drafter.commit(n)
        context += draft.tokens.tolist()[:n] + [rng.randrange(5)]


@pytest.mark.parametrize("make", [NgramDrafter, PromptLookupDrafter])
def test_drafter_rebuilds_on_a_context_that_does_not_extend(make):
    """A context that is shorter or ends differently is not mixed with the old tables."""
    drafter = make()
    drafter.propose(torch.tensor([1, 2, 3, 1, 2, 3, 1]), 3, always)
    other = [4, 5, 4]
    assert drafter.propose(torch.tensor(other), 3, always).tokens.tolist() == make_pure(make)(other, 3)
    changed_end = [4, 5, 9]
    assert drafter.propose(torch.tensor(changed_end), 3, always).tokens.tolist() == make_pure(make)(changed_end, 3)


def make_pure(make):
    return ngram_predict if make is NgramDrafter else lookup_continuation


@pytest.mark.parametrize("make", [NgramDrafter, PromptLookupDrafter])
def test_start_forgets_the_last_generation(make):
    drafter = make()
    drafter.propose(torch.tensor([1, 2, 1, 2, 1]), 3, always)
    drafter.start(None, None)
    assert drafter.propose(torch.tensor([3, 1]), 3, always).tokens.tolist() == []


@pytest.mark.parametrize("make", [NgramDrafter, PromptLookupDrafter])
def test_keep_drafting_asked_before_each_token_with_none(make):
    calls = []

    def stop_at_two(step, probs, token=None):
        calls.append((step, probs))
        return step < 2

    draft = make().propose(torch.tensor([1, 2, 3, 4, 1, 2, 3, 4, 1]), 5, stop_at_two)
    assert draft.tokens.tolist() == [2, 3]
    assert calls == [(0, None), (1, None), (2, None)]


@pytest.mark.parametrize("make", [NgramDrafter, PromptLookupDrafter])
def test_keep_last_keeps_the_token_and_ends_the_draft(make):
    say = lambda step, probs, token=None: Keep.LAST if step == 1 else Keep.YES
    draft = make().propose(torch.tensor([1, 2, 3, 4, 1, 2, 3, 4, 1]), 5, say)
    assert draft.tokens.tolist() == [2, 3]


@pytest.mark.parametrize("make", [NgramDrafter, PromptLookupDrafter])
def test_no_match_is_an_empty_draft(make):
    calls = []
    draft = make().propose(torch.tensor([1, 2, 3]), 4, lambda s, p, token=None: calls.append(s) or True)
    assert draft.tokens.shape == (0,) and draft.tokens.dtype == torch.long
    assert draft.probs is None and calls == []


@pytest.mark.parametrize("make", [NgramDrafter, PromptLookupDrafter])
def test_rounds_cost_does_not_grow_with_context(make):
    """Guards against O(context) Python work per round: after a 20k-token prefill, 200 rounds
    of propose + commit on a growing context feed the table exactly the 200 new tokens and
    never rebuild it. Counted, not timed, so the verdict does not depend on the machine's load
    (a predict reads only the table's last tokens and dicts: O(max_n + drafts))."""
    context = torch.tensor(random_tokens(2, 20_000, vocab=50))
    drafter = make()
    drafter.propose(context, 4, always)
    table = drafter.table
    added = []
    real_add = table.add
    table.add = lambda token: added.append(token) or real_add(token)
    for i in range(200):
        drafter.propose(context, 4, always)
        drafter.commit(0)
        context = torch.cat([context, torch.tensor([i % 50])])
    assert drafter.table is table  # never rebuilt from the whole context
    assert added == [i % 50 for i in range(199)]  # each round fed only the token it gained
    assert table.size == context.shape[0] - 1


def test_make_drafter():
    assert set(DRAFTERS) == {"model", "model+lookup", "ngram", "prompt-lookup"}
    assert isinstance(make_drafter("ngram"), NgramDrafter) and make_drafter("ngram").name == "ngram"
    lookup = make_drafter("prompt-lookup")
    assert isinstance(lookup, PromptLookupDrafter) and lookup.name == "prompt-lookup"
    with pytest.raises(ValueError, match="needs a drafter model"):
        make_drafter("model")
    with pytest.raises(ValueError, match="unknown drafter"):
        make_drafter("bigram")


def test_make_drafter_model(tiny_pair):
    _, drafter_model = tiny_pair
    assert isinstance(make_drafter("model", drafter_model), ModelDrafter)
    assert isinstance(make_drafter("model+lookup", drafter_model), LookupFirstDrafter)
    with pytest.raises(ValueError, match="needs a drafter model"):
        make_drafter("model+lookup")


def test_model_plus_lookup_copies_without_a_forward_and_catches_up_after(tiny_pair):
    """A context whose last 3 tokens occurred before is copied (no q, no forward); the model
    reads nothing before it drafts (its prefill is deferred), so the first model round feeds
    the whole context in one forward, and its drafts are what a fresh model drafter drafts
    on the same context."""
    from specbench.core.cache import cache_length

    _, drafter_model = tiny_pair
    fed = []
    hook = drafter_model.register_forward_hook(
        lambda m, args, kwargs, out: fed.append(kwargs["input_ids"].shape[-1]), with_kwargs=True
    )
    try:
        drafter = LookupFirstDrafter(ModelDrafter(drafter_model))
        prompt = torch.tensor([3, 17, 42, 8, 29, 5, 3, 17])
        drafter.prefill(prompt)
        assert cache_length(drafter.model.cache) == 0 and fed == []  # deferred to the first model round
        copy = drafter.propose(torch.cat([prompt, torch.tensor([42])]), 4, lambda step, q, token=None: True)
        assert copy.tokens.tolist() == [8, 29, 5, 3] and copy.probs is None and fed == []
        drafter.commit(2)  # 8, 29 kept, then the target emitted 11: no 3-token repeat follows
        context = torch.tensor([3, 17, 42, 8, 29, 5, 3, 17, 42, 8, 29, 11])
        drafted = drafter.propose(context, 3, lambda step, q, token=None: True)
    finally:
        hook.remove()
    assert drafted.probs is not None and fed[0] == 12  # the prompt, the copy's 42, 8, 29 and 11 in one forward
    assert copy.feeds == [] and drafted.feeds == fed == [12, 1, 1]  # the record the walltime model prices
    fresh = ModelDrafter(drafter_model).propose(context, 3, lambda step, q, token=None: True)
    assert drafted.tokens.tolist() == fresh.tokens.tolist()


def test_model_drafter_makes_no_forward_after_keep_last(tiny_pair):
    """Keep.LAST at step 2 keeps the third token and stops: three forwards, three drafts, the
    same tokens as a drafter told to go on; commit then keeps the cache in step."""
    from specbench.core.cache import cache_length

    _, drafter_model = tiny_pair
    context = torch.tensor([3, 17, 42, 8, 29, 5])
    fed = []
    hook = drafter_model.register_forward_hook(lambda m, args, out: fed.append(1))
    try:
        drafter = ModelDrafter(drafter_model)
        draft = drafter.propose(context, 6, lambda step, probs, token=None: Keep.LAST if step == 2 else Keep.YES)
    finally:
        hook.remove()
    assert len(fed) == 3 and draft.tokens.shape == (3,) and draft.probs.shape[0] == 3
    assert draft.tokens.tolist() == ModelDrafter(drafter_model).propose(context, 6, always).tokens.tolist()[:3]
    drafter.commit(3)
    assert cache_length(drafter.cache) == len(context) + 2  # the last draft was never fed
    assert draft.feeds == [len(context), 1, 1]  # the first propose read the whole context


def test_model_drafter_records_every_forward_it_feeds(tiny_pair):
    """Draft.feeds lists the tokens of each forward, as a hook sees them: after a fully
    accepted round the last draft and the bonus token go in one forward; a row the policy
    refuses was still paid for."""
    _, drafter_model = tiny_pair
    fed = []
    hook = drafter_model.register_forward_hook(
        lambda m, args, kwargs, out: fed.append(kwargs["input_ids"].shape[-1]), with_kwargs=True
    )
    try:
        drafter = ModelDrafter(drafter_model)
        context = torch.tensor([3, 17, 42, 8, 29, 5])
        drafter.prefill(context)
        context = torch.cat([context, torch.tensor([10])])  # the first-target pass's token
        first = drafter.propose(context, 3, always)  # 3 drafts, the last never fed
        drafter.commit(3)  # all accepted; the target adds a bonus token
        context = torch.cat([context, first.tokens, torch.tensor([11])])
        refused = drafter.propose(context, 3, lambda step, probs, token=None: Keep.YES if step == 0 else Keep.NO)
        drafter.commit(0)  # the one draft rejected; the target's correction follows
        context = torch.cat([context, torch.tensor([12])])
        last = drafter.propose(context, 1, always)
    finally:
        hook.remove()
    assert first.feeds == [7, 1, 1]  # the prompt (prefill is deferred) and the first token, then drafts
    assert refused.feeds == [2, 1] and refused.tokens.shape == (1,)  # catch-up, then the refused row
    assert last.feeds == [1]
    assert fed == first.feeds + refused.feeds + last.feeds


# ---------------------------------------------------------------------------- prefill


def test_model_drafter_defers_its_prefill_to_the_first_draft(tiny_pair):
    """prefill feeds nothing (a generation that never drafts with the model never pays for
    it); the first propose reads the prompt and the target's first token in one forward, and
    drafts what a drafter never shown the prompt drafts."""
    from specbench.core.cache import cache_length

    _, drafter_model = tiny_pair
    prompt = torch.tensor([3, 17, 42, 8, 29, 5])
    context = torch.cat([prompt, torch.tensor([11])])  # the prompt + the target's first token
    lazy = ModelDrafter(drafter_model)
    shown = ModelDrafter(drafter_model)
    fed = []
    hook = drafter_model.register_forward_hook(
        lambda m, args, kwargs, out: fed.append(kwargs["input_ids"].shape[1]), with_kwargs=True
    )
    try:
        shown.prefill(prompt)
        assert cache_length(shown.cache) == 0 and fed == []
        drafted = shown.propose(context, 4, always)
    finally:
        hook.remove()
    assert fed == [len(context), 1, 1, 1] == drafted.feeds
    expected = lazy.propose(context, 4, always)
    assert drafted.tokens.tolist() == expected.tokens.tolist() and len(expected.tokens) == 4
    assert torch.allclose(drafted.probs, expected.probs, atol=1e-5)


@pytest.mark.parametrize("make", [NgramDrafter, PromptLookupDrafter])
def test_table_drafter_prefill_then_propose_equals_lazy_propose(make):
    prompt = torch.tensor([1, 2, 3, 1, 2, 4, 1])
    context = torch.cat([prompt, torch.tensor([2])])
    eager, lazy = make(), make()
    eager.prefill(prompt)
    assert eager.table.size == len(prompt)
    assert eager.propose(context, 3, always).tokens.tolist() == lazy.propose(context, 3, always).tokens.tolist()


@pytest.mark.parametrize("name", ["model", "model+lookup"])
def test_generation_records_each_drafter_forward(close_pair, name):
    """Across a whole generation (rejections, bonus tokens, copies, a refusing policy), the
    rounds' drafter_feeds are exactly the drafter forwards a hook sees, the deferred prefill
    of the prompt in the first model round's first one."""
    from specbench.core.generate import GenerationConfig, speculative_generate
    from specbench.policies import CostAwareGamma

    target, drafter_model = close_pair
    fed = []
    hook = drafter_model.register_forward_hook(
        lambda m, args, kwargs, out: fed.append(kwargs["input_ids"].shape[-1]), with_kwargs=True
    )
    try:
        for policy in (FixedGamma(3), CostAwareGamma(6, 0.2, {1: 1.0, 2: 1.1, 7: 1.4})):
            fed.clear()
            prompt = [2, 2, 2, 2, 2, 2, 2, 2, 40, 13]
            result = speculative_generate(
                target, make_drafter(name, drafter_model), prompt, GenerationConfig(max_new_tokens=40), policy
            )
            feeds = [n for step in result.steps for n in step.drafter_feeds]
            assert fed[0] > len(prompt) and fed == feeds
            assert any(n >= 2 for n in feeds)  # some forward caught up on more than one token
    finally:
        hook.remove()


# ---------------------------------------------------------------------------- the draft step


class FavourSeven(ModelForward):
    """A draft step that runs the model's forward (so the cache stays in step), records what
    the drafter tells it, and returns logits that favour token 7."""

    def __init__(self):
        self.started, self.observed = [], []

    def start(self, model, prompt):
        self.started.append(prompt.tolist())

    def observe(self, new_ids):
        self.observed.append(new_ids.tolist())

    def __call__(self, model, input_ids, cache):
        logits = super().__call__(model, input_ids, cache)
        return torch.zeros_like(logits).index_fill_(0, torch.tensor([7]), 10.0)


def test_model_drafter_drafts_with_the_step_it_is_given(tiny_pair):
    """Every forward is the step's: a step that favours 7 drafts 7s. The step hears the prompt
    once per generation (start) and after that only what the context gained (observe), so a
    per-generation step (draft_vocab.RestrictedStep) never re-reads the context."""
    from specbench.core.sampling import SamplingConfig

    _, drafter_model = tiny_pair
    step = FavourSeven()
    drafter = ModelDrafter(drafter_model, step=step)
    drafter.prefill(torch.tensor([3, 17, 42]))
    assert drafter.propose(torch.tensor([3, 17, 42, 8]), 3, always).tokens.tolist() == [7, 7, 7]
    drafter.commit(1)
    drafter.propose(torch.tensor([3, 17, 42, 8, 7, 9]), 2, always)
    assert step.started == [[3, 17, 42]] and step.observed == [[8], [7, 9]]
    drafter.start(SamplingConfig(), None)
    drafter.propose(torch.tensor([5, 6]), 1, always)
    assert step.started == [[3, 17, 42], [5, 6]] and len(step.observed) == 2
    assert isinstance(ModelDrafter(drafter_model).step, ModelForward)  # the default: the model's own forward


def test_the_model_drafter_never_imports_the_speed_machinery():
    """drafters/ reaches into speed/ only in make_drafter, lazily, for a vocabulary limit: a
    reader of the model drafter never steps through an AVX-512 build path, and importing
    specbench.drafters loads nothing of speed/. Reads the source, every import statement."""
    import ast
    from pathlib import Path

    import specbench.drafters

    def speed_imports(nodes) -> list[str]:
        names = []
        for node in nodes:
            if isinstance(node, ast.Import):
                names += [alias.name for alias in node.names]
            elif isinstance(node, ast.ImportFrom):
                module = "specbench." * (node.level >= 2) + (node.module or "")  # from ..speed import x
                names += [module] + [f"{module}.{alias.name}" for alias in node.names]
        return [name for name in names if name.startswith("specbench.speed")]

    folder = Path(specbench.drafters.__file__).parent
    for path in sorted(folder.glob("*.py")):
        tree = ast.parse(path.read_text(), filename=str(path))
        nodes = tree.body if path.name == "__init__.py" else list(ast.walk(tree))  # __init__: top level only
        assert not speed_imports(nodes), f"drafters/{path.name} imports {speed_imports(nodes)}"
    assert speed_imports(ast.walk(ast.parse((folder / "__init__.py").read_text())))  # the check sees the lazy one


@pytest.mark.parametrize("name", ["model", "model+lookup"])
def test_a_declined_forward_is_never_run(close_pair, name):
    """A policy that declines every drafter forward (forward_pays) gets plain decoding from
    the model drafter with no forward at all (its deferred prefill included), and
    model+lookup still drafts its free copies; the output is plain greedy decoding's."""
    from specbench.core.generate import GenerationConfig, plain_generate, speculative_generate

    class Declining(FixedGamma):
        def forward_pays(self, step, feed):
            return False

    target, drafter_model = close_pair
    fed = []
    hook = drafter_model.register_forward_hook(lambda m, args, out: fed.append(1))
    prompt, config = [2, 2, 2, 2, 2, 2, 2, 2, 40, 13], GenerationConfig(max_new_tokens=40)
    try:
        result = speculative_generate(target, make_drafter(name, drafter_model), prompt, config, Declining(3))
    finally:
        hook.remove()
    assert fed == [] and result.token_ids == plain_generate(target, prompt, config).token_ids
    assert all(step.drafter_feeds == [] for step in result.steps)
    assert (result.stats.drafted > 0) == (name == "model+lookup")


# ---------------------------------------------------------------------------- the kept head


def test_a_kept_head_is_read_once_and_its_cache_copied_into_later_generations():
    """The first generation whose prompt begins with the whole head reads it as it would have
    (the head alone, then the rest: Draft.feeds counts both, as it was paid); every later
    one starts with a copy of the head's cache over the ids its prompt shares with it, feeds
    only the rest, and drafts what a drafter without a head drafts."""
    from copy import deepcopy

    from specbench.core.cache import cache_length
    from specbench.drafters.model import keep_head, kept_length

    model = tiny_model(1, layers=1, hidden=16)
    unkept = deepcopy(model)
    keep_head(model, [3, 17, 42, 8])
    assert kept_length(model, [3, 17, 42, 8, 29]) == 4 and kept_length(model, [3, 17, 42, 8]) == 3
    assert kept_length(model, [3, 17, 40]) == 2 and kept_length(unkept, [3, 17, 42, 8, 29]) == 0
    fed = []
    hook = model.register_forward_hook(
        lambda m, args, kwargs, out: fed.append(kwargs["input_ids"].shape[-1]), with_kwargs=True
    )
    runs = []
    try:
        for prompt in ([3, 17, 40, 9, 2], [3, 17, 42, 8, 29, 5], [3, 17, 42, 8, 11], [3, 17, 40, 9]):
            drafter = ModelDrafter(model)
            drafter.prefill(torch.tensor(prompt))
            starts = cache_length(drafter.cache)
            context = torch.tensor([*prompt, 7])  # the first-target pass's token
            runs.append((starts, drafter.propose(context, 3, always), context))
            fed.append("|")
    finally:
        hook.remove()
    assert [starts for starts, _, _ in runs] == [0, 0, 4, 2]  # nothing kept before a whole head was read
    assert [draft.feeds for _, draft, _ in runs] == [[6, 1, 1], [7, 1, 1], [2, 1, 1], [3, 1, 1]]
    assert fed == [6, 1, 1, "|", 4, 3, 1, 1, "|", 2, 1, 1, "|", 3, 1, 1, "|"]
    for _, draft, context in runs:
        fresh = ModelDrafter(unkept).propose(context, 3, always)
        assert draft.tokens.tolist() == fresh.tokens.tolist()
        assert torch.allclose(draft.probs, fresh.probs, atol=1e-5)
    keep_head(model, [3, 17, 42, 8])  # again (the model's kernels changed): read anew
    drafter = ModelDrafter(model)
    drafter.prefill(torch.tensor([3, 17, 42, 8, 11]))
    assert cache_length(drafter.cache) == 0
    keep_head(model, [])
    assert kept_length(model, [3, 17, 42, 8, 29]) == 0


def test_a_drafter_with_a_kept_head_keeps_greedy_parity(close_pair):
    """Speculative decoding over prompts that share a head, the head kept from the first:
    every output is plain greedy decoding's, and the drafter's later reads are shorter."""
    from copy import deepcopy

    from specbench.core.generate import GenerationConfig, plain_generate, speculative_generate
    from specbench.drafters.model import keep_head

    target, drafter_model = close_pair
    drafter_model = deepcopy(drafter_model)  # the session's pair keeps no head
    keep_head(drafter_model, [1, 5, 9, 12])
    config = GenerationConfig(max_new_tokens=30)
    first_reads, accepted = [], 0
    for prompt in ([1, 5, 9, 12, 3, 8], [1, 5, 9, 12, 40, 13, 61], [1, 5, 2, 2], [1, 5, 9, 12, 3, 8]):
        for name in ("model", "model+lookup"):
            result = speculative_generate(target, make_drafter(name, drafter_model), prompt, config, FixedGamma(3))
            assert result.token_ids == plain_generate(target, prompt, config).token_ids
            accepted += result.stats.accepted
            first_reads.append(next(s.drafter_feeds[0] for s in result.steps if s.drafter_feeds))
    assert accepted > 0
    assert first_reads[:2] == [7, 3] and first_reads[-2:] == [3, 3]  # prompt + first token; less the head
