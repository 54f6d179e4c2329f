"""meta.json of a sweep: what it records beside its rows (the machine and its CPU flags, the
models, the versions, the settings, every measurement of c and v(k), the summary table and
the checks), and what a resumed sweep must match and carries over.

Kept apart from the runner (sweep.py) because it is bookkeeping: these functions build,
check and update the meta dict, and results.read_meta/write_meta move it to disk.
A resumed sweep refuses settings, models (dtype, device) and prompt texts that would change
what its rows mean (check_resume_meta)
and keeps the costs its blocks measured (carry_over_meta), so a prediction made before an
interruption and one made after it are priced alike.

A costs file (`specbench costs`, costs_meta) is the part of meta.json that says which costs
were measured, where and how, under the same keys: a sweep's meta.json is one too, so
`specbench predict --costs` reads either (read_costs_meta).
"""

from __future__ import annotations

import hashlib
import json
import os
import platform
from dataclasses import asdict
from datetime import UTC, datetime
from pathlib import Path

import torch

from specbench import __version__
from specbench.bench.accuracy import plain_repeatability, prediction_accuracy, prediction_check
from specbench.bench.costs import METHOD as COSTS_METHOD
from specbench.bench.costs import Costs
from specbench.bench.plan import SweepConfig
from specbench.bench.prompts import Prompt
from specbench.bench.summary import summary_frame
from specbench.errors import ResultsError, SweepError
from specbench.speed import native
from specbench.speed.gguf_blocks import Q4KLinear
from specbench.speed.twins import has_twins


def summary_records(rows: list[dict]) -> list[dict]:
    """The summary table for meta.json: per source x method x drafter x policy x gamma, the
    geometric-mean speedup and pooled acceptance with their 95% bootstrap intervals."""
    keep = [
        "source",
        "method",
        "drafter",
        "policy",
        "gamma",
        "runs",
        "acceptance_rate",
        "acceptance_lo",
        "acceptance_hi",
        "mean_accepted_length",
        "speedup",
        "speedup_lo",
        "speedup_hi",
    ]
    if not rows:
        return []
    records = summary_frame(rows)[keep].astype(object).to_dict("records")
    return [{k: (None if v != v else v) for k, v in record.items()} for record in records]  # NaN -> null


COSTS_METHOD_BEFORE_RECORDED = 5  # costs.METHOD of the sweeps written before meta.json recorded it


def closing_meta(rows: list[dict], prices: dict | None = None) -> dict:
    """What meta.json says of a finished sweep's rows: finished, the summary table and the
    checks (how close the predictions came, how repeatable the plain runs were and, given
    prices (reprice.sweep_price_check), where the measured runs' time went against them)."""
    checks = {"prediction": prediction_accuracy(prediction_check(rows)), "plain_twice": plain_repeatability(rows)}
    if prices is not None:
        checks["prices"] = prices
    return {"finished": True, "summary": summary_records(rows), "checks": checks}


def check_resume_meta(meta: dict, fresh: dict) -> None:
    """A resumed sweep must measure what the interrupted one measured. (A key an older
    sweep did not record is not checked, except draft_vocab: before it, drafters scored all;
    and costs_method: before it, costs were measured by method 5 or earlier.) Costs measured
    another way are not pooled with this version's: such a sweep starts again."""
    old = dict(meta.get("sweep", {}))
    if old:
        old.setdefault("draft_vocab", 0)
        method = old.get("costs_method", COSTS_METHOD_BEFORE_RECORDED)
        if meta.get("costs_by_block") and method != fresh["sweep"].get("costs_method"):
            raise SweepError(
                f"cannot resume: that sweep measured its costs by method {method}, this version by"
                f" {fresh['sweep'].get('costs_method')} (bench/costs.py METHOD); start it again with another --out"
            )
    for key in (
        "target",
        "drafter_model",
        "drafter_models",
        "temperature",
        "max_new_tokens",
        "seed",
        "kernels",
        "draft_vocab",
        "measure",
        "measure_per_category",
        "shard",
        "min_time",
    ):
        if key in old and old[key] != fresh["sweep"].get(key):
            raise SweepError(f"cannot resume: {key} was {old[key]!r} in that sweep, now {fresh['sweep'].get(key)!r}")
    _check_models(meta.get("models") or {}, fresh.get("models") or {})
    _check_prompts(old.get("prompt_hashes") or {}, fresh["sweep"].get("prompt_hashes") or {})


def _check_models(old: dict, fresh: dict) -> None:
    """The same models as loaded: a target or drafter in another dtype or on another device
    computes other logits (and another plain output to compare with)."""
    roles = [(role, old.get(role), fresh.get(role)) for role in ("target", "drafter")]
    roles += [
        (f"drafter model {name!r}", model, (fresh.get("drafters") or {}).get(name))
        for name, model in (old.get("drafters") or {}).items()
    ]
    for role, before, now in roles:
        for key in ("class", "dtype", "device", "digest"):
            if before and now and key in before and before[key] != now.get(key):
                raise SweepError(
                    f"cannot resume: the {role}'s {key} was {before[key]!r} in that sweep, now {now.get(key)!r}"
                )


