"""Replay the default configuration (model+lookup, cost policy, gamma 12) on recorded paths,
to weigh a policy change or other costs on several prompt sets without timing anything.

    python dev/policy_replay.py record PROMPTS DIR [--outputs RESULTS]
        the drafter's rows along each prompt's plain greedy output (from a sweep's
        paths.jsonl with --outputs, else decoded here), one file per prompt in DIR
        (about 75 MB a prompt of 128 tokens: delete DIR when done)
    python dev/policy_replay.py score DIR --costs FILE [--drafter-cost COSTS] [--set NAME=VALUE ...]
            [--read-head] [--c-times F] [--rows-times F] [--passes N]
        the cost policy as a sweep predicts it (each prompt warm from the ones before, in
        order) and the oracle, priced with a sweep's meta.json or a `specbench costs`
        file; --drafter-cost takes u(n) from a `specbench costs` file instead; --set
        changes a class or module constant for the run (CostAwareGamma.MODEL_PRIOR=1,
        calibration.WARM_TRIALS=8); --read-head replays a drafter that keeps no head
        (drafters.model.keep_head) and reads every prompt whole; --c-times and --rows-times
        price a drafter step at F times c and each verify row past the first at F times
        v(k) - 1: what a cheaper drafter or verify would buy, before building it; --passes N
        runs the set N times, the calibration carried from pass to pass, and scores the last:
        the policy calibrated on the whole set in hindsight, what better calibration can buy

`score` prints the geometric mean, the oracle's, the share of its gain, each category's
mean and the prompts below 0.95x. Greedy, 128 new tokens, the pair's default draft
vocabulary: what `specbench sweep --prompts ... --drafter model+lookup --gamma-policy cost
--gamma 12` predicts.
"""

from __future__ import annotations

import argparse
import json
import math
from collections import defaultdict
from dataclasses import replace
from pathlib import Path

import torch
from common import load_default_pair, machine_line, prompt_ids

from specbench.bench.costs import Costs, for_drafter
from specbench.bench.labels import ORACLE_POLICY
from specbench.bench.profile import predict, record_path
from specbench.bench.prompts import load_prompts
from specbench.bench.records import read_paths
from specbench.bench.rows import modelled_speedup
from specbench.core.generate import GenerationConfig, plain_generate
from specbench.core.stats import RoundCounts
from specbench.models.options import DEFAULT_DRAFT_VOCAB
from specbench.policies import calibration, cost
from specbench.policies.calibration import keep

DRAFTER, GAMMA, MAX_NEW_TOKENS = "model+lookup", 12, 128
CONSTANTS = {"calibration": calibration, "cost": cost, "CostAwareGamma": cost.CostAwareGamma}


def record(prompts: str, out: Path, outputs: Path | None) -> None:
    pair = load_default_pair()
    print(machine_line())
    known = read_paths(outputs) if outputs else {}
    gen = GenerationConfig(max_new_tokens=MAX_NEW_TOKENS, eos_token_ids=pair.eos_token_ids)
    out.mkdir(parents=True, exist_ok=True)
    for i, prompt in enumerate(load_prompts(prompts)):
        ids = prompt_ids(pair, prompt)
        output = known.get((prompt.id, 0)) or plain_generate(pair.target.model, ids, gen).token_ids
        path = record_path(pair.target.model, pair.drafter_model.model, ids, output, gen, pair.draft_vocab)
        item = {"id": prompt.id, "category": prompt.category, "eos": list(gen.eos_token_ids), "path": path}
        torch.save(item, out / f"{i:04d}-{prompt.id}.pt")
        print(prompt.id, len(ids), len(output), flush=True)


def scaled(costs: Costs, c_times: float, rows_times: float) -> Costs:
    """costs with the drafter step times c_times and v(k) - v(1) times rows_times."""
    one = costs.verify_cost[1]
    verify = {k: one + (v - one) * rows_times for k, v in costs.verify_cost.items()}
    return replace(costs, drafter_step_seconds=costs.drafter_step_seconds * c_times, verify_cost=verify)


