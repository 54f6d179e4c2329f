"""costs.py: c and v(k) are measured, and cached per key without half-written files."""

from dataclasses import replace

import pytest
from conftest import tiny_model

from specbench.bench.costs import (
    CACHE_FORMAT,
    LONG_FEEDS,
    Costs,
    fit_verify_curve,
    for_drafter,
    isotonic,
    load_cached,
    measure_costs,
    pooled,
    save_cached,
)


def test_measure_costs_on_tiny_models():
    target, drafter = tiny_model(0, layers=2, hidden=32), tiny_model(1, layers=1, hidden=16)
    costs = measure_costs(target, drafter, list(range(1, 20)), repeats=2, max_k=4)
    assert sorted(costs.verify_cost) == [1, 2, 3, 4] and costs.verify_cost[1] == 1.0
    assert sorted(costs.verify_measured) == [1, 2, 3, 4] and costs.verify_measured[1] == 1.0
    assert costs.verify_cost[2] <= costs.verify_cost[3] <= costs.verify_cost[4]  # never falls
    assert costs.c is not None and costs.c > 0 and costs.target_step_seconds > 0
    assert sorted(costs.drafter_cost) == [1, 2, 3, 4, *LONG_FEEDS] and costs.drafter_cost[1] == 1.0  # u(n)
    u = [costs.drafter_cost[n] for n in (3, 4, *LONG_FEEDS)]
    assert u == sorted(u)  # never falls past u(2)
    assert Costs.from_meta(costs.as_meta()) == costs
    assert costs.plain_step_seconds is None and costs.plain_step() == 1.0  # asked for by a sweep only
    assert costs.loop_seconds is None and costs.loop() == 0.0
    looped = measure_costs(target, None, list(range(1, 20)), repeats=1, max_k=2, predicting=True)
    assert (
        looped.plain_step_seconds > 0 and looped.plain_step() == looped.plain_step_seconds / looped.target_step_seconds
    )
    assert looped.loop_seconds >= 0 and looped.loop() == looped.loop_seconds / looped.target_step_seconds
    assert Costs.from_meta(looped.as_meta()) == looped
    alone = measure_costs(target, None, [1, 2, 3], repeats=1, max_k=2)
    assert alone.c is None and alone.drafter_cost is None


def test_timed_forwards_include_the_loops_work_on_their_logits(monkeypatch):
    """As the decoding loop does: a plain step and a draft step pick their token (choose),
    a verify pass of k rows processes all k (logits_to_probs, then the argmax under greedy),
    with the run's sampling settings; forwards are timed with that work, not without it."""
    from specbench.bench import costs as costs_module
    from specbench.core.sampling import SamplingConfig

    calls = []
    real_choose, real_probs, real_greedy = costs_module.choose, costs_module.logits_to_probs, costs_module.greedy_tokens
    monkeypatch.setattr(
        costs_module,
        "choose",
        lambda logits, sampling, gen: (
            calls.append(("choose", tuple(logits.shape), sampling.temperature)) or real_choose(logits, sampling, gen)
        ),
    )
    monkeypatch.setattr(
        costs_module,
        "logits_to_probs",
        lambda logits, sampling: (
            calls.append(("probs", tuple(logits.shape), sampling.temperature)) or real_probs(logits, sampling)
        ),
    )
    monkeypatch.setattr(
        costs_module,
        "greedy_tokens",
        lambda logits: calls.append(("argmax", tuple(logits.shape), None)) or real_greedy(logits),
    )
    target, drafter = tiny_model(0, layers=2, hidden=32), tiny_model(1, layers=1, hidden=16)
    vocab = target.config.vocab_size
    for sampling, verify in (
        (SamplingConfig(), [("probs", (3, vocab), 0.0), ("argmax", (3, vocab), None)]),
        (SamplingConfig(temperature=0.7), [("probs", (3, vocab), 0.7)]),
    ):
        calls.clear()
        target_timer = costs_module.ForwardTimer(target, list(range(1, 9)), sampling=sampling)
        drafter_timer = costs_module.ForwardTimer(
            drafter, list(range(1, 9)), costs_module.draft_step(drafter, 0), sampling
        )
        target_timer.seconds(1)
        assert calls == [("choose", (vocab,), sampling.temperature)]  # a plain step
        calls.clear()
        target_timer.seconds(3)
        assert calls == verify  # a verify pass of 3 rows
        calls.clear()
        drafter_timer.seconds(2)
        assert calls == [("choose", (drafter.config.vocab_size,), sampling.temperature)]  # a catch-up's last row