def _check_prompts(old: dict, fresh: dict) -> None:
    """A prompt id that both sweeps have names the same prompt (new ids may join)."""
    changed = [pid for pid, digest in old.items() if pid in fresh and fresh[pid] != digest]
    if changed:
        raise SweepError(f"cannot resume: prompt {changed[0]!r} has another text than in that sweep")


def prompt_hash(prompt: Prompt) -> str:
    """A short fingerprint of what a prompt sends (its messages)."""
    return hashlib.sha256(json.dumps(prompt.messages(), ensure_ascii=False).encode()).hexdigest()[:16]


def carry_over_meta(meta: dict, old_meta: dict) -> None:
    """A resumed sweep's meta.json keeps what the interrupted one measured, when it began and
    the commands that ran it (commands; command is the latest)."""
    meta["finished"] = False
    for key in ("costs", "c", "verify_cost", "costs_pooled", "costs_by_block"):
        if key in old_meta:
            meta[key] = old_meta[key]
    if old_meta:
        meta["created"], meta["resumed"] = old_meta.get("created"), meta["created"]
        earlier = old_meta.get("commands") or ([old_meta["command"]] if old_meta.get("command") else [])
        meta["commands"] = [*earlier, meta["command"]]  # each run of the sweep, the first one first
        _union_sweep(meta["sweep"], old_meta.get("sweep") or {})


UNION_KEYS = ("gammas", "drafters", "policies", "prompt_ids", "categories")  # what a resume may add to


def _union_sweep(sweep: dict, old: dict) -> None:
    """meta's sweep section after a resume describes every run in runs.csv: the prompts,
    gammas, drafters and policies of every invocation (the earlier ones first) and the most
    repeats; the other settings a resume must keep (check_resume_meta)."""
    for key in UNION_KEYS:
        if isinstance(old.get(key), list):
            sweep[key] = list(dict.fromkeys([*old[key], *sweep.get(key, [])]))
    if "gammas" in sweep:
        sweep["gammas"] = sorted(sweep["gammas"])
    sweep["prompt_hashes"] = {**(old.get("prompt_hashes") or {}), **sweep.get("prompt_hashes", {})}
    sweep["repeats"] = max(int(old.get("repeats") or 1), int(sweep.get("repeats") or 1))


def add_costs_meta(meta: dict, key: str, costs: Costs) -> None:
    """Record one measurement of c and v(k) under costs_by_block[key]; the first one also
    stands for the sweep (meta's costs, c and verify_cost, read by charts and tables) until
    phase 1 pools them all."""
    if "costs" not in meta:
        set_sweep_costs(meta, costs, 1)
    meta.setdefault("costs_by_block", {})[key] = costs.as_meta()


def set_sweep_costs(meta: dict, costs: Costs, count: int) -> None:
    """The costs that stand for the whole sweep in meta.json (costs, c and verify_cost) and
    how many measurements they are the median of (costs_pooled)."""
    recorded = costs.as_meta()
    meta.update(costs=recorded, c=costs.c, verify_cost=recorded["verify_cost"], costs_pooled=count)


def model_meta(model, name: str | None) -> dict | None:
    if model is None:
        return None
    first = next(model.parameters())
    int8 = any(buffer.dtype == torch.int8 for buffer in model.buffers())  # quantize.Int8Linear
    q4k = any(isinstance(module, Q4KLinear) for module in model.modules())  # its other layers Q6_K or int8
    return {
        "name": name,
        "class": type(model).__name__,
        "dtype": "q4k" if q4k else "int8" if int8 else str(first.dtype).removeprefix("torch."),
        "device": str(first.device),
        "parameters": sum(p.numel() for p in model.parameters()),
        "attention": getattr(model.config, "_attn_implementation", None),
        "bfloat16_twins": has_twins(model),  # long forwards through bfloat16 copies (speed/twins.py)
        "digest": weights_digest(model),
    }


def weights_digest(model) -> str:
    """A short fingerprint of a model's weights: every parameter's and buffer's name, shape and
    dtype, and its first 64 values. Two loads of one checkpoint agree; another checkpoint, dtype
    or quantization differs. (Hashing every weight would read gigabytes for a fingerprint.)"""
    digest = hashlib.sha256()
    for name, tensor in [*model.named_parameters(), *model.named_buffers()]:
        digest.update(f"{name}:{tuple(tensor.shape)}:{tensor.dtype};".encode())
        digest.update(tensor.detach().reshape(-1)[:64].contiguous().cpu().view(torch.uint8).numpy().tobytes())
    return digest.hexdigest()[:16]


