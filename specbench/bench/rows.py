"""What one run of a sweep writes: its runs.csv row, its positions.csv rows and its
steps.jsonl lines, and the speedup the walltime model gives its rounds.

Pure: a row is made from the run (PlannedRun), what it counted (Measurement), the plain run
it is compared with (Baseline) and the costs it is priced with; nothing here times, reads
or writes. Kept apart from the runner so that `specbench predict` (reprice.py) prices
recorded rounds again with the same functions the sweep priced them with (predicted_price).
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field

from specbench.bench.costs import Costs
from specbench.bench.labels import BASELINE_METHOD, MEASURED, PREDICTED, PROFILE
from specbench.bench.plan import SPECBENCH, PlannedRun
from specbench.bench.runs_file import KEY_COLUMNS, output_hash
from specbench.core.stats import (
    RoundCounts,
    RoundPrices,
    RunStats,
    StepRecord,
    round_prices,
    verify_cost_at,
    walltime_speedup,
)
from specbench.policies.calibration import Evidence


@dataclass
class Measurement:
    token_ids: list[int]  # the new tokens
    stats: RunStats
    acceptance_known: bool = True
    steps: list[StepRecord] = field(default_factory=list)
    stop_reason: str | None = None
    positions: dict[int, tuple[float, float]] | None = None  # replay.position_counts (specbench runs)
    evidence: Evidence | None = None  # a predicted cost-policy run's calibration evidence (warm.py)


@dataclass(frozen=True)
class Baseline:
    tokens_per_second: float | None
    output_hash: str


def baseline_key(source: str, prompt_id: str, repeat) -> tuple[str, str, str]:
    """Which plain run a row is compared with: predictions with their phase's (PROFILE),
    measured runs with the one timed beside them (MEASURED)."""
    kind = PROFILE if source in (PROFILE, PREDICTED) else MEASURED
    return (kind, str(prompt_id), str(int(float(repeat))))


def baselines_from_rows(rows: list[dict]) -> dict[tuple[str, str, str], Baseline]:
    """The plain runs of an earlier, interrupted sweep, by baseline_key."""
    found = {}
    for row in rows:
        if row["method"] == BASELINE_METHOD:
            tps = float(row["tokens_per_second"]) if row["tokens_per_second"] else None
            found[baseline_key(row.get("source") or MEASURED, row["prompt_id"], row["repeat"])] = Baseline(
                tps, row.get("output_hash", "")
            )
    return found


def late_runs(todo: list[PlannedRun], done_rows: list[dict]) -> int:
    """How many of phase 2's pending runs join a block whose plain run is already in runs.csv
    (a resume that measures more in a finished block, as when the best gamma moved): their
    speedups compare with a plain run timed before the resume, not beside them."""
    timed = baselines_from_rows(done_rows)
    return sum(
        run.method != BASELINE_METHOD and baseline_key(MEASURED, run.prompt.id, run.repeat) in timed for run in todo
    )


def predicted_speedup(run: PlannedRun, counts: RoundCounts, costs: Costs | None) -> float | None:
    """The walltime model's speedup of a specbench run's rounds (modelled_speedup); None
    for other methods."""
    return modelled_speedup(counts, costs) if run.method == SPECBENCH else None


def modelled_speedup(counts: RoundCounts, costs: Costs | None) -> float | None:
    """stats.walltime_speedup of a run's rounds, priced by its block's measured costs in
    units of the target's single step t(1): c = drafter step / t(1), paid by each drafter
    forward the round ran, a forward over n tokens as u(n) steps (a copy or a table's guess
    runs none), v(k) as measured, v(1) = 1 (a round without drafts is a single step among
    the round's others), and the loop's own work per round (Costs.loop; 0 for costs
    without it). Plain decoding is priced by the measured plain step (Costs.plain_step),
    not by the plain run: every number here is a median of interleaved timings (costs.py),
    where the plain run is one run whose speed wanders from run to run on a shared CPU as
    much as the speedups being predicted (the sweep reports that noise floor), and pricing
    in it would carry its noise into every prediction. None without costs or rounds."""
    units = _unit_costs(costs)
    return None if units is None else walltime_speedup(counts, *units, costs.plain_step(), costs.loop())


def modelled_prices(counts: RoundCounts, costs: Costs | None) -> RoundPrices | None:
    """What modelled_speedup prices a run's rounds at, by part (stats.round_prices), in t(1);
    None without costs."""
    units = _unit_costs(costs)
    return None if units is None else round_prices(counts, *units, costs.loop())


def _unit_costs(costs: Costs | None):
    """(c, v(k), u(n)) as modelled_speedup reads a block's costs, or None without them."""
    if costs is None or not costs.verify_cost or not costs.target_step_seconds:
        return None
    c = (costs.drafter_step_seconds or 0.0) / costs.target_step_seconds

    def verify(k: int) -> float:
        return 1.0 if k == 1 else verify_cost_at(costs.verify_cost, k)

    def step_cost(n: int) -> float:
        return verify_cost_at(costs.drafter_cost, n) if costs.drafter_cost else 1.0

    return c, verify, step_cost


def predicted_price(counts: RoundCounts, baseline: Baseline | None, costs: Costs | None) -> dict:
    """The columns of a predicted row that its costs set, and all that re-pricing it with
    other costs changes (`specbench predict`, reprice.py): the walltime model's speedup as
    speedup and predicted_speedup, tokens_per_second as that speedup times its plain run's
    (the profile run's, as runs.csv reads back), and c."""
    model = modelled_speedup(counts, costs)
    tps = (
        model * baseline.tokens_per_second
        if model is not None and baseline is not None and baseline.tokens_per_second
        else None
    )
    return {
        "tokens_per_second": tps,
        "speedup": model,
        "c": costs.c if costs is not None else None,
        "predicted_speedup": model,
    }


def _speedup(run: PlannedRun, tps: float, baseline: Baseline | None) -> float | None:
    """A timed row's tokens per second over its plain run's (1.0 for the plain run itself)."""
    if run.method == BASELINE_METHOD:
        return 1.0
    if baseline is not None and baseline.tokens_per_second:
        return tps / baseline.tokens_per_second
    return None


def _identical(run: PlannedRun, m: Measurement, baseline: Baseline | None) -> bool | None:
    """Whether a greedy measured run's output is its plain run's (None where no claim holds)."""
    if run.temperature != 0 or run.method == BASELINE_METHOD or run.source == PREDICTED:
        return None
    if baseline is None or not baseline.output_hash:
        return None
    return output_hash(m.token_ids) == baseline.output_hash


def _counted(run: PlannedRun, m: Measurement) -> dict:
    """The row's counts; drafts and acceptance only where the method reports them, and a
    mean accepted length only where a round ran."""
    stats, known = m.stats, m.acceptance_known
    averaged = (known or run.method == BASELINE_METHOD) and stats.rounds
    return {
        "new_tokens": stats.new_tokens,
        "drafted": stats.drafted if known else None,
        "accepted": stats.accepted if known else None,
        "acceptance_rate": stats.acceptance_rate if known else None,
        "mean_accepted_length": stats.mean_accepted_length if averaged else None,
        "target_forwards": stats.target_forwards,
    }


def _timings(run: PlannedRun, stats: RunStats) -> dict:
    """The row's seconds: none for a predicted run; draft and verify time for specbench's."""
    names = ("prefill_seconds", "decode_seconds", "draft_seconds", "verify_seconds")
    if run.source == PREDICTED:
        return dict.fromkeys(names)
    own = run.method == SPECBENCH
    seconds = (stats.prefill_seconds, stats.decode_seconds)
    seconds += (stats.draft_seconds, stats.verify_seconds) if own else (None, None)
    return dict(zip(names, seconds))


def make_row(
    run: PlannedRun,
    m: Measurement,
    baseline: Baseline | None,
    *,
    c: float | None,
    prompt_tokens: int,
    seed: int,
    costs: Costs | None = None,
) -> dict:
    """One runs.csv row; metrics come from RunStats, speedup and parity from the baseline,
    predicted_speedup from the run's rounds and the measured costs."""
    stats = m.stats
    counts = RoundCounts.of(m.steps)
    row = {
        "source": run.source,
        "method": run.method,
        "drafter": run.drafter,
        "policy": run.policy,
        "gamma": run.gamma,
        "temperature": run.temperature,
        "prompt_id": run.prompt.id,
        "category": run.prompt.category,
        "repeat": run.repeat,
        **_counted(run, m),
        "tokens_per_second": stats.tokens_per_second,
        "speedup": _speedup(run, stats.tokens_per_second, baseline),
        "c": c,
        "identical_to_baseline": _identical(run, m, baseline),
        "predicted_speedup": predicted_speedup(run, counts, costs),
        "rounds": stats.rounds,
        "first_pass_tokens": stats.first_pass_tokens,
        "prompt_tokens": prompt_tokens,
        **_timings(run, stats),
        "stop_reason": m.stop_reason,
        "seed": seed,
        "output_hash": output_hash(m.token_ids),
    }
    if run.source == PREDICTED:  # the walltime model's speedup, in the plain run's tokens per second
        row.update(predicted_price(counts, baseline, costs))
    return row


def position_rows(run: PlannedRun, positions: dict[int, tuple[float, float]]) -> list[dict]:
    """positions.csv rows of one run: reached and accepted drafts at each draft position."""
    head = {**dict(zip(KEY_COLUMNS, run.key)), "gamma": run.gamma, "category": run.prompt.category}
    return [
        {**head, "position": i, "reached": reached, "accepted": accepted}
        for i, (reached, accepted) in sorted(positions.items())
    ]


def step_lines(run: PlannedRun, steps: list[StepRecord]) -> list[str]:
    """steps.jsonl lines: each StepRecord's fields, plus "run" naming the run it belongs to."""
    head = {"run": dict(zip(KEY_COLUMNS, run.key))}
    return [json.dumps({**head, **json.loads(step.to_json())}) for step in steps]