def test_verify_curve_keeps_steps_and_pools_points_that_fall():
    """t(1) keeps its own point (one row may run another kernel); past it the curve is the
    closest non-decreasing one: steps stay (the int8 kernel's tiles of four rows), a point
    below the one before it is noise and is pooled with it."""
    assert fit_verify_curve({1: 1.0, 2: 1.5, 3: 1.4, 4: 1.9}) == pytest.approx({1: 1.0, 2: 1.45, 3: 1.45, 4: 1.9})
    steps = {
        1: 1.0,
        2: 1.19,
        3: 1.26,
        4: 1.20,
        5: 1.52,
        6: 1.94,
        7: 1.92,
        8: 1.90,
        9: 1.96,
    }  # medians measured on an AVX2 CPU
    fitted = fit_verify_curve(steps)
    assert fitted[3] == fitted[4] == pytest.approx(1.23) and fitted[5] == pytest.approx(1.52)
    assert fitted[6] == fitted[7] == fitted[8] == pytest.approx(1.92) and fitted[9] == pytest.approx(1.96)
    assert all(fitted[k] <= fitted[k + 1] for k in range(2, 9))


def test_isotonic_is_the_least_squares_non_decreasing_fit():
    assert isotonic([1.0, 3.0, 2.0, 4.0]) == pytest.approx([1.0, 2.5, 2.5, 4.0])
    assert isotonic([3.0, 2.0, 1.0]) == pytest.approx([2.0, 2.0, 2.0])
    assert isotonic([1.0, 2.0, 3.0]) == [1.0, 2.0, 3.0] and isotonic([]) == []


def test_verify_curve_never_falls():
    fitted = fit_verify_curve({1: 1.0, 2: 2.0, 3: 1.8, 4: 1.6})
    assert fitted[2] == fitted[3] == fitted[4] == pytest.approx(1.8)


def test_no_verify_costs_less_than_one_step():
    """Medians timed while another process shared the CPU (a `generate` run beside the test
    suite measured v(2) = 0.64): a forward over k tokens cannot cost less than over one."""
    fitted = fit_verify_curve({1: 0.10, 2: 0.064, 3: 0.105, 4: 0.128})
    assert fitted == pytest.approx({1: 1.0, 2: 1.0, 3: 1.05, 4: 1.28})


def test_cached_costs_round_trip_and_key_mismatch(tmp_path):
    costs = Costs(
        c=0.21,
        target_step_seconds=0.3,
        drafter_step_seconds=0.063,
        verify_cost={1: 1.0, 2: 1.6},
        context_tokens=80,
        verify_measured={1: 1.0, 2: 1.7},
    )
    save_cached(tmp_path, "pair A float32", costs)
    assert load_cached(tmp_path, "pair A float32") == costs
    assert load_cached(tmp_path, "pair B float32") is None
    assert not list(tmp_path.glob("*.tmp"))
    (saved,) = tmp_path.glob("*.json")
    older = saved.read_text().replace(
        f'"format": {CACHE_FORMAT}', f'"format": {CACHE_FORMAT - 1}'
    )  # fitted by an older version
    assert older != saved.read_text()
    saved.write_text(older)
    assert load_cached(tmp_path, "pair A float32") is None


def test_model_free_drafters_pay_no_drafter_cost():
    costs = Costs(
        c=0.21, target_step_seconds=0.3, drafter_step_seconds=0.063, verify_cost={1: 1.0, 2: 1.6}, context_tokens=80
    )
    assert for_drafter(costs, "model") == costs
    assert for_drafter(costs, "ngram").c == 0.0 and for_drafter(costs, "prompt-lookup").verify_cost == costs.verify_cost


