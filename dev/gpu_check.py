"""The GPU check's Python stages (dev/gpu_check.sh runs them): model configs of the default
pair's shapes and a 7B target, greedy parity in float32 and bfloat16 with each mismatch's
logit gap, specbench's loop against HF assisted generation at gamma 1..8, plain decoding and
the loop with and without cuDNN's attention, and a profile of one round.

Why random weights: the GPU machine has no model files and reaches no network, and what a
forward costs does not depend on the weights' values. Acceptance is set by construction
instead: the drafter is the target's first layers (embedding, head and final norm shared),
and the target's later layers write to the residual stream scaled down (their o_proj and
down_proj weights times `scale`), so the two agree as often as those quieted layers leave
the target's argmax alone. With std-0.02 weights and no scaling they never do: the first
H200 run, with the drafter the target's first 4 of 28 layers, accepted 0 of its drafts.
The forwards do the same work at any scale, so the costs are those of the real shapes.

Why an attention A/B: PyTorch's cuDNN attention builds a graph for each new sequence
length unless told otherwise (pytorch/pytorch#155958), and decoding meets a new length at
every step; the first H200 run's plain step at new lengths cost 4.6 target forwards at
lengths seen before. Each A/B run starts from a prompt length no run before it reached.

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

ACCEPTANCE_FLOOR = 0.6  # --later-scale auto: the largest scale whose acceptance reaches this
SCALES = (0.3, 0.1, 0.03, 0.01, 0.003, 0.001)  # tried largest first

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


@torch.no_grad()
def quiet_later_layers(target, n_layers: int, scale: float) -> None:
    """Scale what the target's layers from n_layers on write to the residual stream (the
    attention's output projection and the MLP's down projection), in place."""
    for layer in target.model.layers[n_layers:]:
        layer.self_attn.o_proj.weight.mul_(scale)
        layer.mlp.down_proj.weight.mul_(scale)


def acceptance(target, drafter, ids: list[int], tokens: int = 16, gamma: int = 4) -> float:
    """The loop's acceptance rate at a fixed gamma over a short generation."""
    config = GenerationConfig(max_new_tokens=tokens)
    return (
        speculative_generate(target, ModelDrafter(drafter), ids, config, FixedGamma(gamma)).stats.acceptance_rate or 0.0
    )


def built_pair(name: str, tiny: bool, dtype: torch.dtype, device: str, n_layers: int, scale, ids: list[int]):
    """The target, its first-layers drafter and the scale its later layers were quieted by:
    `scale` itself, or (None) the largest of SCALES whose acceptance on ids reaches
    ACCEPTANCE_FLOOR (the smallest where none does)."""
    for trial in [scale] if scale is not None else SCALES:
        target = random_model(name, tiny, dtype, device)
        quiet_later_layers(target, n_layers, trial)
        drafter = first_layers(target, name, tiny, n_layers)
        if scale is not None or trial == SCALES[-1] or acceptance(target, drafter, ids) >= ACCEPTANCE_FLOOR:
            return target, drafter, trial
        del target, drafter


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


def attention_ab(target, drafter, vocab: int, max_new_tokens: int, repeats: int, gamma: int = 4) -> list[dict]:
    """Plain decoding and the loop at gamma, with PyTorch's attention backends as they come
    and with cuDNN's left out, each from a prompt length that no run before reached ("new":
    every step meets a new sequence length) and again from the same prompt ("seen")."""
    from torch.nn.attention import SDPBackend, sdpa_kernel

    config = GenerationConfig(max_new_tokens=max_new_tokens)
    span = max_new_tokens + gamma + 2  # the lengths one run reaches beyond its prompt
    fresh = iter(range(2, 1000))  # prompts past the lengths the sweep before reached
    without_cudnn = [SDPBackend.FLASH_ATTENTION, SDPBackend.EFFICIENT_ATTENTION, SDPBackend.MATH]
    rows = []
    for name, backends in (("as-is", None), ("no-cudnn", without_cudnn)):
        with sdpa_kernel(backends) if backends else contextlib.nullcontext():
            times: dict[str, list[float]] = {}
            for _ in range(repeats):
                for way, run in (
                    ("plain", lambda ids: plain_generate(target, ids, config)),
                    (
                        "specbench",
                        lambda ids: speculative_generate(target, ModelDrafter(drafter), ids, config, FixedGamma(gamma)),
                    ),
                ):
                    ids = prompt(vocab, 32 + span * next(fresh), seed=7)
                    for when in ("new", "seen"):
                        times.setdefault(f"{way}_{when}_tps", []).append(run(ids).stats.tokens_per_second)
        rows.append(dict(attention=name, gamma=gamma, **{k: statistics.median(v) for k, v in times.items()}))
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
        info.update(gpu=torch.cuda.get_device_name(0), cuda=torch.version.cuda, cudnn=torch.backends.cudnn.version())
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
        name = str(dtype).removeprefix("torch.")
        target, drafter, scale = built_pair(
            "qwen2-1.5b", tiny, dtype, device, args.draft_layers, args.later_scale, prompts[0]
        )
        report[f"later_scale_{name}"] = scale
        report[f"parity_{name}"] = parity(target, drafter, prompts, args.parity_tokens)
        print(f"parity_{name} done (later layers scaled by {scale})", flush=True)
    rows = sweep(target, drafter, prompts[0], args.max_new_tokens, args.repeats)
    report["sweep"] = rows
    (out / "gpu_check.json").write_text(json.dumps(report, indent=1) + "\n")
    report["attention"] = attention_ab(target, drafter, vocab, args.max_new_tokens, args.repeats)
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
    print("attention   plain new  plain seen  specbench new  specbench seen  (tokens/s, gamma 4)")
    for r in report["attention"]:
        print(
            f"{r['attention']:>9} {r['plain_new_tps']:11.1f} {r['plain_seen_tps']:11.1f} "
            f"{r['specbench_new_tps']:14.1f} {r['specbench_seen_tps']:15.1f}"
        )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("stage", choices=["configs", "run"])
    parser.add_argument("out", type=Path)
    parser.add_argument("--tiny", action="store_true", help="tiny shapes, for the CPU dry run")
    parser.add_argument("--device", default="cuda")
    parser.add_argument("--draft-layers", type=int, default=4, help="the drafter: the target's first N layers")
    parser.add_argument(
        "--later-scale",
        type=float,
        default=None,
        help="the target's later layers' scale (default: the largest of SCALES"
        " that accepts ACCEPTANCE_FLOOR of the drafts)",
    )
    parser.add_argument("--prompts", type=int, default=2)
    parser.add_argument("--parity-tokens", type=int, default=24)
    parser.add_argument("--max-new-tokens", type=int, default=64)
    parser.add_argument("--repeats", type=int, default=2)
    args = parser.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    if args.stage == "configs":
        for folder in write_configs(args.out, args.tiny):
            print(folder)
    else:
        run(args)


if __name__ == "__main__":
    main()
