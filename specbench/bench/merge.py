"""`specbench merge`: the shards of one sweep (`sweep --shard I/N`, shards.py) joined into one
results directory that `plot` and `predict` read as they read a sweep run on one machine.

A merge is refused, in one line naming the difference, unless the shards belong together:
every shard 1..N once, each finished and whole (no line cut by an interrupted write), the same
sweep settings (gammas, drafters, policies, sampling, prompt set and its texts), the same models
(class, dtype, device, size and weights digest, meta.model_meta) and no prompt in two shards.

What the merged directory holds: every shard's rows (runs.csv, positions.csv, paths.jsonl,
rounds.jsonl, steps.jsonl where present) in the order one sweep writes them (phase by phase,
repeat by repeat, prompt by prompt in the selection's order), and a meta.json with the shards'
common settings, each shard's machine, command and costs, whether the machines differ, every
block's costs (costs_by_block: `predict` prices the merged predictions from them, or from one
machine's costs file with --costs), the pool over them, and the summary and checks of all rows.
A speedup stays within its prompt (each prompt's plain and speculative runs ran on one machine);
when the machines differ the pooled costs mix them, and meta.json says so.

Knows nothing of models or the command line.
"""

from __future__ import annotations

import csv
import json
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path

from specbench.bench.labels import MEASURED, PREDICTED, PROFILE
from specbench.bench.meta import closing_meta, set_sweep_costs
from specbench.bench.meta_file import META_JSON, read_meta, write_meta
from specbench.bench.positions import POSITIONS_CSV
from specbench.bench.records import PATHS_JSONL, ROUNDS_JSONL
from specbench.bench.reprice import sweep_prices
from specbench.bench.runs_file import RUNS_CSV, STEPS_JSONL, make_dir, read_rows
from specbench.bench.shards import Shard
from specbench.errors import ResultsError

CSV_FILES = (RUNS_CSV, POSITIONS_CSV)
JSONL_FILES = (PATHS_JSONL, ROUNDS_JSONL, STEPS_JSONL)
PHASES = {PROFILE: 0, PREDICTED: 1, MEASURED: 2}  # the order one sweep writes its rows in
SHARD_OWN = ("shard",)  # sweep settings that differ between shards by design


@dataclass(frozen=True)
class ShardDir:
    path: Path
    meta: dict
    shard: Shard

    def __str__(self) -> str:
        return f"shard {self.shard} ({self.path})"


@dataclass(frozen=True)
class Merged:
    out_dir: Path
    shards: int
    rows: int
    machines: list[str]  # each distinct machine the shards ran on, in shard order


def merge(out_dir: Path, shard_dirs: list[Path], *, command: str = "") -> Merged:
    """Join `shard_dirs` into `out_dir` (a new directory), after checking they belong together."""
    shards = sorted((read_shard(Path(d)) for d in shard_dirs), key=lambda s: s.shard.index)
    check_together(shards)
    out_dir = Path(out_dir)
    if (out_dir / RUNS_CSV).exists():
        raise ResultsError(f"{out_dir / RUNS_CSV} already exists: merge into a new directory")
    make_dir(out_dir)
    order = {pid: i for i, pid in enumerate(shards[0].meta["sweep"]["prompt_ids"])}
    for name in CSV_FILES:
        _merge_csv([s.path / name for s in shards], out_dir / name, order)
    for name in JSONL_FILES:
        _merge_jsonl([s.path / name for s in shards], out_dir / name, order)
    rows = read_rows(out_dir / RUNS_CSV)
    meta = merged_meta(shards, rows, command)
    write_meta(out_dir, meta)
    return Merged(out_dir, len(shards), len(rows), meta["machines"])


# ---------------------------------------------------------------------------- reading and checking


def read_shard(path: Path) -> ShardDir:
    """A finished shard's directory, its files whole; anything else fails in one line."""
    meta = read_meta(path)
    if not meta:
        raise ResultsError(f"{path} has no {META_JSON}: not a sweep's results directory")
    raw = (meta.get("sweep") or {}).get("shard")
    if not raw:
        raise ResultsError(f"{path} is not a shard: it was not swept with --shard I/N")
    shard = Shard(int(raw["index"]), int(raw["count"]))
    if not meta.get("finished"):
        raise ResultsError(f"shard {shard} ({path}) is not finished: run it again with --resume")
    for name in (*CSV_FILES, *JSONL_FILES):
        _check_whole(path / name, shard)
    if not (path / RUNS_CSV).is_file():
        raise ResultsError(f"shard {shard} ({path}) has no {RUNS_CSV}")
    return ShardDir(path, meta, shard)


def _check_whole(path: Path, shard: Shard) -> None:
    """A file an interrupted write left without its last newline is half-written."""
    if not path.is_file() or path.stat().st_size == 0:
        return
    with open(path, "rb") as handle:
        handle.seek(-1, 2)
        if handle.read(1) != b"\n":
            raise ResultsError(f"shard {shard}: {path} is cut mid-line (an interrupted write): resume that shard")


