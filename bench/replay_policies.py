"""Replay gamma policies on recorded greedy paths, priced with a sweep's measured costs.

Timing whole generations per policy takes an hour a sweep and its noise hides a few percent.
Under greedy decoding a round's outcome is fixed by the path alone: a draft is accepted
exactly when the drafter's argmax equals the target's next greedy token. So this records,
once per prompt, the target's greedy output (plain decoding) and, teacher-forced on it, the
drafter's top probability m and argmax at every position; then each policy drafts over those
paths with no model in the loop:

    a round costs  paid drafter rows x c + v(drafts + 1)      (target steps)
    and yields     accepted drafts + 1 tokens
    speedup        = tokens / cost                            (plain: 1 token per step)

c and v(k) come from a sweep's meta.json (the median c of its measurements and the first
measurement's v(k), or --block N for one measurement); --c-scale prices a dearer drafter.
Caveats: after a rejected draft the drafter would continue on its own path; the replay reads
m on the target's path there (that only moves when a round stops, never what it accepts).
Costs the model leaves out (a drafter catch-up forward, sampling) are left out here too.

    python bench/replay_policies.py --costs results/greedy-native/meta.json \
        [--prompts default] [--ids cw-02,ce-02,...] [--paths paths.json] [--draft-dtype bfloat16]

Step 1, the slow one (it loads and runs the models), runs only when --paths does not exist yet.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from types import SimpleNamespace

import torch

from common import load_default_pair, prompt_ids
from specbench.bench.prompts import load_prompts
from specbench.bench.results import geometric_mean
from specbench.core.generate import GenerationConfig, plain_generate
from specbench.policies import Keep, default_gamma, make_policy
from specbench.policies.cost import verify_curve

DEFAULT_IDS = "cw-02,cw-03,ce-02,ce-03,su-02,su-03,qa-02,qa-03,ma-02,ma-03,tr-02,tr-03,mt-01,mt-02,so-02,so-03"  # none in `quick`


def record_paths(prompt_set: str, ids: list[str], draft_dtype: str, max_new_tokens: int) -> list[dict]:
    pair = load_default_pair(draft_dtype=draft_dtype)
    target, drafter = pair.target.model, pair.drafter_model.model
    config = GenerationConfig(max_new_tokens=max_new_tokens, eos_token_ids=pair.eos_token_ids)
    paths = []
    for prompt in [p for p in load_prompts(prompt_set) if p.id in ids]:
        ids_in = prompt_ids(pair, prompt)
        output = plain_generate(target, ids_in, config).token_ids
        with torch.inference_mode():
            logits = drafter(input_ids=torch.tensor([ids_in + output]), logits_to_keep=len(output) + 1).logits[0, :-1]
        top, argmax = logits.float().softmax(-1).max(-1)  # row j guesses output[j]
        hits = (argmax == torch.tensor(output)).tolist()
        paths.append({"id": prompt.id, "category": prompt.category, "m": top.tolist(), "hit": hits})
        print(f"{prompt.id}: {len(output)} tokens, drafter argmax = target on {sum(hits) / len(hits):.2f}", flush=True)
    return paths


def replay(path: dict, policy, c: float, v: dict[int, float]) -> float:
    """The modelled speedup of one policy on one path (token 0 comes from the prefill)."""
    m, hit = path["m"], path["hit"]
    position, tokens, cost = 1, 0, 0.0
    while position < len(hit):
        paid = kept = 0
        for step in range(min(policy.next_gamma(), len(hit) - position)):
            paid += 1
            answer = Keep(int(policy.keep_drafting(step, torch.tensor([m[position + step], 0.0]))))
            if answer == Keep.NO:
                break
            kept += 1
            if answer == Keep.LAST:
                break
        accepted = 0
        while accepted < kept and hit[position + accepted]:
            accepted += 1
        policy.update(accepted, kept)
        cost += paid * c + v[kept + 1]
        tokens += accepted + 1
        position += accepted + 1
    return tokens / cost


def policies(costs) -> dict:
    """Fresh policies by label; the cost policy at its default cap and at a higher one."""
    cap = default_gamma("cost")
    return {
        "fixed 4": lambda: make_policy("fixed", 4),
        "confidence-stop 0.4, up to 20 (HF's rule)": lambda: make_policy("confidence-stop", 20, threshold=0.4),
        f"cost <= {cap} (default)": lambda: make_policy("cost", cap, costs=costs),
        "cost <= 20": lambda: make_policy("cost", 20, costs=costs),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--costs", required=True, help="a sweep's meta.json")
    parser.add_argument("--block", type=int, help="use this measurement of costs_by_block")
    parser.add_argument("--c-scale", type=float, default=1.0)
    parser.add_argument("--prompts", default="default")
    parser.add_argument("--ids", default=DEFAULT_IDS)
    parser.add_argument("--paths", default="paths.json")
    parser.add_argument("--draft-dtype", default="bfloat16")
    parser.add_argument("--max-new-tokens", type=int, default=128)
    args = parser.parse_args()
    if Path(args.paths).exists():
        paths = json.loads(Path(args.paths).read_text())
    else:
        paths = record_paths(args.prompts, args.ids.split(","), args.draft_dtype, args.max_new_tokens)
        Path(args.paths).write_text(json.dumps(paths))
    meta = json.loads(Path(args.costs).read_text())
    blocks = list(meta.get("costs_by_block", {}).values()) or [meta]
    chosen = blocks[args.block] if args.block is not None else {"c": sorted(b["c"] for b in blocks)[len(blocks) // 2], "verify_cost": meta["verify_cost"]}
    costs = SimpleNamespace(c=chosen["c"] * args.c_scale, verify_cost={int(k): float(x) for k, x in chosen["verify_cost"].items()})
    v = verify_curve(costs.verify_cost, 64)  # the policy's own curve, continued past k = 9
    print(f"c = {costs.c:.3f}; v(2) = {v[2]:.2f}, v(9) = {v[9]:.2f}; {len(paths)} prompts")
    categories = sorted({p["category"] for p in paths})
    print(f"| policy | geometric mean | {' | '.join(categories)} |")
    print(f"|---|---|{'---|' * len(categories)}")
    for name, make in policies(costs).items():
        speedups = [(p["category"], replay(p, make(), costs.c, v)) for p in paths]
        by_category = [geometric_mean([s for category, s in speedups if category == wanted]) for wanted in categories]
        overall = geometric_mean([s for _, s in speedups])
        print(f"| {name} | {overall:.3f}x | {' | '.join(f'{x:.2f}x' for x in by_category)} |")


if __name__ == "__main__":
    main()