def score(
    folder: Path,
    meta: Path,
    drafter_cost: Path | None,
    settings: list[str],
    draft_vocab: int,
    read_head: bool,
    times: tuple[float, float] = (1.0, 1.0),
    passes: int = 1,
) -> None:
    raw = json.loads(meta.read_text())
    # a sweep's (measured once, or pooled over per-prompt blocks) or `specbench costs`'
    raw = raw.get("costs_by_block", {}).get("sweep") or raw["costs"]
    costs = for_drafter(scaled(Costs.from_meta(raw), *times), DRAFTER)
    if drafter_cost is not None:
        u = json.loads(drafter_cost.read_text())["costs"]["drafter_cost"]
        costs = replace(costs, drafter_cost={int(n): float(x) for n, x in u.items()})
    for setting in settings:
        name, value = setting.split("=")
        owner, attribute = name.split(".")
        setattr(CONSTANTS[owner], attribute, type(getattr(CONSTANTS[owner], attribute))(value))
    items = [torch.load(file, weights_only=False) for file in sorted(folder.glob("*.pt"))]
    kept = None
    for _ in range(passes):  # the calibration carries over; the last pass is scored
        kept, rows = replay_set(items, costs, draft_vocab, read_head, kept)
    mean = geometric_mean([r[2] for r in rows])
    oracle = geometric_mean([r[3] for r in rows])
    categories = defaultdict(list)
    for row in rows:
        categories[row[1]].append(row)
    print(f"{len(rows)} prompts: {mean:.3f}x, oracle {oracle:.3f}x, {(mean - 1) / (oracle - 1):.0%} of its gain")
    print(
        "  by category (oracle): "
        + ", ".join(
            f"{name} {geometric_mean([r[2] for r in group]):.2f}x ({geometric_mean([r[3] for r in group]):.2f}x)"
            for name, group in categories.items()
        )
    )
    print("  below 0.95x: " + (", ".join(f"{r[0]} {r[2]:.2f}x" for r in rows if r[2] < 0.95) or "none"))


def replay_set(items: list[dict], costs: Costs, draft_vocab: int, read_head: bool, kept):
    """Each recorded prompt in order, the cost policy warm from those before it (and from
    `kept`, an earlier pass's calibration), and the oracle: (what is kept after the last,
    [(id, category, policy's speedup, oracle's)])."""
    rows = []
    for item in items:
        gen = GenerationConfig(max_new_tokens=MAX_NEW_TOKENS, eos_token_ids=tuple(item["eos"]))
        path = replace(item["path"], kept=0) if read_head else item["path"]
        runs = [
            predict(path, DRAFTER, policy, GAMMA, gen, costs=costs, draft_vocab=draft_vocab, warm=warm)
            for policy, warm in (("cost", kept), (ORACLE_POLICY, None))
        ]
        kept = keep(kept, runs[0].evidence)
        speedups = [modelled_speedup(RoundCounts.of(run.steps), costs) for run in runs]
        rows.append((item["id"], item["category"], *speedups))
    return kept, rows


def geometric_mean(values: list[float]) -> float:
    return math.exp(sum(math.log(v) for v in values) / len(values))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    commands = parser.add_subparsers(dest="command", required=True)
    recording = commands.add_parser("record")
    recording.add_argument("prompts")
    recording.add_argument("out", type=Path)
    recording.add_argument("--outputs", type=Path)
    scoring = commands.add_parser("score")
    scoring.add_argument("folder", type=Path)
    scoring.add_argument("--costs", type=Path, required=True)
    scoring.add_argument("--drafter-cost", type=Path)
    scoring.add_argument("--set", action="append", default=[], dest="settings")
    scoring.add_argument("--draft-vocab", type=int, default=DEFAULT_DRAFT_VOCAB)
    scoring.add_argument("--read-head", action="store_true")
    scoring.add_argument("--c-times", type=float, default=1.0)
    scoring.add_argument("--rows-times", type=float, default=1.0)
    scoring.add_argument("--passes", type=int, default=1)
    args = parser.parse_args()
    if args.command == "record":
        record(args.prompts, args.out, args.outputs)
    else:
        times = (args.c_times, args.rows_times)
        score(
            args.folder,
            args.costs,
            args.drafter_cost,
            args.settings,
            args.draft_vocab,
            args.read_head,
            times,
            args.passes,
        )


if __name__ == "__main__":
    main()
