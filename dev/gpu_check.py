"""The GPU check's Python stages (dev/gpu_check.sh runs them): model configs of the default
pair's shapes and a 7B target, greedy parity in float32 and bfloat16 with each mismatch's
logit gap, specbench's loop against HF assisted generation at gamma 1..8, and a profile of
one round.

Why random weights: the GPU machine has no model files and reaches no network, and what a
forward costs does not depend on the weights' values. Acceptance is set by construction
instead: the drafter is the target's first layers (embedding, head and final norm shared),
so the two agree as often as the target's later layers leave its argmax alone.

Every timer reads the host clock after `sync` (torch.cuda.synchronize on a GPU): the models'
forwards are timed by hooks that synchronize before and after each call, the loop's own
overhead per round is the decode wall time minus those forwards.

    python dev/gpu_check.py configs OUT [--tiny]
    python dev/gpu_check.py run OUT [--device cuda] [--tiny] [--max-new-tokens 128]
"""

from __future__ import annotations

import argparse
import contextlib
import json
import statistics
import time
from pathlib import Path

import torch
from shapes import SHAPES as REAL

import specbench.core.generate as generate_module
from specbench.bench.hf_assisted import measure_hf_assisted
from specbench.core.generate import GenerationConfig, plain_generate, speculative_generate, sync
from specbench.drafters.model import ModelDrafter
from specbench.policies.simple import FixedGamma

# Qwen2.5's shapes (config.json of the 0.5B, 1.5B and 7B checkpoints); every size takes the
# 1.5B's vocabulary, so that one drafter serves both targets (the 7B's pads to 152064 rows)
QWEN2 = dict(
    model_type="qwen2",
    architectures=["Qwen2ForCausalLM"],
    vocab_size=151936,
    max_position_embeddings=32768,
    rope_theta=1000000.0,
    rms_norm_eps=1e-6,
    hidden_act="silu",
    bos_token_id=151643,
    eos_token_id=151645,
)
SHAPES = {f"qwen2-{size}": REAL[size].config() for size in ("0.5b", "1.5b", "7b")}
TINY = dict(vocab_size=512, max_position_embeddings=1024, bos_token_id=1, eos_token_id=2)
TINY_SHAPES = {
    "qwen2-0.5b": dict(
        hidden_size=64,
        intermediate_size=128,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        tie_word_embeddings=True,
    ),
    "qwen2-1.5b": dict(
        hidden_size=96,
        intermediate_size=192,
        num_hidden_layers=4,
        num_attention_heads=4,
        num_key_value_heads=2,
        tie_word_embeddings=True,
    ),
    "qwen2-7b": dict(
        hidden_size=128,
        intermediate_size=256,
        num_hidden_layers=4,
        num_attention_heads=4,
        num_key_value_heads=2,
        tie_word_embeddings=False,
    ),
}
GAMMAS = range(1, 9)


def config_dict(name: str, tiny: bool) -> dict:
    """The config.json of one shape (tiny: a few layers of small width, for the CPU dry run)."""
    shapes = TINY_SHAPES if tiny else SHAPES
    return {**QWEN2, **(TINY if tiny else {}), **shapes[name], "torch_dtype": "bfloat16"}


def write_configs(out: Path, tiny: bool) -> list[Path]:
    """One folder holding only config.json per shape: what `specbench costs --random-weights`
    builds a model from."""
    folders = []
    for name in SHAPES:
        folder = out / name
        folder.mkdir(parents=True, exist_ok=True)
        (folder / "config.json").write_text(json.dumps(config_dict(name, tiny), indent=1) + "\n")
        folders.append(folder)
    return folders


