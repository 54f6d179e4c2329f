"""What forwards cost: c (drafter step / target step) and the verify curve v(k).

    c    = drafter single-token forward time / target single-token forward time
           (Leviathan et al. Def. 3.7)
    v(k) = target forward time over k new tokens / over 1 token, with a realistic cache

Measured with the models as loaded (dtypes, kernels, device), by medians of timed forwards.
The sweep measures them once per sweep and records them in meta.json; `generate` with the
cost policy measures them once per model pair and settings and keeps them in the cache
folder (costs/*.json), so later runs start at once. Knows nothing about decoding.
"""

from __future__ import annotations

import hashlib
import json
import os
import statistics
import tempfile
import time
from dataclasses import asdict, dataclass, replace
from pathlib import Path

import torch

from specbench.cache import crop_cache, new_cache
from specbench.decode import model_device, sync

MAX_VERIFY_K = 9  # v(k) is measured for k = 1..MAX_VERIFY_K


@dataclass(frozen=True)
class Costs:
    c: float | None  # drafter single-token forward / target single-token forward
    target_step_seconds: float
    drafter_step_seconds: float | None
    verify_cost: dict[int, float]  # k -> t(k tokens) / t(1 token), the target's
    context_tokens: int  # cache length the forwards ran over

    def as_meta(self) -> dict:
        meta = asdict(self)
        meta["verify_cost"] = {str(k): v for k, v in self.verify_cost.items()}
        return meta

    @classmethod
    def from_meta(cls, raw: dict) -> "Costs":
        return cls(
            c=raw.get("c"),
            target_step_seconds=raw.get("target_step_seconds", 0.0),
            drafter_step_seconds=raw.get("drafter_step_seconds"),
            verify_cost={int(k): float(v) for k, v in (raw.get("verify_cost") or {}).items()},
            context_tokens=raw.get("context_tokens", 0),
        )


@torch.inference_mode()
def forward_seconds(model, context: list[int], k: int, repeats: int) -> float:
    """Median wall seconds of one forward over k new tokens with `context` already cached."""
    device = model_device(model)
    cache = new_cache(model)
    model(input_ids=torch.tensor([context], device=device), past_key_values=cache, use_cache=True, logits_to_keep=1)
    new = torch.tensor([(context * k)[:k]], device=device)  # [1, k] ordinary token ids
    times = []
    for _ in range(repeats + 1):  # the first forward is a warm-up
        start = time.perf_counter()
        model(input_ids=new, past_key_values=cache, use_cache=True, logits_to_keep=k)
        sync(device)
        times.append(time.perf_counter() - start)
        crop_cache(cache, len(context))
    return statistics.median(times[1:])


def timing_context(prompt_ids: list[int], max_new_tokens: int, limit: int) -> list[int]:
    """A realistic cache for timing: the prompt, grown to where decoding spends its middle."""
    length = max(1, min(len(prompt_ids) + max_new_tokens // 2, limit - MAX_VERIFY_K - 1))
    return (prompt_ids * (length // len(prompt_ids) + 1))[:length]


def measure_costs(target, drafter_model, context: list[int], repeats: int, max_k: int = MAX_VERIFY_K) -> Costs:
    """c from single-token forwards of both models; v(k) for k = 1..max_k from the target."""
    target_times = {k: forward_seconds(target, context, k, repeats) for k in range(1, max_k + 1)}
    t1 = target_times[1]
    drafter_step = forward_seconds(drafter_model, context, 1, repeats) if drafter_model is not None else None
    return Costs(
        c=drafter_step / t1 if drafter_step is not None and t1 > 0 else None,
        target_step_seconds=t1,
        drafter_step_seconds=drafter_step,
        verify_cost={k: t / t1 if t1 > 0 else 0.0 for k, t in target_times.items()},
        context_tokens=len(context),
    )


def for_drafter(costs: Costs, drafter: str) -> Costs:
    """The costs a drafter pays: a model-free drafter (ngram, prompt-lookup) runs no forward
    pass, so its c is 0; the model drafter keeps the measured c."""
    return costs if drafter == "model" else replace(costs, c=0.0)


# ---------------------------------------------------------------------------- the on-disk cache


def load_cached(folder: Path, key: str) -> Costs | None:
    """Costs measured earlier for `key` (a description of models and settings), if any."""
    path = folder / f"{_slug(key)}.json"
    try:
        raw = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    return Costs.from_meta(raw["costs"]) if raw.get("key") == key else None


def save_cached(folder: Path, key: str, costs: Costs) -> None:
    """Write atomically: a crash never leaves half a file behind."""
    folder.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=folder, suffix=".tmp")
    with os.fdopen(fd, "w", encoding="utf-8") as handle:
        json.dump({"key": key, "costs": costs.as_meta()}, handle, indent=1)
    os.replace(tmp, folder / f"{_slug(key)}.json")


def _slug(key: str) -> str:
    return hashlib.sha256(key.encode()).hexdigest()[:16]


def costs_for(target, drafter_model, key: str, context: list[int], folder: Path, max_k: int = MAX_VERIFY_K, repeats: int = 3) -> tuple[Costs, bool]:
    """Cached costs for `key`, else measured now and cached; returns (costs, were they cached)."""
    cached = load_cached(folder, key)
    if cached is not None and max(cached.verify_cost, default=0) >= max_k:
        return cached, True
    costs = measure_costs(target, drafter_model, context, repeats, max_k)
    save_cached(folder, key, costs)
    return costs, False
