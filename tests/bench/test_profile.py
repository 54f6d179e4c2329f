"""Predictions from a recorded path against real runs, on tiny models: under greedy decoding
a replay must count what speculative_generate counts, for every drafter and fixed gamma 1..8."""

from __future__ import annotations

from dataclasses import replace

import pytest
import torch
from conftest import noisy_copy, tiny_model
from gguf_tiny import quantize_to_q4k

from specbench.bench.profile import ORACLE_POLICY, predict, record_path
from specbench.bench.replay import Acceptance, RecordedPath, position_counts
from specbench.core.attention import use_row_invariant_attention
from specbench.core.generate import GenerationConfig, plain_generate, speculative_generate
from specbench.core.sampling import SamplingConfig
from specbench.drafters import DRAFTERS, make_drafter
from specbench.policies import make_policy
from specbench.speed import native
from specbench.speed.lean_step import lean_decoder
from specbench.speed.quantize import quantize_linears, quantize_target

pytestmark = pytest.mark.usefixtures("single_thread")

PROMPTS = [[5, 9, 11, 5, 9, 11, 5, 9], [3, 14, 15, 9, 2, 6, 5, 3, 5, 8, 9, 7, 9]]


@pytest.fixture(scope="module")
def pair():
    target = tiny_model(0).eval()
    return target, noisy_copy(target, 0.3, seed=1).eval()


def _real(target, drafter_model, prompt, drafter, policy, gamma, gen, vocab=0, costs=None):
    made = make_drafter(drafter, drafter_model, vocab, gen.eos_token_ids)
    return speculative_generate(target, made, prompt, gen, make_policy(policy, gamma, costs=costs))


@pytest.mark.parametrize("drafter", DRAFTERS)
def test_greedy_prediction_counts_what_real_runs_count(pair, drafter):
    target, drafter_model = pair
    gen = GenerationConfig(max_new_tokens=40)
    accepted = 0
    for prompt in PROMPTS:
        output = plain_generate(target, prompt, gen).token_ids
        path = record_path(target, drafter_model, prompt, output, gen)
        for gamma in range(1, 9):
            real = _real(target, drafter_model, prompt, drafter, "fixed", gamma, gen)
            predicted = predict(path, drafter, "fixed", gamma, gen)
            got = (predicted.stats.target_forwards, predicted.stats.drafted, predicted.stats.accepted)
            want = (real.stats.target_forwards, real.stats.drafted, real.stats.accepted)
            assert got == want, (drafter, gamma)
            assert [s.drafter_feeds for s in predicted.steps] == [s.drafter_feeds for s in real.steps]
            assert predicted.positions == {i: (float(r), float(a)) for i, (r, a) in position_counts(real.steps).items()}
            accepted += real.stats.accepted
    assert accepted > 0  # the pair agrees often enough for the comparison to mean something


def test_adaptive_policies_replay_as_they_run(pair):
    """The cost and heuristic policies see the same rows and verdicts in a replay (greedy, no
    near ties on the path here), so they make the same rounds."""
    target, drafter_model = pair
    gen = GenerationConfig(max_new_tokens=40)
    costs = type("Costs", (), {"c": 0.2, "verify_cost": {1: 1.0, 2: 1.1, 3: 1.2}})()
    prompt = PROMPTS[1]
    output = plain_generate(target, prompt, gen).token_ids
    path = record_path(target, drafter_model, prompt, output, gen)
    for policy in ("heuristic", "cost", "egag"):
        real = _real(target, drafter_model, prompt, "model", policy, 6, gen, costs=costs)
        predicted = predict(path, "model", policy, 6, gen, costs=costs)
        assert [(len(s.draft_tokens), s.accepted) for s in predicted.steps] == [
            (len(s.draft_tokens), s.accepted) for s in real.steps
        ], policy


def test_restricted_vocabulary_is_replayed(pair):
    target, drafter_model = pair
    gen = GenerationConfig(max_new_tokens=40)
    prompt = PROMPTS[1]
    output = plain_generate(target, prompt, gen).token_ids
    path = record_path(target, drafter_model, prompt, output, gen)
    for gamma in (2, 5):
        real = _real(target, drafter_model, prompt, "model", "fixed", gamma, gen, vocab=20)
        predicted = predict(path, "model", "fixed", gamma, gen, draft_vocab=20)
        assert predicted.stats.target_forwards == real.stats.target_forwards
        assert predicted.stats.accepted == real.stats.accepted


