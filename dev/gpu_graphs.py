"""A stage of the GPU check (dev/gpu_check.sh runs it after the costs): what CUDA graphs would buy.

The first H200 run found eager forwards launch-bound: 16.4 ms a forward at the 1.5B shape and
16.2 ms at the 7B, with 29 ms of kernel time in a whole profiled generation. A CUDA graph
replays a forward's kernels with one launch (gpt-fast's way, here without torch.compile, whose
first calls take minutes the machine does not lend). A graph needs fixed shapes and
addresses, so it runs over HF's StaticCache, not the DynamicCache the loop crops. This stage
measures before anything is adopted. For the 0.5B-shaped drafter and the 1.5B- and 7B-shaped
targets (bfloat16, random weights), on a context of --context ids, it times one forward of k
new ids, k = 1..9, three ways:

  - dynamic: HF's DynamicCache, cropped back after each forward (what specbench runs now);
  - static: a StaticCache, eager, given the positions (cache_position), set back after;
  - graph: that forward captured once per k as a torch.cuda.CUDAGraph, then replayed (CUDA
    only; on a CPU the column stays empty).

Each row also says whether the graph's logits equal the eager static forward's bit for bit
(the same kernels, so they should), and how far the static forward's logits are from the
dynamic one's (another attention mask, so possibly another kernel).

`price` (which `measure` ends with) writes costs-graphed-SIZE.json beside costs-SIZE.json:
a copy with the forwards priced at each model's fastest way: c, v(k) and u(k) for k <= 9,
the step times, and the reads u(16..64) (their eager seconds over the faster drafter step).
The drafter is timed with its whole head, where specbench's restricts it (--draft-vocab):
on a launch-bound GPU the head's width changes little. Then, on the CPU,

    specbench predict results/scale/pair --costs costs-graphed-1.5b.json --out DIR

prices the real pair's recorded rounds as if both models ran graphed.

    python dev/gpu_graphs.py measure OUT [--device cuda] [--tiny] [--context 160] [--repeats 7]
    python dev/gpu_graphs.py price OUT     (again, from OUT/graphs.json and OUT/costs-*.json)
"""

from __future__ import annotations

import argparse
import copy
import json
import statistics
import time
from pathlib import Path

import torch
from gpu_check import config_dict, machine, prompt, random_model

from specbench.bench.costs import fit_verify_curve
from specbench.core.cache import cache_arg, crop_cache, new_cache
from specbench.core.generate import sync

KS = range(1, 10)  # new ids a forward: the draft step, catch-ups and verify passes of gamma 1..8
MODELS = {"qwen2-0.5b": "drafter", "qwen2-1.5b": "1.5b", "qwen2-7b": "7b"}


def timed(call, device, repeats: int) -> tuple[float, object]:
    """The median seconds of call() over repeats (synchronized on both sides; one call first
    to warm up), and its last result."""
    result = call()
    times = []
    for _ in range(repeats):
        sync(device)
        start = time.perf_counter()
        result = call()
        sync(device)
        times.append(time.perf_counter() - start)
    return statistics.median(times), result


def rewind(cache, length: int) -> None:
    """Set a StaticCache back to `length` ids in place. Where its layers count what they hold
    in a tensor (transformers 5.24: writes go there, not to cache_position) that count is
    refilled, as one more kernel a graph can capture; where they write at cache_position,
    nothing is needed."""
    for layer in cache.layers:
        count = getattr(layer, "cumulative_length", None)
        if isinstance(count, torch.Tensor):
            count.fill_(length)


class Graphed:
    """One forward of k new ids over a StaticCache of `length` ids, and the cache set back to
    them, captured as a CUDA graph: `replay(ids)` runs it; `logits` holds the result."""

    def __init__(self, model, cache, length: int, ids: torch.Tensor, positions: torch.Tensor):
        self.ids, self.graph = ids.clone(), torch.cuda.CUDAGraph()
        args = dict(input_ids=self.ids, cache_position=positions.clone(), use_cache=True, **cache_arg(model, cache))
        side = torch.cuda.Stream()
        side.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(side):  # warm-up on a side stream, as torch.cuda.graphs asks
            for _ in range(2):
                model(**args)
                rewind(cache, length)
        torch.cuda.current_stream().wait_stream(side)
        with torch.cuda.graph(self.graph):
            self.logits = model(**args).logits
            rewind(cache, length)

    def replay(self, ids: torch.Tensor) -> torch.Tensor:
        self.ids.copy_(ids)
        self.graph.replay()
        return self.logits


@torch.inference_mode()
def forwards(model, context: list[int], repeats: int, capture: bool, vocab: int) -> list[dict]:
    """Per k: the three ways' milliseconds, whether the graph equals the static forward, and
    the static forward's distance from the dynamic one."""
    from transformers import StaticCache

    device = model.device
    n = len(context)
    ctx = torch.tensor([context], device=device)
    dynamic = new_cache(model)
    model(input_ids=ctx, use_cache=True, **cache_arg(model, dynamic))
    static = StaticCache(config=model.config, max_cache_len=n + max(KS))
    model(input_ids=ctx, cache_position=torch.arange(n, device=device), use_cache=True, **cache_arg(model, static))
    rows = []
    for k in KS:
        ids = torch.tensor([prompt(vocab, k, seed=100 + k)], device=device)
        positions = torch.arange(n, n + k, device=device)

        def dynamic_forward(ids=ids):
            logits = model(input_ids=ids, use_cache=True, **cache_arg(model, dynamic)).logits
            crop_cache(dynamic, n)
            return logits

        def static_forward(ids=ids, positions=positions):
            logits = model(input_ids=ids, cache_position=positions, use_cache=True, **cache_arg(model, static)).logits
            rewind(static, n)
            return logits

        dynamic_s, dynamic_logits = timed(dynamic_forward, device, repeats)
        static_s, static_logits = timed(static_forward, device, repeats)
        static_logits = static_logits.clone()
        row = dict(
            k=k,
            dynamic_ms=1000 * dynamic_s,
            static_ms=1000 * static_s,
            static_vs_dynamic_max_abs=float((static_logits.float() - dynamic_logits.float()).abs().max()),
            static_vs_dynamic_argmax_equal=bool(torch.equal(static_logits.argmax(-1), dynamic_logits.argmax(-1))),
            graph_ms=None,
            graph_equals_static=None,
        )
        if capture:
            try:
                graph = Graphed(model, static, n, ids, positions)
                graph_s, graph_logits = timed(lambda graph=graph, ids=ids: graph.replay(ids), device, repeats)
                row.update(graph_ms=1000 * graph_s, graph_equals_static=bool(torch.equal(graph_logits, static_logits)))
            except Exception as error:  # a forward that cannot be captured says why, once
                row["graph_error"] = f"{type(error).__name__}: {error}"[:300]
                capture = False
        rows.append(row)
    return rows


