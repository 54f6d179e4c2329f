"""`specbench predict`: a finished sweep's predictions priced again with other costs, with
no model loaded.

Acceptance is a property of the pair and the prompts; costs (c, v(k), u(n)) are a property
of the machine and the shapes. A sweep records them apart: each predicted run's rounds
(rounds.jsonl, stats.RoundCounts) and each block's costs (meta.json's costs_by_block). So
its predicted rows can be priced again, by the functions the sweep priced them with
(sweep.price_blocks, sweep.predicted_price), with the costs of another machine or of
other model shapes: a costs file (`specbench costs`, meta.costs_meta) or another sweep's
meta.json. Without other costs each block is priced as the sweep priced it (the pool of
its model's blocks near its context), which gives the sweep's predicted rows back exactly
(for a sweep that was not resumed with other prompts: the pool is over every block
meta.json recorded); with a costs file, every row is priced with its one measurement.

The price changes, never the rounds: drafted, accepted and target forwards stay as
replayed. The cost policy and the oracle choose their drafts by the costs; re-priced, they
keep the drafts they chose under the sweep's costs (choosing again needs the drafter's
rows along every path, n x vocab floats a prompt, which a sweep does not keep).

Writes a results directory that `specbench plot` reads: runs.csv (the plain runs the
predictions are measured against, as they were, and the predicted rows priced again;
tokens_per_second stays in the units of the sweep's plain run), positions.csv's predicted
rows, paths.jsonl and rounds.jsonl as they were (so it can be priced again), and
meta.json: the sweep's, with the costs that priced it and `repriced` saying where they
came from. Knows nothing of models or the command line.
"""

from __future__ import annotations

import csv
import shutil
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path

from specbench.bench.accuracy import price_accuracy, price_check
from specbench.bench.costs import Costs
from specbench.bench.labels import ORACLE_POLICY, PREDICTED, PROFILE
from specbench.bench.meta import read_costs_meta, set_sweep_costs, summary_records
from specbench.bench.meta_file import META_JSON, read_meta, write_meta
from specbench.bench.plan import label_uses_model
from specbench.bench.positions import POSITIONS_CSV, append_positions
from specbench.bench.pricing import costs_key, costs_model, price_blocks
from specbench.bench.records import PATHS_JSONL, ROUNDS_JSONL, read_rounds
from specbench.bench.rows import baseline_key, baselines_from_rows, predicted_price
from specbench.bench.runs_file import RUNS_CSV, append_row, make_dir, read_rows, row_key
from specbench.errors import ResultsError

CHOOSE_BY_COSTS = ("cost", ORACLE_POLICY)  # policies whose drafts depend on the costs


@dataclass(frozen=True)
class Repriced:
    out_dir: Path
    rows: int  # predicted rows priced
    costs: Costs  # what meta.json reports: the sweep's pool over all blocks, or the file's
    costs_file: Path | None  # None: the sweep's own costs
    kept_drafts: (
        int  # rows of CHOOSE_BY_COSTS priced again on the drafts the sweep's costs chose (0 with its own costs)
    )


def reprice(results: Path, out_dir: Path, costs_file: Path | None = None, *, command: str = "") -> Repriced:
    """Price the predicted rows of the sweep in `results` with the costs in costs_file (a
    costs file or a sweep's meta.json; None: the sweep's own) and write them to out_dir
    (module docstring). A directory that is not a finished sweep's of this version, or an
    out_dir that holds results, is a ResultsError, before anything is written."""
    results, out_dir = Path(results), Path(out_dir)
    # 1. what the sweep recorded
    rows = read_rows(results / RUNS_CSV)
    meta = read_meta(results)
    predicted = [row for row in rows if row["source"] == PREDICTED]
    if not predicted:
        raise ResultsError(
            f"{results} has no predicted rows to price (a sweep interrupted before its predictions: --resume it)"
        )
    rounds = read_rounds(results)
    unrecorded = [row for row in predicted if row_key(row) not in rounds]
    if unrecorded:
        raise ResultsError(
            f"{len(unrecorded)} predicted row(s) of {results} have no rounds in {ROUNDS_JSONL}"
            " (rows written by a version before it): run the sweep again to price it"
        )
    # 2. the costs of each row
    file_costs, file_meta = read_costs_meta(costs_file) if costs_file is not None else (None, None)
    costs_of, sweep_costs = (
        sweep_prices(meta, rows, results)[:2]
        if file_costs is None
        else _file_prices(file_costs, meta, predicted, costs_file)
    )
    # 3. the rows, priced; the plain runs they are measured against as they were
    if out_dir.resolve() == results.resolve() or (out_dir / RUNS_CSV).exists():
        raise ResultsError(f"{out_dir} already holds results: choose another --out")
    baselines = baselines_from_rows(rows)
    priced = []
    for row in rows:
        if row["source"] == PROFILE:
            priced.append(row)
        elif row["source"] == PREDICTED:
            baseline = baselines.get(baseline_key(PREDICTED, row["prompt_id"], row["repeat"]))
            priced.append({**row, **predicted_price(rounds[row_key(row)], baseline, costs_of(row))})
    # 4. the directory
    make_dir(out_dir)
    for row in priced:
        append_row(out_dir / RUNS_CSV, row)
    _copy_predicted_positions(results / POSITIONS_CSV, out_dir / POSITIONS_CSV)
    for name in (PATHS_JSONL, ROUNDS_JSONL):
        if (results / name).is_file():
            shutil.copyfile(results / name, out_dir / name)
    written = read_rows(out_dir / RUNS_CSV)  # as the sweep summarises its rows: as runs.csv reads back
    write_meta(out_dir, _repriced_meta(meta, written, sweep_costs, results, costs_file, file_meta, command))
    kept = 0 if costs_file is None else sum(row["policy"] in CHOOSE_BY_COSTS for row in predicted)
    return Repriced(out_dir, len(predicted), sweep_costs, costs_file, kept)