def test_oracle_drafts_only_what_is_accepted_and_bounds_fixed(pair):
    target, drafter_model = pair
    gen = GenerationConfig(max_new_tokens=40)
    output = plain_generate(target, PROMPTS[0], gen).token_ids
    path = record_path(target, drafter_model, PROMPTS[0], output, gen)
    oracle = predict(path, "model", ORACLE_POLICY, 8, gen)
    assert oracle.stats.drafted == oracle.stats.accepted
    for gamma in range(1, 9):
        assert oracle.stats.target_forwards <= predict(path, "model", "fixed", gamma, gen).stats.target_forwards


@pytest.mark.parametrize("drafter", ["model", "model+lookup"])
def test_the_oracle_pays_for_every_id_its_drafter_reads(pair, drafter):
    """A drafter run in the oracle's kept model rounds alone reads each context id once, in
    the first forward after it: the prompt in the first kept round, ids that dropped rounds
    (or copies) would have read in the next kept one. So the kept rounds' forwards feed
    exactly the context up to the last kept round, and its drafts but the last."""
    target, drafter_model = pair
    gen = GenerationConfig(max_new_tokens=40)
    skipped = 0
    for prompt in PROMPTS:
        output = plain_generate(target, prompt, gen).token_ids
        oracle = predict(record_path(target, drafter_model, prompt, output, gen), drafter, ORACLE_POLICY, 8, gen)
        model_rounds = [s for s in oracle.steps if s.round > 0 and s.drafter_feeds]
        assert model_rounds and model_rounds[0].drafter_feeds[0] >= len(prompt)
        assert all(len(s.drafter_feeds) == len(s.draft_tokens) for s in model_rounds)
        first, last = model_rounds[0], model_rounds[-1]
        read = sum(sum(s.drafter_feeds) for s in model_rounds)
        assert read == len(prompt) + last.position + len(last.draft_tokens) - 1
        # rounds that ran no forward between them: dropped (the inner drafter read the context) or copies
        skipped += sum(first.round < s.round < last.round and not s.drafter_feeds for s in oracle.steps)
    assert skipped > 0


def test_the_oracle_drafts_nothing_where_accepted_drafts_cannot_pay(pair):
    """Priced with a drafter step costing 3 target steps, no accepted run pays for its
    drafter forwards: the oracle drafts nothing and is plain decoding, never below it. At a
    cheap drafter it keeps every accepted draft, as it does unpriced."""
    from specbench.bench.costs import Costs

    target, drafter_model = pair
    gen = GenerationConfig(max_new_tokens=40)
    output = plain_generate(target, PROMPTS[0], gen).token_ids
    path = record_path(target, drafter_model, PROMPTS[0], output, gen)
    curve = {k: 1.0 + 0.1 * (k - 1) for k in range(1, 10)}

    def priced(c):
        return Costs(c=c, target_step_seconds=0.01, drafter_step_seconds=0.01 * c, verify_cost=curve, context_tokens=9)

    unpriced = predict(path, "model", ORACLE_POLICY, 8, gen)
    assert unpriced.stats.accepted > 0
    slow = predict(path, "model", ORACLE_POLICY, 8, gen, costs=priced(3.0))
    assert slow.stats.drafted == 0 and slow.stats.target_forwards == len(output)
    cheap = predict(path, "model", ORACLE_POLICY, 8, gen, costs=priced(0.1))
    assert (cheap.stats.drafted, cheap.stats.target_forwards) == (
        unpriced.stats.drafted,
        unpriced.stats.target_forwards,
    )


