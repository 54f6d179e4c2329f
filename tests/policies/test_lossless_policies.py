"""Every drafter with every gamma policy stays lossless.

1. Greedy parity: speculative_generate == plain_generate token for token, for each drafter
   (model, model+lookup, ngram, prompt-lookup) x each policy, on the tiny Qwen2 models of conftest. The
   model drafter is the close drafter with a sharpened head (same argmax, lower entropy), so
   egag picks varied gammas and the stop policies both stop and run on: a test guards that.
2. Sampling: the model-free drafters (one-hot q) draw from the target's exact distribution.
   Target: the trigram mock (tests/mock_lm.py) with its "next token = current + 1" entry
   boosted, and a cyclic prompt, so that n-gram and lookup drafts (which continue the cycle)
   are often accepted and often rejected (round 1: 0, 1 or 2 of 2 kept about 39/23/38% of
   the time at temperature 1), and every rejection draws from the residual. Pearson
   chi-square of the marginals of new tokens 2..4 (the ones verification decides) and of
   two joints against the exact distribution. Two wrong verifications (accept every one-hot
   draft; resample corrections from p instead of the residual) must fail the same check,
   which shows it has the power to catch them.
"""

from __future__ import annotations

from itertools import product
from types import SimpleNamespace

import pytest
import torch
from chi_square import pvalues
from conftest import PROMPTS, SHARPENED_THRESHOLDS, sharpened
from mock_lm import TrigramLM

import specbench.core.generate
import specbench.core.verify
from specbench.core.generate import GenerationConfig, plain_generate, speculative_generate
from specbench.core.sampling import SamplingConfig, logits_to_probs, sample
from specbench.core.verify import BONUS, Verdict
from specbench.drafters import DRAFTERS, make_drafter
from specbench.policies import POLICIES, Calibration, make_policy
from specbench.policies.calibration import keep

pytestmark = pytest.mark.usefixtures("single_thread")


# ---------------------------------------------------------------------------- greedy parity

MAX_NEW = 24
# costs for the "cost" policy: a CPU-like verify curve and a cheap drafter, so it both drafts and stops
COSTS = SimpleNamespace(c=0.1, verify_cost={k: 1.0 + 0.3 * (k > 1) + 0.05 * (k - 1) for k in range(1, 12)})


def policy(name: str):
    return make_policy(
        name, 3, gamma_min=1, gamma_max=6, egag_beta=0.3, threshold=SHARPENED_THRESHOLDS.get(name), costs=COSTS
    )


@pytest.fixture(scope="module")
def pairs(tiny_pair, close_pair):
    """pair name -> (target, drafter model with a sharpened head, plain greedy outputs)."""
    config = GenerationConfig(max_new_tokens=MAX_NEW)
    setups = {}
    for name, (target, drafter_model) in {"tiny_pair": tiny_pair, "close_pair": close_pair}.items():
        expected = [plain_generate(target, prompt, config).token_ids for prompt in PROMPTS]
        setups[name] = (target, sharpened(drafter_model, 30.0), expected)
    return setups


_RUNS: dict[tuple[str, str, str], list] = {}


def run_all_prompts(pairs, pair, drafter_name, policy_name):
    """Speculative greedy runs over PROMPTS, memoized: the guard test reuses the parity runs."""
    key = (pair, drafter_name, policy_name)
    if key not in _RUNS:
        target, drafter_model, _ = pairs[pair]
        drafter = make_drafter(drafter_name, drafter_model)
        config = GenerationConfig(max_new_tokens=MAX_NEW)
        _RUNS[key] = [speculative_generate(target, drafter, prompt, config, policy(policy_name)) for prompt in PROMPTS]
    return _RUNS[key]


# the model drafter on both conftest pairs; the model-free drafters need only the target
CASES = [
    ("model", "close_pair"),
    ("model", "tiny_pair"),
    ("model+lookup", "close_pair"),
    ("ngram", "close_pair"),
    ("prompt-lookup", "close_pair"),
]
assert {d for d, _ in CASES} == set(DRAFTERS)


@pytest.mark.parametrize("policy_name", POLICIES)
@pytest.mark.parametrize("drafter_name, pair", CASES)
def test_greedy_parity(pairs, drafter_name, pair, policy_name):
    expected = pairs[pair][2]
    for prompt, want, result in zip(PROMPTS, expected, run_all_prompts(pairs, pair, drafter_name, policy_name)):
        assert result.token_ids == want, (drafter_name, pair, policy_name, prompt)
        for step in result.steps[1:]:
            assert len(step.draft_tokens) <= step.gamma


