"""The results directory of a sweep: runs.csv schema, CSV I/O, gamma ranges, aggregation.

Pure helpers shared by bench.py (which writes results) and plot.py (which reads them). This
module imports only the standard library and stats.py (itself stdlib-only), so that plotting
never pulls in torch. It knows nothing about models or decoding; metrics come from stats.py.

runs.csv: one row per method x drafter x policy x gamma x prompt x repeat. Blank cells mean
"does not apply or is not known" (the plain run has no drafter; HF's assisted generation may
not reveal its acceptance; identical_to_baseline is only checked for greedy runs).
"""

from __future__ import annotations

import csv
import hashlib
import json
import math
from dataclasses import dataclass
from pathlib import Path

from specbench.errors import OptionError as GammaRangeError, ResultsError
from specbench.core.stats import RunStats, expected_tokens_per_round

RUNS_CSV = "runs.csv"
META_JSON = "meta.json"
STEPS_JSONL = "steps.jsonl"

# the columns DESIGN.md promises, then extra detail
REQUIRED_COLUMNS = (
    "method", "drafter", "policy", "gamma", "temperature", "prompt_id", "category", "repeat",
    "new_tokens", "drafted", "accepted", "acceptance_rate", "mean_accepted_length",
    "target_forwards", "tokens_per_second", "speedup", "c", "identical_to_baseline",
)  # fmt: skip
EXTRA_COLUMNS = (
    "rounds", "first_pass_tokens", "prompt_tokens", "prefill_seconds", "decode_seconds",
    "draft_seconds", "verify_seconds", "stop_reason", "seed", "output_hash", "predicted_speedup",
)  # fmt: skip
COLUMNS = REQUIRED_COLUMNS + EXTRA_COLUMNS
KEY_COLUMNS = ("method", "drafter", "policy", "gamma", "temperature", "prompt_id", "repeat")
BASELINE_METHOD = "plain"
MODEL_DRAFTER = "model"  # the drafter that drafts with the drafter model (drafters.py)
FIXED_POLICY = "fixed"  # the fixed-gamma policy (gamma.py), the setting of the theory


# ---------------------------------------------------------------------------- gamma ranges


def parse_gammas(text: str) -> list[int]:
    """"4" -> [4]; "1..4" -> [1, 2, 3, 4]; "1,2,4" and "1..3,8" work too. Sorted, no repeats."""
    gammas: set[int] = set()
    for part in str(text).split(","):
        part = part.strip()
        if ".." in part:
            start, _, end = part.partition("..")
            lo, hi = _gamma_number(start, text), _gamma_number(end, text)
            if lo > hi:
                raise GammaRangeError(f"bad gamma range {part!r}: the start is above the end (write {hi}..{lo})")
            gammas.update(range(lo, hi + 1))
        else:
            gammas.add(_gamma_number(part, text))
    return sorted(gammas)


def _gamma_number(token: str, text: str) -> int:
    token = token.strip()
    if not token.isdigit():
        raise GammaRangeError(f"bad gamma {text!r}: use a number (4), a range (1..8) or a list (1,2,4)")
    value = int(token)
    if value < 1:
        raise GammaRangeError(f"bad gamma {text!r}: gamma must be >= 1, got {value}")
    return value


# ---------------------------------------------------------------------------- keys and cells


def run_key(method: str, drafter: str, policy: str, gamma, temperature, prompt_id: str, repeat) -> tuple[str, ...]:
    """The identity of one run, normalised so that a row read back from CSV matches its plan."""
    gamma_cell = "" if gamma in (None, "") else str(int(gamma))
    return (method, drafter or "", policy or "", gamma_cell, f"{float(temperature):g}", str(prompt_id), str(int(repeat)))


def row_key(row: dict) -> tuple[str, ...]:
    return run_key(*(row[c] for c in KEY_COLUMNS))


def output_hash(token_ids: list[int]) -> str:
    """A short fingerprint of an output, so that resumed sweeps can still compare with the baseline."""
    return hashlib.sha1(",".join(map(str, token_ids)).encode()).hexdigest()[:16]


def cell(value) -> str:
    """How a value is written to runs.csv (None -> blank)."""
    if value is None:
        return ""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, float):
        return f"{value:.6g}"
    return str(value)


def number(row: dict, column: str) -> float | None:
    """A numeric cell, or None when blank or absent."""
    text = (row.get(column) or "").strip()
    if not text:
        return None
    try:
        return float(text)
    except ValueError:
        raise ResultsError(f"column {column!r} holds {text!r}, not a number (prompt {row.get('prompt_id')!r})") from None


# ---------------------------------------------------------------------------- CSV I/O


def append_row(path: Path, row: dict) -> None:
    """Append one row (writing the header first for a new file) and close, so it is on disk.
    A file started by an older version keeps its own columns (a resume never misaligns)."""
    new = not path.exists() or path.stat().st_size == 0
    columns = list(COLUMNS)
    if not new:
        _end_with_newline(path)
        with open(path, newline="", encoding="utf-8") as handle:
            columns = next(csv.reader(handle), None) or columns
    with open(path, "a", newline="", encoding="utf-8") as handle:
        writer = csv.DictWriter(handle, fieldnames=columns, extrasaction="ignore")
        if new:
            writer.writeheader()
        writer.writerow({c: cell(row.get(c)) for c in columns})


def _end_with_newline(path: Path) -> None:
    """A run killed mid-write can leave half a line; start the next row on a line of its own."""
    with open(path, "rb+") as handle:
        handle.seek(-1, 2)
        if handle.read(1) != b"\n":
            handle.write(b"\n")