def test_model_and_lookups_oracle_takes_copies_alone_where_the_read_costs_more(pair):
    """The tiny target's answers repeat themselves, so model+lookup copies much of them. With
    a cheap drafter read, its oracle keeps model rounds; with one that costs 60 drafter steps,
    its model rounds' oracle would pay that read, and the oracle is its copies alone. Either
    way it bounds the cost policy, which declines such a read."""
    from specbench.bench.costs import Costs
    from specbench.bench.profile import _speedup

    target, drafter_model = pair
    gen = GenerationConfig(max_new_tokens=40)
    curve = {k: 1.0 + 0.1 * (k - 1) for k in range(1, 10)}
    cheap = {n: 1.0 + 0.1 * (n - 1) for n in range(1, 17)}
    heavy = {**{n: 1.0 + 0.1 * (n - 1) for n in range(1, 5)}, 8: 60.0, 16: 120.0}
    for prompt in PROMPTS:
        output = plain_generate(target, prompt, gen).token_ids
        path = record_path(target, drafter_model, prompt, output, gen)
        for read, model_rounds in ((cheap, True), (heavy, False)):
            costs = Costs(0.5, 0.01, 0.005, curve, len(prompt), drafter_cost=read)
            oracle = predict(path, "model+lookup", ORACLE_POLICY, 8, gen, costs=costs)
            policy = predict(path, "model+lookup", "cost", 8, gen, costs=costs)
            assert any(s.drafter_feeds for s in oracle.steps) == model_rounds
            assert oracle.stats.accepted > 0 and _speedup(oracle, costs) >= _speedup(policy, costs)


def test_the_oracle_weighs_the_loops_work_a_round_saves():
    """One accepted draft from one drafter forward at c = 0.75 and v(2) = 1.3 costs 2.05
    steps for 2 tokens, more than two rounds without drafts (2 steps) with no loop work, less
    with 0.1 of a step of it per round (2.15 against 2.2): a round saved is worth its loop."""
    from specbench.bench.costs import Costs
    from specbench.bench.profile import oracle_pays

    curve = {k: 1.0 + 0.3 * (k - 1) for k in range(1, 10)}
    costs = Costs(c=0.75, target_step_seconds=0.01, drafter_step_seconds=0.0075, verify_cost=curve, context_tokens=9)
    assert not oracle_pays(costs)(1, 1)
    assert oracle_pays(replace(costs, loop_seconds=0.001))(1, 1)


def test_greedy_acceptance_compares_with_the_path():
    path = RecordedPath([1], [4, 5, 6, 7])
    from specbench.core.protocols import Draft

    draft = Draft(torch.tensor([5, 6, 9]), None)
    assert Acceptance(path).accepted(1, draft) == 2
    assert Acceptance(path).accepted(2, draft) == 0


def test_sampled_acceptance_is_sum_of_min_p_q():
    """With one draft position and a uniform below/above alpha = sum min(p, q) the verdict
    flips exactly at alpha."""
    from specbench.core.protocols import Draft

    p = torch.tensor([[0.5, 0.5, 0.0], [0.2, 0.3, 0.5]])
    path = RecordedPath([1], [0, 2], SamplingConfig(temperature=1.0), target_probs=p)
    q = torch.tensor([[0.0, 0.5, 0.5]])  # sum min(p[1], q) = 0.0 + 0.3 + 0.5 = 0.8
    draft = Draft(torch.tensor([1]), q)
    assert Acceptance(path, torch.tensor([0.0, 0.79], dtype=torch.float64)).accepted(1, draft) == 1
    assert Acceptance(path, torch.tensor([0.0, 0.81], dtype=torch.float64)).accepted(1, draft) == 0
    table = Draft(torch.tensor([2]), None)  # a table draft of token 2: alpha = p(2) = 0.5
    assert Acceptance(path, torch.tensor([0.0, 0.49], dtype=torch.float64)).accepted(1, table) == 1
    assert Acceptance(path, torch.tensor([0.0, 0.51], dtype=torch.float64)).accepted(1, table) == 0


def test_sampled_prediction_tracks_real_runs(pair):
    """Expected target forwards from replays on sampled paths vs real sampled runs, averaged
    over seeds: within 15% (the replay's assumptions are approximations)."""
    target, drafter_model = pair
    sampling = SamplingConfig(temperature=0.7)
    predicted, real = [], []
    for seed in range(6):
        gen = GenerationConfig(max_new_tokens=40, sampling=sampling, seed=seed)
        output = plain_generate(target, PROMPTS[1], gen).token_ids
        path = record_path(target, drafter_model, PROMPTS[1], output, gen)
        predicted.append(predict(path, "model", "fixed", 4, gen).stats.target_forwards)
        real.append(_real(target, drafter_model, PROMPTS[1], "model", "fixed", 4, gen).stats.target_forwards)
    assert abs(sum(predicted) / sum(real) - 1) < 0.15, (predicted, real)