def random_model(name: str, tiny: bool, dtype: torch.dtype, device: str, layers: int = 0, seed: int = 0):
    """A Qwen2 model of that shape (its first `layers` layers, 0: all) with random weights
    (std 0.02), in eval mode on the device."""
    from transformers import AutoModelForCausalLM, Qwen2Config

    torch.manual_seed(seed)
    fields = {k: v for k, v in config_dict(name, tiny).items() if k != "torch_dtype"}
    config = Qwen2Config(**{**fields, **({"num_hidden_layers": layers} if layers else {})})
    with torch.device(device):
        model = AutoModelForCausalLM.from_config(config, dtype=dtype)
    return model.eval()


def first_layers(target, name: str, tiny: bool, n_layers: int):
    """A drafter that is a copy of the target's first n_layers decoder layers, with its
    embedding, final norm and head."""
    drafter = random_model(name, tiny, target.dtype, target.device.type, layers=n_layers)
    drafter.load_state_dict(target.state_dict(), strict=False)  # the target's later layers left out
    return drafter


def prompt(vocab: int, length: int, seed: int) -> list[int]:
    """Random token ids away from the special ids at the ends of the vocabulary."""
    generator = torch.Generator().manual_seed(seed)
    return torch.randint(3, min(vocab, 150000) - 1, (length,), generator=generator).tolist()


# ---------------------------------------------------------------------------- parity


def logit_gap(target, ids: list[int]) -> float:
    """The target's top-1 minus top-2 logit after ids: how near a tie its greedy choice is."""
    with torch.inference_mode():
        logits = target(input_ids=torch.tensor([ids], device=target.device)).logits[0, -1].float()
    top = torch.topk(logits, 2).values
    return float(top[0] - top[1])


def parity(target, drafter, prompts: list[list[int]], max_new_tokens: int) -> dict:
    """Greedy speculative decoding against plain greedy decoding at every gamma and prompt;
    each mismatch with the target's logit gap where the outputs part (the plain output's
    prefix fed in one forward, as the verify pass does)."""
    config = GenerationConfig(max_new_tokens=max_new_tokens)
    runs, mismatches = 0, []
    for index, ids in enumerate(prompts):
        plain = plain_generate(target, ids, config).token_ids
        for gamma in GAMMAS:
            spec = speculative_generate(target, ModelDrafter(drafter), ids, config, FixedGamma(gamma)).token_ids
            runs += 1
            if spec != plain:
                at = next(i for i, (a, b) in enumerate(zip(spec, plain, strict=False)) if a != b)
                gap = logit_gap(target, ids + plain[:at])
                mismatches.append(dict(prompt=index, gamma=gamma, position=at, logit_gap=gap))
    return dict(runs=runs, mismatches=mismatches)


# ---------------------------------------------------------------------------- sweep


class ForwardClock:
    """Seconds inside a module's forward calls, synchronized on both sides."""

    def __init__(self, module):
        self.seconds, self._start = 0.0, 0.0
        self.device = module.device
        self.handles = [module.register_forward_pre_hook(self._pre), module.register_forward_hook(self._post)]

    def _pre(self, module, args):
        sync(self.device)
        self._start = time.perf_counter()

    def _post(self, module, args, output):
        sync(self.device)
        self.seconds += time.perf_counter() - self._start

    def remove(self) -> None:
        for handle in self.handles:
            handle.remove()


def overhead_per_round(target, drafter, ids: list[int], config: GenerationConfig, gamma: int) -> float:
    """The loop's own seconds per round: decode wall time minus the forwards' time."""
    clocks = [ForwardClock(target), ForwardClock(drafter)]
    try:
        result = speculative_generate(target, ModelDrafter(drafter), ids, config, FixedGamma(gamma))
    finally:
        for clock in clocks:
            clock.remove()
    first_forward = result.stats.prefill_seconds  # the prefill's forwards are outside decode_seconds
    forwards = sum(clock.seconds for clock in clocks) - first_forward
    return max(0.0, result.stats.decode_seconds - forwards) / max(1, result.stats.rounds)