def test_plain_steps_run_in_a_row_as_plain_decoding_does():
    """Each step feeds the token the step before chose, on the cache the step before grew
    (as plain_generate does), and the cache is back at the context afterwards; the sweep's
    plain step is the median of the second half of PLAIN_STEPS such steps, run once the
    interleaved rounds are done."""
    from specbench.bench import costs as costs_module
    from specbench.core.cache import cache_length
    from specbench.core.generate import GenerationConfig, plain_generate

    target = tiny_model(0, layers=2, hidden=32)
    context = list(range(1, 12))
    fed = []
    forward = target.forward
    target.forward = lambda *a, **kw: fed.append(kw["input_ids"][0].tolist()) or forward(*a, **kw)
    timer = costs_module.ForwardTimer(target, context)
    fed.clear()
    times = timer.plain_steps(4)
    steps_fed = list(fed)
    assert len(times) == 4 and all(t > 0 for t in times)
    plain = plain_generate(target, context + context[-1:], GenerationConfig(max_new_tokens=3, eos_token_ids=()))
    assert steps_fed == [[context[-1]]] + [[t] for t in plain.token_ids]  # each step feeds what the one before chose
    assert cache_length(timer.cache) == len(context)
    with pytest.raises(ValueError):
        costs_module.ForwardTimer(target, context, costs_module.draft_step(target, 0)).plain_steps(2)
    calls = []
    monkey = costs_module.ForwardTimer.plain_steps
    costs_module.ForwardTimer.plain_steps = lambda self, n: calls.append(n) or monkey(self, n)
    try:
        measure_costs(target, None, context, repeats=2, max_k=2, predicting=True)
        measure_costs(target, None, context, repeats=2, max_k=2)
    finally:
        costs_module.ForwardTimer.plain_steps = monkey
    assert calls == [costs_module.PLAIN_STEPS]  # for predictions only


def test_the_loops_work_is_a_rounds_time_less_its_verify_pass(monkeypatch):
    """measure_loop runs the real loop (prompt lookup, gamma 2) and charges each round what
    its verify pass (StepRecord.pass_seconds) did not take: with the pass made 5 ms slower
    by a slow forward, the loop's work stays where it was, well under the 5 ms."""
    import time

    from specbench.bench.costs import measure_loop
    from specbench.core import generate

    target = tiny_model(0, layers=2, hidden=32)
    context = [5, 6, 7, 8, 5, 6, 7, 8] * 6
    fast = measure_loop(target, context, tokens=12)
    forward = generate._target_forward
    monkeypatch.setattr(generate, "_target_forward", lambda *a: time.sleep(0.005) or forward(*a))
    slow = measure_loop(target, context, tokens=12)
    assert 0 <= fast < 0.0025 and 0 <= slow < 0.0025  # half the 5 ms each pass now takes


def _block(c, step, v5, context=150):
    return Costs(
        c=c,
        target_step_seconds=step,
        drafter_step_seconds=c * step,
        verify_cost={1: 1.0, 2: 1.2, 5: v5},
        context_tokens=context,
        verify_measured={1: 1.0, 2: 1.3, 5: v5},
        drafter_cost={1: 1.0, 2: 1.5},
    )


def test_pooled_costs_are_each_costs_median_over_similar_contexts():
    """A sweep prices with the median of its blocks' measurements: one block measured while
    something else ran (3x slow, c and v(5) off) moves nothing; blocks on a context more
    than twice as long or short are left out; the curves stay non-decreasing."""
    blocks = [
        _block(0.40, 0.10, 2.0),
        _block(0.42, 0.11, 2.2),
        _block(0.38, 0.09, 1.9),
        _block(0.60, 0.33, 1.2),
        _block(0.90, 0.50, 4.0, context=900),
    ]
    got = pooled(blocks, 150)
    assert got.c == pytest.approx(0.41) and got.target_step_seconds == pytest.approx(0.105)
    assert got.drafter_step_seconds == pytest.approx(got.c * got.target_step_seconds)  # c is still the ratio
    assert got.verify_cost == pytest.approx({1: 1.0, 2: 1.2, 5: 1.95}) and got.verify_measured[5] == pytest.approx(1.95)
    assert got.drafter_cost == {1: 1.0, 2: 1.5} and got.context_tokens == 150
    assert got.verify_cost[2] <= got.verify_cost[5]
    assert pooled(blocks, 800) == blocks[-1]  # alone within twice its context
    assert pooled(blocks, 5000) == blocks[-1]  # none that near: the nearest
    assert pooled(blocks[:1], 150) == blocks[0]
    assert got.plain_step_seconds is None and got.plain_step() == 1.0  # none of them measured it
    plains = [
        replace(b, plain_step_seconds=b.target_step_seconds * r) for b, r in zip(blocks, (0.95, 0.9, 0.96, 1.2, 1.0))
    ]
    assert pooled(plains, 150).plain_step() == pytest.approx(0.955)  # the median ratio, like c
    assert pooled(plains[:2] + blocks[2:], 150).plain_step() == pytest.approx(0.925)  # of the blocks that measured it
    loops = [replace(b, loop_seconds=b.target_step_seconds * r) for b, r in zip(blocks, (0.01, 0.02, 0.03, 0.5, 0.0))]
    assert pooled(loops, 150).loop() == pytest.approx(0.025) and got.loop() == 0.0
    no_drafter = [replace(b, c=None, drafter_step_seconds=None, drafter_cost=None) for b in blocks[:3]]
    alone = pooled(no_drafter, 150)
    assert alone.c is None and alone.drafter_step_seconds is None and alone.drafter_cost is None
    with pytest.raises(ValueError):
        pooled([], 150)


