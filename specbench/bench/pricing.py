"""Which costs price each run of a sweep: the blocks' measurements of c and v(k), and the
pooled costs every prediction and measured cost policy is priced with.

A sweep measures c and v(k) as each prompt's block starts (costs_key names the block: its
prompt and repeat, or "sweep" once per sweep, and its drafter model), then, once phase 1's
plain runs have measured them all, prices each block with costs.pooled over the blocks of
its drafter model (price_blocks): one block's few dozen timings on a shared CPU are
noisier than the costs differ between prompts. The pure functions here are shared with
`specbench predict` (reprice.py), which prices a sweep again from meta.json's
costs_by_block. CostBook is the sweep's bookkeeping of them: built once with how to measure
a block and what an interrupted sweep recorded, and given to the runner, which asks it for
a run's costs and never sets its fields.
"""

from __future__ import annotations

import statistics
from collections.abc import Callable, Iterable
from dataclasses import replace

from specbench.bench.costs import Costs, for_drafter, pooled
from specbench.bench.labels import MODEL_SEPARATOR, PROFILE, label_parts
from specbench.bench.plan import PlannedRun
from specbench.drafters import parse_early_exit, uses_model


def costs_model(drafter: str, first_model: str) -> str:
    """Whose c a run's row carries: its drafter model's (drafter is a label, model@NAME),
    or the sweep's first model's for plain and drafters without a model (their c is 0;
    v(k) is the target's alike)."""
    kind, name = label_parts(drafter)
    return name if uses_model(kind) else first_model


def costs_key(prompt_id: str, repeat: int, model: str, per_prompt: bool) -> str:
    """Which measurement of c and v(k) a run uses: its prompt's block (prompt id/repeat),
    or the sweep's one measurement ("sweep"); "@NAME" after it for a named drafter model.

    costs_key("cw-01", 0, "", True) == "cw-01/0"; costs_key("cw-01", 0, "small", False) == "sweep@small"
    """
    block = f"{prompt_id}/{repeat}" if per_prompt else "sweep"
    return f"{block}{MODEL_SEPARATOR}{model}" if model else block


def price_blocks(
    block_costs: dict[str, Costs], keys: dict[str, list[str]]
) -> tuple[dict[str, Costs], dict[str, tuple[Costs, int]]]:
    """What each measured block is priced with: costs.pooled over the blocks of its drafter
    model (keys: by model name, the costs_keys of its blocks, in the sweep's order; those
    not in block_costs were not measured). Returns (the pooled costs by costs_key, and by
    model name the pool over all its blocks, what meta.json and the tables report, with
    their count). The sweep prices its predictions with it, and `specbench predict` prices
    them again with it from meta.json's costs_by_block."""
    priced, sweep_wide = {}, {}
    for name, model_keys in keys.items():
        measured = [key for key in dict.fromkeys(model_keys) if key in block_costs]
        blocks = [block_costs[key] for key in measured]
        if not blocks:
            continue
        for key in measured:
            priced[key] = pooled(blocks, block_costs[key].context_tokens)
        sweep_wide[name] = (pooled(blocks, int(statistics.median(b.context_tokens for b in blocks))), len(blocks))
    return priced, sweep_wide


def drafter_costs(costs: Costs | None, drafter: str, target_layers: int) -> Costs | None:
    """The costs a drafter pays: for_drafter's (a model-free drafter's c is 0), and for
    early-exit:N a c of N / the target's layers, the share of the target it runs (an
    estimate, not a timing: costs.py times the drafter model, not each N)."""
    layers = parse_early_exit(drafter)
    if costs is None or layers is None:
        return for_drafter(costs, drafter) if costs is not None else None
    share = layers / target_layers
    return replace(costs, c=share, drafter_step_seconds=costs.target_step_seconds * share, drafter_cost=None)


def costs_summary(costs: Costs) -> str:
    """One line: c, t(1), v(2..), the plain step and the loop's work of a measurement or a pool."""
    c = f"c = {costs.c:.3f}, " if costs.c is not None else ""
    curve = " ".join(f"{v:.2f}" for k, v in sorted(costs.verify_cost.items()) if k > 1)
    extra = f", plain step {costs.plain_step():.2f}" if costs.plain_step_seconds else ""
    extra += f", loop {costs.loop():.3f} a round" if costs.loop_seconds is not None else ""
    step = f"target step {costs.target_step_seconds * 1000:.1f} ms"
    return f"{c}{step}, v(2..{max(costs.verify_cost, default=1)}) {curve}{extra}"