def sweep(target, drafter, ids: list[int], max_new_tokens: int, repeats: int) -> list[dict]:
    """Tokens per second of plain decoding, specbench's loop and HF assisted at each gamma
    (medians of repeats), the speedups over plain, and specbench's overhead per round."""
    config = GenerationConfig(max_new_tokens=max_new_tokens)
    speculative_generate(target, ModelDrafter(drafter), ids, config, FixedGamma(4))  # warm-up
    plain = statistics.median(plain_generate(target, ids, config).stats.tokens_per_second for _ in range(repeats))
    rows = []
    for gamma in [None, *GAMMAS]:  # None: HF's defaults (specbench's loop at gamma 4 beside it)
        runs = [
            speculative_generate(target, ModelDrafter(drafter), ids, config, FixedGamma(gamma or 4))
            for _ in range(repeats)
        ]
        hf = [measure_hf_assisted(target, drafter, ids, config, gamma) for _ in range(repeats)]
        ours = statistics.median(r.stats.tokens_per_second for r in runs)
        theirs = statistics.median(r.stats.tokens_per_second for r in hf)
        rows.append(
            dict(
                gamma="hf-defaults" if gamma is None else gamma,
                plain_tps=plain,
                specbench_tps=ours,
                hf_assisted_tps=theirs,
                specbench_speedup=ours / plain,
                hf_assisted_speedup=theirs / plain,
                acceptance_rate=runs[0].stats.acceptance_rate,
                specbench_overhead_ms_per_round=1000 * overhead_per_round(target, drafter, ids, config, gamma or 4),
            )
        )
    return rows


# ---------------------------------------------------------------------------- profile


LABELLED = ("crop_cache", "choose", "_verify", "_round_record")  # what the profile names in generate.py


@contextlib.contextmanager
def labelled(module, names: tuple[str, ...]):
    """Each named function of the module wrapped in a profiler range "specbench.NAME", then
    put back."""
    from torch.profiler import record_function

    saved = {name: getattr(module, name) for name in names}

    def wrap(name, function):
        def labelled_call(*args, **kwargs):
            with record_function(f"specbench.{name}"):
                return function(*args, **kwargs)

        return labelled_call

    try:
        for name, function in saved.items():
            setattr(module, name, wrap(name, function))
        yield
    finally:
        for name, function in saved.items():
            setattr(module, name, function)


SYNC_EVENTS = ("cudaStreamSynchronize", "cudaDeviceSynchronize", "cudaMemcpyAsync", "cudaEventSynchronize")


def profile_round(target, drafter, ids: list[int], gamma: int) -> str:
    """A torch.profiler table of one speculative round at batch 1 (prefill and first token,
    then one round of gamma drafts and its verify pass), with the counts of kernel launches
    and host syncs above it."""
    from torch.profiler import ProfilerActivity, profile

    config = GenerationConfig(max_new_tokens=gamma + 2)
    speculative_generate(target, ModelDrafter(drafter), ids, config, FixedGamma(gamma))  # warm-up
    activities = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if target.device.type == "cuda" else [])
    with profile(activities=activities) as prof, labelled(generate_module, LABELLED):
        result = speculative_generate(target, ModelDrafter(drafter), ids, config, FixedGamma(gamma))
        sync(target.device)
    events = prof.key_averages()
    parts = [e for e in events if e.key.startswith("specbench.")]
    counts = {e.key: e.count for e in events}
    launches = sum(
        n for key, n in counts.items() if key in ("cudaLaunchKernel", "cuLaunchKernel", "cudaLaunchKernelExC")
    )
    syncs = {key: counts.get(key, 0) for key in SYNC_EVENTS}
    head = [
        f"rounds {result.stats.rounds} (gamma {gamma}), drafted {result.stats.drafted}, "
        f"accepted {result.stats.accepted}, new tokens {result.stats.new_tokens}",
        f"kernel launches {launches}; " + ", ".join(f"{k} {v}" for k, v in syncs.items()),
        "specbench's parts: " + ", ".join(f"{e.key} x{e.count} {e.cpu_time_total / 1000:.3f} ms" for e in parts),
    ]
    sort = "self_cuda_time_total" if target.device.type == "cuda" else "self_cpu_time_total"
    return "\n".join(head) + "\n\n" + events.table(sort_by=sort, row_limit=40, max_name_column_width=60) + "\n"