@pytest.mark.needs_kernel("linear", "torch-int8")
@pytest.mark.parametrize("dtype", ["int8", "q4k"])
@pytest.mark.parametrize("drafter", ["model", "model+lookup"])
def test_a_quantized_drafter_with_a_restricted_head_is_predicted_exactly(drafter, dtype):
    """The default pair's arrangement in small: an int8 target with row-invariant attention,
    a bf16 int8 or q4k drafter drafting over part of the vocabulary through the lean forward
    (q4k: its layers as fused_step.py's native calls), head dim 32 (where fused attention
    rounds a block of rows unlike single rows). Every row the drafter feeds (one-row steps,
    two-row catch-ups, longer catch-ups after copied drafts) is computed as a one-row step,
    so the profile's path_logits predict every round."""
    if dtype == "q4k" and native.layer_kernel() is None:
        pytest.skip(f"q4k_layer is not built here: {native.layer_why_not()}")
    target = tiny_model(0, hidden=128, max_positions=512)
    quantize_target(target)
    use_row_invariant_attention(target)
    drafter_model = noisy_copy(tiny_model(0, hidden=128, max_positions=512), 0.3, seed=1).to(torch.bfloat16)
    if dtype == "q4k":
        quantize_to_q4k(drafter_model)
        assert lean_decoder(drafter_model).fused is not None
    quantize_linears(drafter_model)
    gen = GenerationConfig(max_new_tokens=60)
    accepted = 0
    for prompt in PROMPTS:
        output = plain_generate(target, prompt, gen).token_ids
        path = record_path(target, drafter_model, prompt, output, gen, draft_vocab=16)
        for gamma in range(1, 9):
            real = _real(target, drafter_model, prompt, drafter, "fixed", gamma, gen, vocab=16)
            assert real.token_ids == output
            predicted = predict(path, drafter, "fixed", gamma, gen, draft_vocab=16)
            got = (predicted.stats.target_forwards, predicted.stats.drafted, predicted.stats.accepted)
            assert got == (real.stats.target_forwards, real.stats.drafted, real.stats.accepted), gamma
            accepted += real.stats.accepted
    assert accepted > 0


@pytest.mark.needs_kernel("linear", "torch-int8")
@pytest.mark.parametrize("drafter", ["model", "model+lookup"])
def test_a_kept_head_is_predicted_as_real_runs_read_it(drafter):
    """The default pair's arrangement (the test above) with a head both prompts begin with,
    kept by the drafter: the path says generations start with it, and once a first real
    run has read it, every real run feeds what its prediction feeds and counts what it
    counts (the q4k drafter's rows are one-row steps' bits, however the prompt is split)."""
    from specbench.drafters.model import keep_head

    if native.layer_kernel() is None:
        pytest.skip(f"q4k_layer is not built here: {native.layer_why_not()}")
    target = tiny_model(0, hidden=128, max_positions=512)
    quantize_target(target)
    use_row_invariant_attention(target)
    drafter_model = noisy_copy(tiny_model(0, hidden=128, max_positions=512), 0.3, seed=1).to(torch.bfloat16)
    quantize_to_q4k(drafter_model)
    quantize_linears(drafter_model)
    head = [5, 9, 11, 5]
    keep_head(drafter_model, head)
    gen = GenerationConfig(max_new_tokens=60)
    prompts = [[*head, 9, 11, 5, 9], [*head, 2, 6, 5, 3, 5, 8, 9, 7, 9]]
    first = _real(target, drafter_model, prompts[0], drafter, "fixed", 3, gen, vocab=16)
    assert next(s.drafter_feeds[0] for s in first.steps if s.drafter_feeds) == len(prompts[0]) + 1
    for prompt in prompts:
        output = plain_generate(target, prompt, gen).token_ids
        path = record_path(target, drafter_model, prompt, output, gen, draft_vocab=16)
        assert path.kept == len(head)
        for gamma in (1, 3, 6):
            real = _real(target, drafter_model, prompt, drafter, "fixed", gamma, gen, vocab=16)
            assert real.token_ids == output
            predicted = predict(path, drafter, "fixed", gamma, gen, draft_vocab=16)
            got = (predicted.stats.target_forwards, predicted.stats.drafted, predicted.stats.accepted)
            assert got == (real.stats.target_forwards, real.stats.drafted, real.stats.accepted), gamma
            assert [s.drafter_feeds for s in predicted.steps] == [s.drafter_feeds for s in real.steps]
    assert first.stats.accepted > 0