def pricing_line(name: str | None, costs: Costs, count: int) -> str:
    """What a sweep prices with, for drafter model `name` ("" or None: the sweep's one):
    the line the sweep prints when it starts pricing and again when it ends."""
    pool = f"the median of {count} measurements" if count > 1 else "its one measurement"
    return f"pricing with {pool}{f' of {name}' if name else ''}: {costs_summary(costs)}"


def cost_models(runs: Iterable[PlannedRun], first_model: str) -> tuple[str, ...]:
    """The drafter models whose costs each block measures (costs_model of every run), the
    sweep's first model first."""
    return tuple(dict.fromkeys([first_model, *(costs_model(run.drafter, first_model) for run in runs)]))


class CostBook:
    """A sweep's costs: each block's measurement (block, by costs_key), what the blocks are
    priced with once phase 1 has measured them all (priced, by costs_key) and each drafter
    model's pool over all its blocks (pools, by model name, with their count).

    measure(prompt, name) times c of drafter model `name` and the target's v(k) on the
    prompt's context; on_measured(key, costs) is told of each new measurement. recorded:
    the blocks an interrupted sweep measured, which a resume reuses."""

    def __init__(
        self,
        measure: Callable[[object, str], Costs],
        *,
        models: tuple[str, ...],
        per_prompt: bool,
        target_layers: int,
        recorded: dict[str, Costs] | None = None,
        on_measured: Callable[[str, Costs], None] | None = None,
    ):
        self.measure, self.models, self.per_prompt = measure, models, per_prompt
        self.target_layers, self.on_measured = target_layers, on_measured
        self.block: dict[str, Costs] = dict(recorded or {})
        self.priced: dict[str, Costs] = {}
        self.pools: dict[str, tuple[Costs, int]] = {}

    def model(self, run: PlannedRun) -> str:
        return costs_model(run.drafter, self.models[0])

    def key(self, run: PlannedRun, name: str | None = None) -> str:
        """costs_key of run's block, for its costs_model or drafter model `name`."""
        name = self.model(run) if name is None else name
        return costs_key(run.prompt.id, run.repeat, name, self.per_prompt)

    def for_run(self, run: PlannedRun) -> Costs:
        """The costs a run's row carries (its c) and is priced with: a plain run of phase 1
        its own block's measurement (measuring the block first), any other run the pooled
        costs (for_pricing); an early-exit drafter's c is drafter_costs' estimate."""
        costs = self.for_block(run) if run.source == PROFILE else self.for_pricing(run)
        if parse_early_exit(run.drafter) is None:
            return costs
        return drafter_costs(costs, run.drafter, self.target_layers)

    def for_pricing(self, run: PlannedRun) -> Costs:
        """What run's predictions and its cost policy are priced with: the median of every
        block's measurement near its context (costs.pooled, set by price once phase 1's
        plain runs have measured them all), or its block's own before that."""
        return self.priced.get(self.key(run)) or self.for_block(run)

    def for_block(self, run: PlannedRun) -> Costs:
        """The costs of run's block, measured when the block first asks (just before its plain
        run of phase 1, on its prompt's context) for each of the models, so that the blocks'
        measurements spread over the sweep like its runs; run's own model's."""
        for name in dict.fromkeys((*self.models, self.model(run))):
            key = self.key(run, name)
            if key not in self.block:
                self.block[key] = self.measure(run.prompt, name)
                if self.on_measured is not None:
                    self.on_measured(key, self.block[key])
        return self.block[self.key(run)]

    def price(self, runs: list[PlannedRun]) -> dict[str, tuple[Costs, int]]:
        """Price every measured block of `runs` (price_blocks); returns, by model name, the
        pool over all its blocks (what meta.json and the tables report) and their count."""
        keys = {name: [self.key(run, name) for run in runs] for name in self.models}
        priced, self.pools = price_blocks(self.block, keys)
        self.priced.update(priced)
        return self.pools