# ---------------------------------------------------------------------------- main


def machine(device: str) -> dict:
    """What the numbers come from: the device, its driver (GPU) and the library versions."""
    import transformers

    info = dict(device=device, torch=torch.__version__, transformers=transformers.__version__)
    if device == "cuda":
        info.update(gpu=torch.cuda.get_device_name(0), cuda=torch.version.cuda)
        info["driver"] = _driver()
    return info


def _driver() -> str | None:
    """The NVIDIA driver's version, from nvidia-smi (None where it does not answer)."""
    import subprocess

    try:
        answer = subprocess.run(
            ["nvidia-smi", "--query-gpu=driver_version", "--format=csv,noheader"], capture_output=True, text=True
        )
    except OSError:
        return None
    return answer.stdout.strip() or None


def run(args) -> None:
    """Parity in float32 and bfloat16, then (bfloat16) the sweep and the profile."""
    out, tiny, device = args.out, args.tiny, args.device
    report: dict = dict(machine=machine(device), tiny=tiny, draft_layers=args.draft_layers)
    vocab = config_dict("qwen2-1.5b", tiny)["vocab_size"]
    prompts = [prompt(vocab, 32, seed) for seed in range(args.prompts)]
    for dtype in (torch.float32, torch.bfloat16):
        target = random_model("qwen2-1.5b", tiny, dtype, device)
        drafter = first_layers(target, "qwen2-1.5b", tiny, args.draft_layers)
        report[f"parity_{str(dtype).removeprefix('torch.')}"] = parity(target, drafter, prompts, args.parity_tokens)
    rows = sweep(target, drafter, prompts[0], args.max_new_tokens, args.repeats)
    report["sweep"] = rows
    (out / "gpu_check.json").write_text(json.dumps(report, indent=1) + "\n")
    (out / "profile.txt").write_text(profile_round(target, drafter, prompts[0], 4))
    print(json.dumps(report["machine"]))
    for name in ("parity_float32", "parity_bfloat16"):
        found = report[name]
        gaps = ", ".join(f"{m['logit_gap']:.3g}" for m in found["mismatches"])
        print(f"{name}: {len(found['mismatches'])} mismatches in {found['runs']} runs; logit gaps [{gaps}]")
    print("gamma        plain   specbench  hf-assisted  speedup(sb)  speedup(hf)  accept  overhead ms/round")
    for r in rows:
        print(
            f"{r['gamma']!s:>11} {r['plain_tps']:8.1f} {r['specbench_tps']:10.1f} {r['hf_assisted_tps']:11.1f} "
            f"{r['specbench_speedup']:11.2f} {r['hf_assisted_speedup']:11.2f} {r['acceptance_rate'] or 0:7.2f} "
            f"{r['specbench_overhead_ms_per_round']:9.3f}"
        )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("stage", choices=["configs", "run"])
    parser.add_argument("out", type=Path)
    parser.add_argument("--tiny", action="store_true", help="tiny shapes, for the CPU dry run")
    parser.add_argument("--device", default="cuda")
    parser.add_argument("--draft-layers", type=int, default=4, help="the drafter: the target's first N layers")
    parser.add_argument("--prompts", type=int, default=4)
    parser.add_argument("--parity-tokens", type=int, default=32)
    parser.add_argument("--max-new-tokens", type=int, default=128)
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    if args.stage == "configs":
        for folder in write_configs(args.out, args.tiny):
            print(folder)
    else:
        run(args)


if __name__ == "__main__":
    main()