def test_a_curve_is_read_past_its_end_and_between_points_measured_further_out():
    """verify_cost_at: past a gapless curve at its mean slope from the second point; between
    the drafter's long feeds on the line between them, past the last at the last slope."""
    from specbench.core.stats import verify_cost_at

    gapless = {1: 1.0, 2: 1.4, 3: 1.6}
    assert verify_cost_at(gapless, 3) == 1.6 and verify_cost_at(gapless, 5) == pytest.approx(2.0)
    assert verify_cost_at({2: 1.4, 3: 1.6}, 1) == 1.4  # below the first point: its value
    long = {1: 1.0, 2: 1.2, 3: 1.4, 16: 3.0, 32: 4.0}
    assert verify_cost_at(long, 9) == pytest.approx(1.4 + 6 * 1.6 / 13)
    assert verify_cost_at(long, 24) == pytest.approx(3.5)
    assert verify_cost_at(long, 64) == pytest.approx(6.0)  # slope (4 - 3) / 16 past 32
    assert verify_cost_at({1: 1.0, 2: 1.2, 16: 3.0, 32: 2.5}, 64) == 2.5  # a falling last slope is flat
    assert verify_cost_at({}, 3) is None


def _key_pair():
    """A pair as cost_key reads it (tiny models, no files), and its PairConfig."""
    from types import SimpleNamespace

    from specbench.models.loading import PairConfig

    def loaded(name):
        return SimpleNamespace(name=name, spec=SimpleNamespace(identity=lambda: None), model=tiny_model(0))

    pair = SimpleNamespace(target=loaded("t"), drafter_model=loaded("d"), drafter_name="model", draft_vocab=0)
    return pair, PairConfig(dtype="float32", draft_dtype="float32")


def test_a_drafter_with_bfloat16_twins_has_costs_of_its_own():
    """Long forwards cost otherwise through twins (speed/twins.py): the cached costs, and the
    calibration kept under the same key, are not shared with the same pair without them."""
    from specbench.bench.cost_cache import cost_key
    from specbench.core.sampling import SamplingConfig

    pair, config = _key_pair()
    plain = cost_key(pair, config, "auto", SamplingConfig())
    pair.drafter_model.model.specbench_twins = True  # as twins.add_twins marks a model
    assert cost_key(pair, config, "auto", SamplingConfig()) != plain


def test_cached_costs_follow_the_kernels_c_text(monkeypatch):
    """An edit to a C kernel that leaves every bit as it was (a prefetch distance) still
    changes what a forward costs: the cache key follows the C text, so such costs are
    measured again, with no version to remember to bump."""
    from dataclasses import replace

    from specbench.bench.cost_cache import cost_key
    from specbench.core.sampling import SamplingConfig
    from specbench.speed import native

    pair, config = _key_pair()
    digest = native.sources_digest()
    assert len(digest) == 12 and digest == native.sources_digest()
    before = cost_key(pair, config, "auto", SamplingConfig())
    edited = replace(native.LIBRARIES[0], source="q6k_linear.c")  # other C text in its place
    monkeypatch.setattr(native, "LIBRARIES", (edited, *native.LIBRARIES[1:]))
    assert native.sources_digest() != digest
    assert cost_key(pair, config, "auto", SamplingConfig()) != before