@pytest.mark.parametrize("drafter_name", ["model", "model+lookup"])
def test_greedy_parity_of_a_warm_cost_policy(pairs, drafter_name):
    """Started warm from what its runs on every prompt kept, the cost policy still decodes
    each prompt token for token as plain greedy decoding."""
    target, drafter_model, expected = pairs["close_pair"]
    kept = None
    for _, chosen in _cost_runs(target, drafter_model, drafter_name, None):
        kept = keep(kept, chosen.calibration.evidence())
    for (result, _), want in zip(_cost_runs(target, drafter_model, drafter_name, kept), expected):
        assert result.token_ids == want


def _cost_runs(target, drafter_model, drafter_name, warm):
    config = GenerationConfig(max_new_tokens=MAX_NEW)
    runs = []
    for prompt in PROMPTS:
        chosen = make_policy("cost", 3, gamma_max=6, costs=COSTS, warm=warm)
        runs.append(
            (speculative_generate(target, make_drafter(drafter_name, drafter_model), prompt, config, chosen), chosen)
        )
    return runs


def test_parity_runs_exercise_the_policies(pairs):
    """The parity tests prove little if egag always picked one gamma, the stop policies never
    (or always) stopped, or the model-free drafters never had a draft accepted and rejected."""
    steps = lambda d, p: [s for r in run_all_prompts(pairs, "close_pair", d, p) for s in r.steps[1:]]
    egag = steps("model", "egag")
    decided = [s for s in egag if s.policy_info]  # {} when no draft step came (no room left)
    assert len({s.policy_info["gamma"] for s in decided}) >= 3
    assert all(len(s.draft_tokens) == s.policy_info["gamma"] for s in decided if s.gamma == 6)
    for name in ("entropy-stop", "confidence-stop"):
        stopped = [s.policy_info["stopped_at"] for s in steps("model", name)]
        assert any(x is None for x in stopped) and any(x is not None for x in stopped), name
    heuristic = {s.policy_info["gamma"] for s in steps("model", "heuristic")}
    assert len(heuristic) >= 3
    cost = [s for s in steps("model", "cost")]
    assert any(len(s.draft_tokens) >= 2 for s in cost)  # drafts several when they pay
    assert any(s.policy_info.get("stopped_at") is not None for s in cost)  # and stops when not
    for name in ("ngram", "prompt-lookup"):
        rounds = steps(name, "fixed")
        assert any(s.accepted > 0 for s in rounds) and any(s.accepted < len(s.draft_tokens) for s in rounds)
        assert any(not s.draft_tokens for s in rounds)  # no match: a plain step
        assert all(p is None for s in rounds for p in s.draft_probs)
    for name in POLICIES:  # model+lookup: both copy rounds (no q) and model rounds, accepted and not
        rounds = [s for s in steps("model+lookup", name) if s.draft_tokens]
        copies = [s for s in rounds if s.draft_probs[0] is None]
        assert copies and len(copies) < len(rounds), name
        assert any(s.accepted > 0 for s in copies) and any(s.accepted < len(s.draft_tokens) for s in copies), name


# ---------------------------------------------------------------------------- sampling

VOCAB = 6
PROMPT = list(range(VOCAB)) * 2  # 0 1 2 3 4 5 0 1 2 3 4 5: the drafters continue the cycle
NEW = 4  # x1 comes from the first-target pass; round 1 drafts x2, x3 and verification decides x2..x4
SAMPLES = 1000
SETTINGS = {
    "temperature": SamplingConfig(temperature=1.0),
    "top-k": SamplingConfig(temperature=0.8, top_k=3),
}
VIEWS = {
    "x2": lambda s: s[1],
    "x3": lambda s: s[2],
    "x4": lambda s: s[3],
    "x1x2": lambda s: s[:2],
    "x2x3": lambda s: s[1:3],
}


@pytest.fixture(scope="module")
def cyclic_target() -> TrigramLM:
    gen = torch.Generator().manual_seed(2)  # drafts: 61% accept the 1st, 38% both
    table = 0.7 * torch.randn(VOCAB, VOCAB, VOCAB, generator=gen)  # [prev, cur, next] logits
    for cur in range(VOCAB):
        table[:, cur, (cur + 1) % VOCAB] += 2.5
    return TrigramLM(table)


def exact_joint(model: TrigramLM, sampling: SamplingConfig) -> dict[tuple[int, ...], float]:
    """P(x1..x4 | PROMPT) under the target after the sampling processor."""
    rows = {
        (a, b): logits_to_probs(model.next_logits(a, b), sampling).tolist() for a, b in product(range(VOCAB), repeat=2)
    }
    joint = {}
    for seq in product(range(VOCAB), repeat=NEW):
        context, prob = PROMPT[-2:] + list(seq), 1.0
        for i, token in enumerate(seq):
            prob *= rows[(context[i], context[i + 1])][token]
        joint[seq] = prob
    return joint