def check_together(shards: list[ShardDir]) -> None:
    """Every shard of one split once, with one sweep's settings and models, no prompt twice."""
    if not shards:
        raise ResultsError("no shards to merge")
    first = shards[0]
    for before, other in zip(shards, shards[1:], strict=False):  # sorted by index: a shard twice is a neighbour
        if other.shard.count != first.shard.count:
            raise ResultsError(f"{first} and {other} come from different splits")
        if other.shard.index == before.shard.index:
            raise ResultsError(f"shard {other.shard} is given twice: {before.path} and {other.path}")
    missing = sorted(set(range(1, first.shard.count + 1)) - {s.shard.index for s in shards})
    if missing:
        names = ", ".join(f"{i}/{first.shard.count}" for i in missing)
        raise ResultsError(f"missing shard(s) {names}: merge needs every shard of the split")
    for other in shards[1:]:
        _check_same(first, other, "sweep", drop=SHARD_OWN)
        _check_same(first, other, "models")
        _check_same(first, other, "seed")
    _check_prompts_once(shards)


def _check_same(first: ShardDir, other: ShardDir, key: str, drop: tuple[str, ...] = ()) -> None:
    a, b = first.meta.get(key), other.meta.get(key)
    if isinstance(a, dict) and isinstance(b, dict):
        a, b = ({k: v for k, v in d.items() if k not in drop} for d in (a, b))
    where = first_difference(a, b, key)
    if where is not None:
        path, mine, theirs = where
        raise ResultsError(f"the shards differ in {path}: {mine!r} in {first}, {theirs!r} in {other}")


def first_difference(a, b, path: str) -> tuple[str, object, object] | None:
    """The first place (a dotted path) where two JSON values differ, with both values there."""
    if isinstance(a, dict) and isinstance(b, dict):
        for key in dict.fromkeys([*a, *b]):
            found = first_difference(a.get(key), b.get(key), f"{path}.{key}")
            if found is not None:
                return found
        return None
    return None if a == b else (path, a, b)


def _check_prompts_once(shards: list[ShardDir]) -> None:
    seen: dict[str, ShardDir] = {}
    for shard in shards:
        for pid in dict.fromkeys(row["prompt_id"] for row in read_rows(shard.path / RUNS_CSV)):
            if pid in seen:
                raise ResultsError(f"prompt {pid!r} is in {seen[pid]} and in {shard}")
            seen[pid] = shard


# ---------------------------------------------------------------------------- writing


def _sort_key(record: dict, order: dict[str, int]) -> tuple[int, int, int]:
    """Where one sweep would have written a record: phase, repeat, prompt in the selection."""
    phase = PHASES.get(record.get("source") or MEASURED, len(PHASES))
    repeat = int(float(record.get("repeat") or 0))
    return phase, repeat, order.get(str(record.get("prompt_id")), len(order))


def _merge_csv(sources: list[Path], dest: Path, order: dict[str, int]) -> None:
    """The shards' rows under one header (the first shard's column order), sorted stably."""
    present = [path for path in sources if path.is_file() and path.stat().st_size > 0]
    if not present:
        return
    header, rows = None, []
    for path in present:
        with open(path, newline="", encoding="utf-8") as handle:
            reader = csv.DictReader(handle)
            if header is None:
                header = list(reader.fieldnames or [])
            elif set(reader.fieldnames or []) != set(header):
                raise ResultsError(f"{path} has other columns than {present[0]}: written by another version")
            rows.extend(reader)
    rows.sort(key=lambda row: _sort_key(row, order))
    with open(dest, "w", newline="", encoding="utf-8") as handle:
        writer = csv.DictWriter(handle, fieldnames=header)
        writer.writeheader()
        writer.writerows(rows)


def _merge_jsonl(sources: list[Path], dest: Path, order: dict[str, int]) -> None:
    lines = []
    for path in sources:
        if path.is_file():
            lines += [line for line in path.read_text(encoding="utf-8").splitlines() if line.strip()]
    if not lines:
        return
    records = sorted(((json.loads(line), line) for line in lines), key=lambda pair: _sort_key(pair[0], order))
    dest.write_text("".join(line + "\n" for _, line in records), encoding="utf-8")


def machine_name(meta: dict) -> str:
    """One line for the machine a shard ran on: its GPU, else its CPU and the flags that matter."""
    machine = meta.get("machine") or {}
    if machine.get("cuda"):
        return str(machine["cuda"])
    cpu = machine.get("cpu") or {}
    flags = ", ".join(cpu.get("flags") or []) or "no fast-path flags"
    return f"{cpu.get('model') or machine.get('processor') or 'unknown CPU'} [{flags}]"


def merged_meta(shards: list[ShardDir], rows: list[dict], command: str) -> dict:
    """The first shard's meta.json made the merged sweep's (module docstring)."""
    meta = json.loads(json.dumps(shards[0].meta))  # a deep copy
    machines = list(dict.fromkeys(machine_name(s.meta) for s in shards))
    meta.update(
        created=datetime.now(UTC).isoformat(timespec="seconds"),
        command=command,
        machine=meta.get("machine") if len(machines) == 1 else None,
        machines=machines,
        machines_differ=len(machines) > 1,
        shards=[_shard_record(s) for s in shards],
        costs_by_block={k: v for s in shards for k, v in (s.meta.get("costs_by_block") or {}).items()},
    )
    meta["sweep"]["shard"] = None
    meta.update(closing_meta(rows))
    if meta["costs_by_block"]:
        pooled, count = sweep_prices(meta, rows)[1:]
        set_sweep_costs(meta, pooled, count)
    return meta


def _shard_record(shard: ShardDir) -> dict:
    keep = ("created", "command", "versions", "machine", "draft_int8_kernel", "costs", "c", "costs_pooled")
    return {"shard": str(shard.shard), "dir": str(shard.path), **{k: shard.meta.get(k) for k in keep}}
