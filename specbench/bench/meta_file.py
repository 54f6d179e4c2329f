"""meta.json, the record of a sweep beside its runs.csv: reading and writing it, and the
costs the charts and reports read from it (v(k), the plain step and the loop's own work).

meta.py builds and checks the dict; this module only moves it to and from disk (written
whole to a temporary file and renamed, so it is never half-written) and reads the numbers
the walltime model needs, with a ResultsError when they are malformed.
"""

from __future__ import annotations

import json
from pathlib import Path

from specbench.errors import ResultsError

META_JSON = "meta.json"


def read_meta(directory: Path) -> dict:
    """meta.json of a results directory ({} when absent); malformed JSON is a ResultsError."""
    path = Path(directory) / META_JSON
    if not path.is_file():
        return {}
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise ResultsError(f"cannot read {path}: {exc}") from None
    if not isinstance(data, dict):
        raise ResultsError(f"{path} should hold a JSON object")
    return data


def write_meta(directory: Path, meta: dict) -> None:
    """meta.json of a results directory, written whole to a temporary file and renamed."""
    path = Path(directory) / META_JSON
    tmp = path.with_suffix(".json.tmp")
    tmp.write_text(json.dumps(meta, indent=2, sort_keys=False) + "\n", encoding="utf-8")
    tmp.replace(path)  # never leave a half-written meta.json


def verify_costs(meta: dict) -> dict[int, float]:
    """v(k) from meta.json as {k: t(k)/t(1)} (empty when not measured)."""
    raw = meta.get("verify_cost") or {}
    try:
        return {int(k): float(v) for k, v in raw.items()}
    except (AttributeError, TypeError, ValueError):
        raise ResultsError("meta.json: 'verify_cost' should map k to t(k)/t(1)") from None


def plain_and_loop(meta: dict) -> tuple[float, float]:
    """The plain decoding step and the loop's own work per round, in target steps t(1), from
    meta.json's costs (Costs.plain_step and Costs.loop; 1.0 and 0.0 for a sweep from before
    they were measured)."""
    costs = meta.get("costs") or {}
    try:
        plain, loop, step = (
            float(costs.get(name) or 0) for name in ("plain_step_seconds", "loop_seconds", "target_step_seconds")
        )
    except (AttributeError, TypeError, ValueError):
        raise ResultsError("meta.json: 'costs' should hold its times as seconds") from None
    if step <= 0:
        return 1.0, 0.0
    return (plain / step if plain > 0 else 1.0), max(0.0, loop / step)