def read_rows(path: Path) -> list[dict[str, str]]:
    """Rows of a runs.csv; a missing file or missing columns is a ResultsError. Incomplete lines
    (an interrupted write) are skipped."""
    path = Path(path)
    if not path.is_file():
        raise ResultsError(f"no {path.name} in {path.parent} (is it a sweep's results directory?)")
    try:
        with open(path, newline="", encoding="utf-8") as handle:
            reader = csv.DictReader(handle)
            header = reader.fieldnames or []
            missing = [c for c in REQUIRED_COLUMNS if c not in header]
            if missing:
                raise ResultsError(f"{path} is not a runs.csv: missing column(s) {', '.join(missing)}")
            return [row for row in reader if None not in row.values() and None not in row]
    except (OSError, UnicodeDecodeError, csv.Error) as exc:
        raise ResultsError(f"cannot read {path}: {exc}") from None


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


# ---------------------------------------------------------------------------- aggregation


@dataclass(frozen=True)
class Summary:
    """One method x drafter x policy x gamma, aggregated over prompts and repeats."""

    method: str
    drafter: str
    policy: str
    gamma: int | None
    runs: int
    acceptance_rate: float | None  # pooled: all accepted / all drafted
    mean_accepted_length: float | None  # mean over runs
    tokens_per_second: float | None  # mean over runs
    speedup: float | None  # geometric mean over runs of tokens/s over the plain run's
    predicted_speedup: float | None  # geometric mean of the walltime model's (specbench runs)
    differs: int  # greedy runs whose output is not the baseline's
    checked: int  # greedy runs compared with the baseline

    @property
    def label(self) -> str:
        return config_label(self.method, self.drafter, self.policy)


def config_label(method: str, drafter: str, policy: str, gamma: int | None = None) -> str:
    """How charts name a configuration: "specbench / model / cost", ", γ=12" when gamma is given."""
    label = " / ".join(p for p in (method, drafter, policy) if p)
    return label if gamma is None else f"{label}, γ={gamma}"


def geometric_mean(values: list[float]) -> float | None:
    positive = [v for v in values if v and v > 0]
    if not positive:
        return None
    return math.exp(sum(math.log(v) for v in positive) / len(positive))


def mean(values: list[float | None]) -> float | None:
    known = [v for v in values if v is not None]
    return sum(known) / len(known) if known else None


def group_key(row: dict) -> tuple[str, str, str, int | None]:
    gamma = number(row, "gamma")
    return (row["method"], row["drafter"], row["policy"], None if gamma is None else int(gamma))


def group_rows(rows: list[dict]) -> dict[tuple, list[dict]]:
    groups: dict[tuple, list[dict]] = {}
    for row in rows:
        groups.setdefault(group_key(row), []).append(row)
    return groups


def pooled_acceptance(rows: list[dict]) -> float | None:
    """All accepted / all drafted over rows whose acceptance is known (None when none is)."""
    known = [r for r in rows if number(r, "acceptance_rate") is not None]
    drafted = sum(number(r, "drafted") or 0 for r in known)
    if not known or drafted == 0:
        return None
    accepted = sum(number(r, "accepted") or 0 for r in known)
    return RunStats(drafted=int(drafted), accepted=int(accepted)).acceptance_rate


def summarize_group(key: tuple, rows: list[dict]) -> Summary:
    checked = [r for r in rows if r.get("identical_to_baseline") in ("true", "false")]
    return Summary(
        *key,
        runs=len(rows),
        acceptance_rate=pooled_acceptance(rows),
        mean_accepted_length=mean([number(r, "mean_accepted_length") for r in rows]),
        tokens_per_second=mean([number(r, "tokens_per_second") for r in rows]),
        speedup=geometric_mean([number(r, "speedup") for r in rows]),
        predicted_speedup=geometric_mean([number(r, "predicted_speedup") for r in rows]),
        differs=sum(r["identical_to_baseline"] == "false" for r in checked),
        checked=len(checked),
    )


def summarize(rows: list[dict]) -> list[Summary]:
    """One Summary per method x drafter x policy x gamma, best speedup first."""
    summaries = [summarize_group(key, group) for key, group in group_rows(rows).items()]
    return sorted(summaries, key=lambda s: (s.speedup is None, -(s.speedup or 0), -(s.tokens_per_second or 0)))


# ---------------------------------------------------------------------------- theory from measurements


def expected_accepted_fraction(alpha: float, gamma: int) -> float:
    """E[accepted drafts] / gamma for a full draft of gamma tokens, each accepted with
    probability alpha until the first rejection: (E[tokens per round] - 1) / gamma."""
    return (expected_tokens_per_round(alpha, gamma) - 1.0) / gamma


def estimate_alpha(points: list[tuple[int, float, float]]) -> float | None:
    """The per-token acceptance probability alpha that best explains measured counts.

    points: (gamma, drafted, accepted) per run or group. accepted / drafted is not alpha: a
    rejection ends the round, so later drafts never get their chance. We solve
    sum(drafted * E[accepted fraction | alpha, gamma]) = sum(accepted) for alpha by bisection
    (the left side grows with alpha). Assumes full drafts of gamma tokens (a fixed policy).
    """
    points = [(int(g), d, a) for g, d, a in points if g and d]
    if not points:
        return None
    accepted = sum(a for _, _, a in points)

    def excess(alpha: float) -> float:
        return sum(d * expected_accepted_fraction(alpha, g) for g, d, _ in points) - accepted

    lo, hi = 0.0, 1.0
    if excess(hi - 1e-12) <= 0:
        return 1.0
    for _ in range(60):
        mid = (lo + hi) / 2
        if excess(mid) < 0:
            lo = mid
        else:
            hi = mid
    return (lo + hi) / 2
