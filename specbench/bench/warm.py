"""A sweep's warm starts for the cost policy: each run starts from what the prompts before
it taught, as `generate` starts from what earlier generations kept.

The evidence comes from the predicted runs of phase 1 (their replays' own calibration,
recorded in rounds.jsonl), folded in the sweep's prompt order with calibration.keep, the
rule generate's cache keeps by. A run (predicted or timed) of drafter D at gamma g on
prompt i starts from the fold over the prompts before i of D's predictions at g: never
from its own prompt's verdicts, so no prompt is measured on what it taught. The first
prompt starts cold. A predicted row and the timed run of the same configuration start
alike, so the timed policy decides as its prediction did. A sharded sweep's warm starts
come from its own shard's prompts.
"""

from __future__ import annotations

from specbench.bench.plan import PlannedRun
from specbench.policies.calibration import Evidence, keep

WarmKey = tuple[str, int, str, int]  # drafter label, gamma, prompt id, repeat


class WarmBook:
    """The predicted runs' evidence by (drafter, gamma, prompt, repeat); order: the sweep's
    prompt ids in order; found: what an interrupted sweep recorded (records.read_evidence)."""

    def __init__(self, order: list[str], found: dict[WarmKey, Evidence] | None = None):
        self.order = {prompt_id: i for i, prompt_id in enumerate(order)}
        self.evidence: dict[WarmKey, Evidence] = dict(found or {})

    def start(self, run: PlannedRun) -> Evidence | None:
        """The evidence run's cost policy starts from (None: cold, or not the cost policy)."""
        if run.policy != "cost" or run.gamma is None:
            return None
        here = self.order.get(run.prompt.id, -1)
        earlier = sorted(
            ((self.order[p], r), e)
            for (d, g, p, r), e in self.evidence.items()
            if d == run.drafter and g == run.gamma and self.order.get(p, here) < here
        )
        kept = None
        for _, evidence in earlier:
            kept = keep(kept, evidence)
        return kept

    def add(self, run: PlannedRun, evidence: Evidence | None) -> None:
        """A predicted run's own evidence (None: its policy keeps none)."""
        if evidence is not None and run.gamma is not None:
            self.evidence[(run.drafter, int(run.gamma), run.prompt.id, run.repeat)] = evidence
