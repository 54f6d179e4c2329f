"""The trace file: a generation's rounds as JSONL, written as they happen and read back for
`specbench trace` (rendering is trace.py's).

Trace file, JSONL, one object per line:
    {"specbench_trace": 1, "header": {...}}      prompt, models, sampling settings
    {<StepRecord fields>, "texts": {id: text}}   one per round; texts of the ids first seen there
    {"stats": {<RunStats fields>}}               last, when the run finished
A round line is StepRecord.to_json() plus "texts", so StepRecord.from_json reads it as is.

Reading checks every line (types, lengths, the version) and names the line of any fault in a
TraceFileError, so a damaged or foreign file is one line for the user, not a traceback.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass, fields
from pathlib import Path

from specbench.core.stats import RunStats, StepRecord
from specbench.errors import TraceFileError

TokenText = Callable[[int], str]

FORMAT_VERSION = 1


class TraceWriter:
    """Writes a trace file as the run goes: header now, a line per on_step, stats on close.

    Every line is flushed, so an interrupted run leaves a file that still replays. A path
    that cannot be written raises TraceFileError (one line, for the CLI's fail()).
    """

    def __init__(self, path: str | Path, token_text: TokenText, header: dict | None = None):
        self.token_text = token_text
        self._seen: set[int] = set()
        try:
            self._file = open(path, "w", encoding="utf-8")
        except OSError as exc:
            raise TraceFileError(f"{path}: cannot write a trace there ({exc.strerror or exc})") from None
        self._write({"specbench_trace": FORMAT_VERSION, "header": dict(header or {})})

    def on_step(self, record: StepRecord) -> None:
        data = json.loads(record.to_json())
        data["texts"] = self._new_texts(record)
        self._write(data)

    def close(self, stats: RunStats | None = None) -> None:
        if stats is not None:
            self._write({"stats": {f.name: getattr(stats, f.name) for f in fields(RunStats)}})
        self._file.close()

    def __enter__(self) -> TraceWriter:
        return self

    def __exit__(self, *exc) -> None:
        if not self._file.closed:
            self._file.close()

    def _new_texts(self, record: StepRecord) -> dict[str, str]:
        ids = [*record.draft_tokens, record.emitted_token, *record.tokens]
        new = [i for i in dict.fromkeys(ids) if i not in self._seen]
        self._seen.update(new)
        return {str(i): self.token_text(i) for i in new}

    def _write(self, data: dict) -> None:
        self._file.write(json.dumps(data, default=str) + "\n")
        self._file.flush()


def write_trace(
    path: str | Path,
    records: list[StepRecord],
    token_text: TokenText,
    header: dict | None = None,
    stats: RunStats | None = None,
) -> None:
    """The trace file of a finished run in one call."""
    writer = TraceWriter(path, token_text, header)
    for record in records:
        writer.on_step(record)
    writer.close(stats)


@dataclass
class TraceFile:
    header: dict
    records: list[StepRecord]
    texts: dict[int, str]
    stats: RunStats | None  # None when the run did not finish

    def token_text(self, token_id: int) -> str:
        return self.texts.get(token_id, f"<{token_id}>")


def read_trace(path: str | Path) -> TraceFile:
    """Parse a trace file; any problem raises TraceFileError with a one-line reason. A last
    line cut short (the writer ends every line it finishes with a newline; a killed run can
    leave half of one) is left out: the rounds before it replay, as from an interrupted run."""
    lines = _read_lines(Path(path))
    header = _parse_header(path, lines[0] if lines else "")
    trace = TraceFile(header, [], {}, None)
    for number, line in enumerate(lines[1:], start=2):
        if line.strip():
            _parse_line(trace, line, f"{path}:{number}")
    return trace


def _read_lines(path: Path) -> list[str]:
    """The file's finished lines: all of them, less a last one that has no newline and is
    not JSON."""
    text = _read_text(path)
    lines = text.split("\n")
    if len(lines) > 1 and not text.endswith("\n"):
        try:
            json.loads(lines[-1])
        except json.JSONDecodeError:
            lines = lines[:-1]
    return lines


def _read_text(path: Path) -> str:
    try:
        return path.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise TraceFileError(f"{path}: no such file") from None
    except IsADirectoryError:
        raise TraceFileError(f"{path}: is a directory, not a trace file") from None
    except (OSError, UnicodeDecodeError) as exc:
        raise TraceFileError(f"{path}: cannot read it ({exc})") from None


def _parse_header(path, line: str) -> dict:
    data = _json_object(line, f"{path}:1")
    if "specbench_trace" not in data:
        raise TraceFileError(f"{path}: not a specbench trace (no header line)")
    if data["specbench_trace"] != FORMAT_VERSION:
        raise TraceFileError(f"{path}: trace format {data['specbench_trace']!r}; this specbench reads {FORMAT_VERSION}")
    header = data.get("header", {})
    if not isinstance(header, dict):
        raise TraceFileError(f"{path}:1: the header is not an object")
    return header


def _parse_line(trace: TraceFile, line: str, where: str) -> None:
    data = _json_object(line, where)
    if "stats" in data:
        trace.stats = _parse_stats(data["stats"], where)
        return
    try:
        record = StepRecord.from_json(line)
        texts = {int(k): str(v) for k, v in data.get("texts", {}).items()}
    except (TypeError, ValueError, AttributeError) as exc:
        raise TraceFileError(f"{where}: not a step record ({exc})") from None
    _check_record(record, where)
    trace.records.append(record)
    trace.texts.update(texts)


def _json_object(line: str, where: str) -> dict:
    try:
        data = json.loads(line)
    except json.JSONDecodeError as exc:
        raise TraceFileError(f"{where}: not JSON ({exc.msg})") from None
    if not isinstance(data, dict):
        raise TraceFileError(f"{where}: expected a JSON object")
    return data


def _parse_stats(data, where: str) -> RunStats:
    if not isinstance(data, dict):
        raise TraceFileError(f"{where}: stats is not an object")
    known = {f.name for f in fields(RunStats)}
    values = {k: v for k, v in data.items() if k in known}
    if not all(isinstance(v, (int, float)) and not isinstance(v, bool) for v in values.values()):
        raise TraceFileError(f"{where}: stats values must be numbers")
    return RunStats(**values)


def _check_record(record: StepRecord, where: str) -> None:
    """Types the renderer relies on, so a hand-edited file fails with a line, not a traceback."""
    ints = ("round", "position", "gamma", "accepted", "emitted_token")
    numbers = ("emitted_prob", "draft_seconds", "verify_seconds")
    bad = [n for n in ints if not _is_int(getattr(record, n))]
    bad += [n for n in numbers if not _is_number(getattr(record, n))]
    bad += [n for n in ("draft_tokens", "tokens") if not _all(getattr(record, n), _is_int)]
    bad += [n for n in ("target_probs", "draws") if not _all(getattr(record, n), _is_number)]
    bad += [] if _all(record.draft_probs, lambda x: x is None or _is_number(x)) else ["draft_probs"]
    bad += [] if isinstance(record.policy_info, dict) else ["policy_info"]
    bad += [] if record.stop_reason is None or isinstance(record.stop_reason, str) else ["stop_reason"]
    if bad:
        raise TraceFileError(f"{where}: bad step record field(s): {', '.join(bad)}")
    k = len(record.draft_tokens)
    if len(record.draft_probs) != k or len(record.target_probs) != k or not 0 <= record.accepted <= k:
        raise TraceFileError(f"{where}: draft_tokens, draft_probs, target_probs and accepted disagree")


def _is_int(x) -> bool:
    return isinstance(x, int) and not isinstance(x, bool)


def _is_number(x) -> bool:
    return isinstance(x, (int, float)) and not isinstance(x, bool)


def _all(values, check) -> bool:
    return isinstance(values, list) and all(check(v) for v in values)