def build_meta(
    target,
    drafter_models: dict[str, object],
    config: SweepConfig,
    prompts: list[Prompt],
    *,
    target_name: str | None,
    drafter_names: dict[str, str | None],
    prompts_source: str,
    command: str,
) -> dict:
    """drafter_models: the sweep's drafter models by name, drafter_names their names for
    meta.json. models.drafter is the first; with named drafter models (several),
    models.drafters has each."""
    first = next(iter(drafter_models), None)
    models = {
        "target": model_meta(target, target_name),
        "drafter": model_meta(drafter_models.get(first), drafter_names.get(first)),
    }
    several = config.drafter_models != ("",)
    if several:
        models["drafters"] = {name: model_meta(m, drafter_names.get(name)) for name, m in drafter_models.items()}
    return {
        **where_and_when(command),
        "seed": config.seed,
        "models": models,
        "sweep": {
            **{k: list(v) if isinstance(v, tuple) else v for k, v in asdict(config).items()},
            "target": target_name,
            "drafter_model": drafter_names if several else drafter_names.get(""),
            "prompts": prompts_source,
            "prompt_ids": [p.id for p in prompts],
            "prompt_hashes": {p.id: prompt_hash(p) for p in prompts},
            "categories": list(dict.fromkeys(p.category for p in prompts)),
            "costs_method": COSTS_METHOD,  # how c, v(k) and u(n) were measured (bench/costs.py)
        },
    }


def where_and_when(command: str) -> dict:
    """What meta.json and a costs file say of the run that wrote them: the version, the
    date, the command, the library versions and the machine (its CPU's instruction sets
    pick the fast paths, so they decide the costs)."""
    import transformers

    return {
        "specbench_version": __version__,
        "created": datetime.now(UTC).isoformat(timespec="seconds"),
        "command": command,
        "versions": {
            "python": platform.python_version(),
            "torch": torch.__version__,
            "transformers": transformers.__version__,
        },
        "machine": {
            "platform": platform.platform(),
            "processor": platform.processor() or platform.machine(),
            "cpu_count": os.cpu_count(),
            "torch_threads": torch.get_num_threads(),
            "cpu": native.cpu_description(),  # model name and the instruction sets that pick fast paths
            "cuda": torch.cuda.get_device_name(0) if torch.cuda.is_available() else None,
        },
        # what runs an int8 drafter's draft steps in specbench (HF's generation runs the
        # modules' forward, always torch._weight_int8pack_mm)
        "draft_int8_kernel": native.name(),
    }


# ---------------------------------------------------------------------------- costs files


def costs_meta(costs: Costs, models: dict, settings: dict, command: str) -> dict:
    """A costs file (`specbench costs --out FILE`): the keys of meta.json that say what was
    measured, on which machine and how, under the same names and with the same meanings, so
    that a sweep's meta.json is a costs file too (priced by its pool over all its blocks)
    and `specbench predict --costs` reads either:

        specbench_version, created, command, versions, machine, draft_int8_kernel
                     where_and_when's, as meta.json's
        models       {"target": model_meta, "drafter": model_meta or null}, as meta.json's
        costs        Costs.as_meta(): c, target_step_seconds, drafter_step_seconds,
                     verify_cost {k: v(k)}, verify_measured, drafter_cost {n: u(n)},
                     context_tokens, plain_step_seconds, loop_seconds
        c, verify_cost, costs_pooled   copies, as meta.json's (set_sweep_costs)
        costs_settings   how they were measured: costs_method (costs.METHOD), kernels,
                     draft_vocab, temperature, top_k, top_p, timing_repeats, random_weights
    """
    meta = {**where_and_when(command), "models": models, "costs_settings": {"costs_method": COSTS_METHOD, **settings}}
    set_sweep_costs(meta, costs, 1)
    return meta


def read_costs_meta(path: Path) -> tuple[Costs, dict]:
    """(the costs, the whole file) of a costs file or a sweep's meta.json (costs_meta);
    anything else is a ResultsError in one line."""
    path = Path(path)
    hint = "write one with `specbench costs --out FILE`, or give a sweep's meta.json"
    try:
        raw = json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise ResultsError(f"no costs file {path}: {hint}") from None
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise ResultsError(f"{path} is not a costs file ({exc}): {hint}") from None
    recorded = raw.get("costs") if isinstance(raw, dict) else None
    try:
        costs = Costs.from_meta(recorded)
    except (AttributeError, TypeError, ValueError):
        costs = None
    if costs is None or not costs.verify_cost or not costs.target_step_seconds:
        raise ResultsError(f"{path} is not a costs file (no 'costs' with a target step and v(k)): {hint}")
    return costs, raw
