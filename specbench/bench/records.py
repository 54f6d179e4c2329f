"""The files a sweep writes beside runs.csv as it goes, and reads back on --resume:
paths.jsonl (each plain output of phase 1, what predictions replay), rounds.jsonl (each
predicted run's rounds, what `specbench predict` prices again, and a cost policy's
calibration evidence, what later prompts start warm from), positions.csv and, when
asked, steps.jsonl. Each line is appended and closed as its run finishes, so an interrupted
sweep loses only the run in progress; a half-written last line is skipped on reading.
"""

from __future__ import annotations

import json
from pathlib import Path

from specbench.bench.labels import BASELINE_METHOD, MEASURED, PREDICTED, PROFILE
from specbench.bench.plan import PlannedRun
from specbench.bench.positions import POSITIONS_CSV, append_positions
from specbench.bench.rows import Measurement, position_rows, step_lines
from specbench.bench.runs_file import KEY_COLUMNS, RUNS_CSV, STEPS_JSONL, append_row, make_dir, read_rows, row_key
from specbench.core.stats import RoundCounts
from specbench.errors import ResultsError, SweepError
from specbench.policies.calibration import Evidence

PATHS_JSONL = "paths.jsonl"  # each plain run's output ids, what predictions replay
ROUNDS_JSONL = "rounds.jsonl"  # each predicted run's rounds (RoundCounts), what `specbench predict` prices again


def prepare_out_dir(out_dir: Path, resume: bool) -> list[dict]:
    """Make the directory; the rows already there when resuming. Refuses to mix sweeps."""
    make_dir(out_dir, SweepError)
    csv_path = out_dir / RUNS_CSV
    if not csv_path.exists() or csv_path.stat().st_size == 0:
        return []
    if not resume:
        raise SweepError(f"{csv_path} already exists: pass --resume to continue that sweep, or choose another --out")
    return read_rows(csv_path)


def _append_lines(path: Path, lines: list[str]) -> None:
    with open(path, "a", encoding="utf-8") as handle:
        handle.write("\n".join(lines) + "\n")


def write_run(out_dir: Path, run: PlannedRun, m: Measurement, row: dict, write_steps: bool) -> None:
    """Everything one finished run adds to the directory: a plain output of phase 1 to
    paths.jsonl, a predicted run's rounds to rounds.jsonl (before its row: every predicted
    row has its rounds), its row to runs.csv, its draft positions to positions.csv and,
    with write_steps, a measured run's steps to steps.jsonl."""
    if run.method == BASELINE_METHOD and run.source == PROFILE:
        path = {"prompt_id": run.prompt.id, "repeat": run.repeat, "output": m.token_ids}
        _append_lines(out_dir / PATHS_JSONL, [json.dumps(path)])
    if run.source == PREDICTED:
        rounds = {"run": dict(zip(KEY_COLUMNS, run.key)), "rounds": RoundCounts.of(m.steps).as_json()}
        if m.evidence is not None:
            rounds["calibration"] = m.evidence.as_json()
        _append_lines(out_dir / ROUNDS_JSONL, [json.dumps(rounds)])
    append_row(out_dir / RUNS_CSV, row)
    if m.positions:
        append_positions(out_dir / POSITIONS_CSV, position_rows(run, m.positions))
    if write_steps and m.steps and run.source == MEASURED:
        _append_lines(out_dir / STEPS_JSONL, step_lines(run, m.steps))


def read_paths(out_dir: Path) -> dict[tuple[str, int], list[int]]:
    """The plain outputs an interrupted sweep recorded (paths.jsonl), by (prompt id, repeat);
    a half-written last line is skipped."""
    outputs = {}
    path = Path(out_dir) / PATHS_JSONL
    if path.is_file():
        for line in path.read_text(encoding="utf-8").splitlines():
            try:
                item = json.loads(line)
            except json.JSONDecodeError:
                continue
            outputs[(item["prompt_id"], int(item["repeat"]))] = [int(t) for t in item["output"]]
    return outputs


def read_rounds(out_dir: Path) -> dict[tuple[str, ...], RoundCounts]:
    """Each predicted run's rounds (rounds.jsonl), by results.row_key; a half-written last
    line is skipped. A directory without the file (a sweep from before it was written) is
    a ResultsError."""
    path = Path(out_dir) / ROUNDS_JSONL
    if not path.is_file():
        raise ResultsError(
            f"no {ROUNDS_JSONL} in {out_dir}: its sweep was written before sweeps recorded their predicted"
            " rounds; run it again with this version to price it"
        )
    rounds = {}
    for line in path.read_text(encoding="utf-8").splitlines():
        try:
            item = json.loads(line)
            rounds[row_key(item["run"])] = RoundCounts.from_json(item["rounds"])
        except (json.JSONDecodeError, KeyError, TypeError, ValueError, AttributeError):
            continue
    return rounds


def read_evidence(out_dir: Path) -> dict[tuple[str, int, str, int], Evidence]:
    """The calibration evidence of the predicted runs an interrupted sweep recorded
    (rounds.jsonl), by warm.WarmKey; lines without it, or half-written, are skipped."""
    path = Path(out_dir) / ROUNDS_JSONL
    found = {}
    if path.is_file():
        for line in path.read_text(encoding="utf-8").splitlines():
            try:
                item = json.loads(line)
                run = item["run"]
                key = (run["drafter"], int(float(run["gamma"])), str(run["prompt_id"]), int(float(run["repeat"])))
                found[key] = Evidence.from_json(item["calibration"])
            except (json.JSONDecodeError, KeyError, TypeError, ValueError):
                continue
    return found