def fastest(row: dict) -> float:
    """The row's fastest forward in seconds, of the ways measured."""
    return min(v for v in (row["dynamic_ms"], row["static_ms"], row["graph_ms"]) if v is not None) / 1000


def graphed_costs(costs: dict, drafter: list[dict], target: list[dict]) -> dict:
    """costs (specbench costs' file) with the forwards priced at the rows' fastest ways
    (a way may differ from k to k: the fastest a loop could pick for each), the curves
    fitted as `specbench costs` fits them (costs.fit_verify_curve)."""
    out = copy.deepcopy(costs)
    block = out["costs"]
    target_s = {r["k"]: fastest(r) for r in target}
    drafter_s = {r["k"]: fastest(r) for r in drafter}
    t1, d1 = target_s[1], drafter_s[1]
    # fitted as `specbench costs` fits them: v(k) from k = 2 on, u(k) from k = 3 on
    verify = {str(k): v for k, v in fit_verify_curve(target_s).items()}
    draft = {str(k): u for k, u in fit_verify_curve(drafter_s, exact=2).items()}
    eager_step = block["drafter_step_seconds"]
    reads = {n: u * eager_step / d1 for n, u in block["drafter_cost"].items() if int(n) > max(KS)}
    block.update(
        c=d1 / t1,
        target_step_seconds=t1,
        drafter_step_seconds=d1,
        plain_step_seconds=t1,
        verify_cost=verify,
        verify_measured={str(k): t / t1 for k, t in target_s.items()},
        drafter_cost={**draft, **reads},
    )
    out.update(c=block["c"], verify_cost=verify)
    out["command"] = "dev/gpu_graphs.py: " + out.get("command", "")
    out["forwards"] = "fastest of dynamic, static and CUDA-graph forwards (dev/gpu_graphs.py)"
    return out


def measure(args) -> None:
    """Time the three models' forwards into OUT/graphs.json, then price."""
    capture = args.device == "cuda"
    vocab = config_dict("qwen2-1.5b", args.tiny)["vocab_size"]
    context = prompt(vocab, args.context, seed=11)
    report: dict = dict(machine=machine(args.device), tiny=args.tiny, context=args.context, models={})
    for name in MODELS:
        model = random_model(name, args.tiny, torch.bfloat16, args.device)
        report["models"][name] = forwards(model, context, args.repeats, capture, vocab)
        del model
        if capture:
            torch.cuda.empty_cache()
        (args.out / "graphs.json").write_text(json.dumps(report, indent=1) + "\n")
    print("model       k  dynamic ms  static ms  graph ms  graph = static  static vs dynamic: max |diff|, argmax equal")
    for name, rows in report["models"].items():
        for r in rows:
            graph = "-" if r["graph_ms"] is None else f"{r['graph_ms']:.2f}"
            print(
                f"{name:<11} {r['k']} {r['dynamic_ms']:10.2f} {r['static_ms']:10.2f} {graph:>9} "
                f"{r['graph_equals_static']!s:>15}  {r['static_vs_dynamic_max_abs']:.3g} "
                f"{r['static_vs_dynamic_argmax_equal']}"
            )
            if "graph_error" in r:
                print(f"  capture failed: {r['graph_error']}")
    price(args)


def price(args) -> None:
    """OUT/costs-SIZE.json (specbench costs) re-priced with OUT/graphs.json's fastest forwards:
    OUT/costs-graphed-SIZE.json, for each target size whose costs file is there."""
    models = json.loads((args.out / "graphs.json").read_text())["models"]
    for name, size in MODELS.items():
        source = args.out / f"costs-{size}.json"
        if size == "drafter" or not source.exists():
            continue
        costs = graphed_costs(json.loads(source.read_text()), models["qwen2-0.5b"], models[name])
        (args.out / f"costs-graphed-{size}.json").write_text(json.dumps(costs, indent=1) + "\n")
        verify = " ".join(f"{costs['verify_cost'][str(k)]:.2f}" for k in KS if k > 1)
        print(f"costs-graphed-{size}.json: c {costs['c']:.3f}, v(2..9) {verify}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("stage", choices=["measure", "price"])
    parser.add_argument("out", type=Path)
    parser.add_argument("--device", default="cuda")
    parser.add_argument("--tiny", action="store_true", help="tiny shapes, for the CPU dry run")
    parser.add_argument("--context", type=int, default=160, help="ids in the cache before each forward")
    parser.add_argument("--repeats", type=int, default=7)
    args = parser.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    measure(args) if args.stage == "measure" else price(args)


if __name__ == "__main__":
    main()