def sweep_prices(
    meta: dict, rows: list[dict], results: Path | str = "the sweep"
) -> tuple[Callable[[dict], Costs], Costs, int]:
    """Each predicted row's costs as the sweep priced it (price_blocks over meta.json's
    costs_by_block, by the keys the sweep gave its blocks), and the pool over all blocks
    of its first drafter model, as meta.json reports it, with how many blocks it pools.
    `results` names the sweep in errors."""
    blocks = {key: Costs.from_meta(raw) for key, raw in (meta.get("costs_by_block") or {}).items()}
    if not blocks:
        raise ResultsError(f"{results / META_JSON} records no costs (costs_by_block) to price with: give --costs FILE")
    sweep = meta.get("sweep") or {}
    models = list(sweep.get("drafter_models") or [""])
    per_prompt = sweep.get("costs_per_prompt", True)
    profile = [(row["prompt_id"], int(float(row["repeat"]))) for row in rows if row["source"] == PROFILE]
    priced, sweep_wide = price_blocks(
        blocks, {name: [costs_key(p, r, name, per_prompt) for p, r in profile] for name in models}
    )

    def costs_of(row: dict) -> Costs:
        key = costs_key(row["prompt_id"], int(float(row["repeat"])), costs_model(row["drafter"], models[0]), per_prompt)
        if key not in priced:
            raise ResultsError(f"{results / META_JSON} records no costs for block {key!r} to price it with")
        return priced[key]

    if not sweep_wide:
        raise ResultsError(f"{results / META_JSON} records no costs for the blocks of its plain runs to price with")
    return costs_of, *(sweep_wide.get(models[0]) or next(iter(sweep_wide.values())))


def sweep_price_check(meta: dict, rows: list[dict], results: Path) -> dict:
    """accuracy.price_accuracy of a sweep's measured runs against the costs the sweep priced
    their predictions with (sweep_prices, rounds.jsonl): where their time went. n is 0
    where the sweep recorded no costs or rounds to read it with."""
    try:
        costs_of = sweep_prices(meta, rows, results)[0]
        return price_accuracy(price_check(rows, read_rounds(results), costs_of))
    except ResultsError:  # no costs or rounds recorded, or none for a block
        return price_accuracy(price_check([], {}, costs_of=None))


def _file_prices(costs: Costs, meta: dict, predicted: list[dict], path: Path) -> tuple[Callable[[dict], Costs], Costs]:
    """Every row priced with one pair's costs; a sweep of several drafter models, or one
    that drafts with a model priced by costs without a drafter, is refused."""
    models = list((meta.get("sweep") or {}).get("drafter_models") or [""])
    if len(models) > 1:
        raise ResultsError(
            f"that sweep compares {len(models)} drafter models, and {path} holds one pair's costs:"
            " price it with its own"
        )
    drafted = next((row["drafter"] for row in predicted if label_uses_model(row["drafter"])), None)
    if costs.c is None and drafted is not None:
        raise ResultsError(
            f"{path} measured no drafter model (no c), and that sweep's {drafted} rows draft with one:"
            " measure them with --drafter-model"
        )
    return (lambda _row: costs), costs


def _copy_predicted_positions(source: Path, dest: Path) -> None:
    """positions.csv's predicted rows as they are: where drafts are accepted does not depend
    on what forwards cost."""
    if not source.is_file():
        return
    with open(source, newline="", encoding="utf-8") as handle:
        rows = [row for row in csv.DictReader(handle) if row.get("source") == PREDICTED]
    if rows:
        append_positions(dest, rows)


def _repriced_meta(
    meta: dict,
    rows: list[dict],
    costs: Costs,
    results: Path,
    costs_file: Path | None,
    file_meta: dict | None,
    command: str,
) -> dict:
    """The sweep's meta.json for the priced rows: the costs that priced them (a costs file's
    in place of the sweep's, its blocks dropped), the summary of the rows, no measured
    checks, and `repriced`: from where, with which costs, when."""
    repriced = dict(meta)
    for key in ("checks", "measured_gammas"):
        repriced.pop(key, None)
    origin = {"results": str(results), "costs": "the sweep's own (costs_by_block)"}
    if costs_file is not None:
        repriced.pop("costs_by_block", None)
        set_sweep_costs(repriced, costs, 1)
        keys = ("created", "command", "machine", "versions", "models", "costs_settings")
        origin = {
            "results": str(results),
            "costs": str(costs_file),
            "costs_from": {k: file_meta.get(k) for k in keys if k in file_meta},
        }
    repriced["summary"] = summary_records(rows)
    repriced["repriced"] = {
        **origin,
        "created": datetime.now(UTC).isoformat(timespec="seconds"),
        "command": command,
    }
    return repriced