def sample_runs(
    target, drafter_name: str, sampling: SamplingConfig, n: int = SAMPLES, new_policy=lambda: make_policy("fixed", 2)
) -> list:
    drafter = make_drafter(drafter_name)
    runs = []
    for seed in range(n):
        config = GenerationConfig(max_new_tokens=NEW, sampling=sampling, seed=seed)
        runs.append(speculative_generate(target, drafter, PROMPT, config, new_policy()))
    return runs


def sample_outputs(target, drafter_name: str, sampling: SamplingConfig, n: int = SAMPLES) -> list[tuple[int, ...]]:
    return [tuple(run.token_ids) for run in sample_runs(target, drafter_name, sampling, n)]


def reluctant_cost_policy():
    """The cost policy with its bin for drafts without q just below the price of a first
    draft (a rate of 0.275 against 0.3): it refuses round 1, and learns from that refused
    draft's verdict whether round 2 drafts. So its rounds depend on the tokens sampled so far."""
    policy = make_policy(
        "cost",
        3,
        costs=SimpleNamespace(c=0.0, verify_cost={k: 1.0 + 0.6 * (k > 1) + 0.05 * (k - 1) for k in range(1, 8)}),
    )
    first = policy.calibration.by_top[0]
    first.successes[Calibration.BINS], first.trials[Calibration.BINS] = 0.55, 2.0
    return policy


@pytest.mark.parametrize("drafter_name", ["ngram", "prompt-lookup"])
def test_the_cost_policy_learning_from_refused_table_drafts_keeps_the_target_distribution(cyclic_target, drafter_name):
    """The cost policy learns from the table drafts it refuses, through the token the target
    then emits; its later rounds depend on that sampled token, and the output still follows
    the target. Guard: round 2 drafts in some runs and not in others."""
    sampling = SETTINGS["temperature"]
    runs = sample_runs(cyclic_target, drafter_name, sampling, new_policy=reluctant_cost_policy)
    assert all(len(run.steps[1].draft_tokens) == 0 for run in runs)  # round 1 refused
    second = [len(run.steps[2].draft_tokens) > 0 for run in runs if len(run.steps) > 2]
    assert 0.2 < sum(second) / len(second) < 0.9, sum(second) / len(second)
    found = pvalues([tuple(run.token_ids) for run in runs], exact_joint(cyclic_target, sampling), VIEWS)
    assert min(found.values()) > 1e-3, found


@pytest.mark.parametrize("drafter_name, setting", [("ngram", "temperature"), ("prompt-lookup", "top-k")])
def test_one_hot_drafters_keep_the_target_distribution(cyclic_target, drafter_name, setting):
    sampling = SETTINGS[setting]
    found = pvalues(sample_outputs(cyclic_target, drafter_name, sampling), exact_joint(cyclic_target, sampling), VIEWS)
    assert min(found.values()) > 1e-3, found


@pytest.mark.parametrize("drafter_name", ["ngram", "prompt-lookup"])
def test_sampling_setup_accepts_and_rejects(cyclic_target, drafter_name):
    """Guards the test above: round 1 must draft 2 tokens, kept neither rarely nor always."""
    drafted = accepted = 0
    for seed in range(200):
        config = GenerationConfig(max_new_tokens=NEW, sampling=SETTINGS["temperature"], seed=seed)
        result = speculative_generate(
            cyclic_target, make_drafter(drafter_name), PROMPT, config, make_policy("fixed", 2)
        )
        first_round = result.steps[1]
        assert len(first_round.draft_tokens) == 2
        drafted += 2
        accepted += first_round.accepted
    assert 0.3 < accepted / drafted < 0.8


def accept_every_draft(draft_tokens, draft_probs, target_probs, generator):
    """A wrong verification: keeps every draft, then draws the bonus from p."""
    k = draft_tokens.shape[0]
    token = int(sample(target_probs[k], generator))
    return Verdict(k, token, BONUS, float(target_probs[k, token]), [])


@pytest.mark.parametrize(
    "target_name, wrong",
    [
        ("verify_sampling", accept_every_draft),
        ("residual_distribution", lambda p, q: p),  # corrections from p, not norm(max(0, p - q))
    ],
)
def test_the_check_fails_for_a_wrong_verification(cyclic_target, monkeypatch, target_name, wrong):
    """Power check: the chi-square above rejects a wrong one-hot verification."""
    module = specbench.core.generate if target_name == "verify_sampling" else specbench.core.verify
    monkeypatch.setattr(module, target_name, wrong)
    sampling = SETTINGS["temperature"]
    found = pvalues(
        sample_outputs(cyclic_target, "ngram", sampling, n=400), exact_joint(cyclic_target, sampling), VIEWS
    )
    assert min(found.values()) < 1e-6, found
