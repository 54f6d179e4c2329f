"""The step-by-step trace: StepRecords rendered with rich, live or replayed from a file.

This module owns how a generation looks in the terminal (a header, one block per round, a
summary, the marked-up text), live or replayed. It must not know how decoding works:
no torch, no models, no tokenizers. Token text comes from a `token_text(id) -> str` function
that the caller supplies (live: a tokenizer's decode of one id; replay: the texts stored in
the file), so the same Tracer draws both views and a replay reads exactly like the live run.

Names as in verify.py: q = draft_probs (the drafter), p = target_probs (the target).

The trace file (write and read) is tracefile.py's; what the rounds add up to, tracestats.py's.
"""

from __future__ import annotations

import json
import unicodedata
from collections.abc import Callable
from pathlib import Path

from rich.console import Console, Group, RenderableType
from rich.padding import Padding
from rich.table import Table
from rich.text import Text

from specbench.cli.tracefile import TraceFile, read_trace
from specbench.cli.tracestats import (
    PositionAcceptance,
    acceptance_by_position,
    accepted_length_histogram,
    stats_from_records,
)
from specbench.core.stats import BONUS, CORRECTION, FIRST, RunStats, StepRecord

TokenText = Callable[[int], str]
OnStep = Callable[[StepRecord], None]

DRAFT = "draft"  # an accepted draft token, in the text view

# How each kind of output token looks: a colour, and brackets for consoles without colour.
STYLES = {DRAFT: "green", CORRECTION: "bold red", BONUS: "bold cyan", FIRST: "magenta"}
MARKS = {DRAFT: ("", ""), CORRECTION: ("⟦", "⟧"), BONUS: ("⟨", "⟩"), FIRST: ("«", "»")}
LABELS = {DRAFT: "accepted draft", CORRECTION: "correction", BONUS: "bonus", FIRST: "first token"}

TOKEN_WIDTH = 16  # widest token cell in a round's table
BAR_WIDTH = 24  # widest bar in the summary


# ---------------------------------------------------------------------------- text and numbers

_ESCAPES = {"\n": "\\n", "\t": "\\t", "\r": "\\r"}


def escape_text(text: str) -> str:
    r"""Text on one line: newlines, tabs and other control or invisible characters escaped
    (`\n`, `\t`, `\x1b`, `\u200b`); ordinary spaces stay spaces."""
    return "".join(_escape_char(ch) for ch in text)


def escape_token(text: str) -> str:
    r"""One token, every character visible: spaces as `␣`, backslashes doubled (so a real
    backslash-n token reads `\\n`, a newline `\n`), the empty string as `""`."""
    if not text:
        return '""'
    return "".join("␣" if ch == " " else "\\\\" if ch == "\\" else _escape_char(ch) for ch in text)


def _escape_char(ch: str) -> str:
    if ch in _ESCAPES:
        return _ESCAPES[ch]
    if ch == " " or not (ch.isspace() or unicodedata.category(ch) in ("Cc", "Cf", "Cs", "Co", "Cn")):
        return ch
    code = ord(ch)
    return f"\\x{code:02x}" if code < 0x100 else f"\\u{code:04x}"


def shorten(text: str, width: int) -> str:
    return text if len(text) <= width else text[: width - 1] + "…"


def format_prob(x: float | None) -> str:
    """A probability in at most 7 characters; "-" when there is none."""
    if x is None:
        return "-"
    return f"{x:.3f}" if x == 0 or x >= 0.001 else f"{x:.1e}"


def format_ratio(p: float, q: float | None) -> str:
    if q is None:
        return "-"
    if q == 0:
        return "inf" if p > 0 else "-"
    return f"{p / q:.2f}"


def format_seconds(seconds: float) -> str:
    return f"{seconds * 1000:.1f} ms" if seconds < 1 else f"{seconds:.2f} s"


def format_info(info: dict) -> str:
    """A policy's reasons, generically: `entropy=0.31 gamma=4`."""
    return " ".join(f"{key}={_format_value(value)}" for key, value in info.items())


def _format_value(value) -> str:
    if isinstance(value, float):
        return f"{value:.3g}"
    if isinstance(value, (dict, list)):
        return json.dumps(value, default=str)
    return str(value)


def is_plain(console: Console) -> bool:
    """True when the console shows no colour (NO_COLOR, a pipe, a file): mark with brackets."""
    return console.no_color or console.color_system is None


# ---------------------------------------------------------------------------- the text view


def round_segments(record: StepRecord, token_text: TokenText) -> list[tuple[str, str]]:
    """(kind, text) of each token the round appended to the output, after any stop cut."""
    segments = []
    for i, token in enumerate(record.tokens):
        kind = DRAFT if i < record.accepted and record.emitted_kind != FIRST else record.emitted_kind
        segments.append((kind, token_text(token)))
    return segments


def render_segments(segments: list[tuple[str, str]], plain: bool, budget: int | None = None) -> Text:
    """The text so far, each token coloured by kind (bracketed when plain); with a budget,
    only its last `budget` characters, led by "…"."""
    pieces = [(kind, _marked(kind, escape_text(text), plain)) for kind, text in segments]
    if budget is not None:
        pieces = _tail(pieces, budget)
    text = Text()
    for kind, piece in pieces:
        text.append(piece, style=STYLES.get(kind))
    return text


def _marked(kind: str, text: str, plain: bool) -> str:
    if not plain:
        return text
    left, right = MARKS.get(kind, ("", ""))
    return f"{left}{text}{right}"


def _tail(pieces: list[tuple[str, str]], budget: int) -> list[tuple[str, str]]:
    kept: list[tuple[str, str]] = []
    used = 0
    for kind, piece in reversed(pieces):
        if used + len(piece) > budget:
            room = budget - used - 1
            kept.append((kind, piece[-room:] if room > 0 else ""))
            kept.append(("", "…"))
            break
        kept.append((kind, piece))
        used += len(piece)
    return kept[::-1]


def render_legend(plain: bool) -> Text:
    """What the marks in the text mean."""
    text = Text("text: ")
    for n, kind in enumerate((DRAFT, CORRECTION, BONUS, FIRST)):
        if n:
            text.append(" · ")
        left, right = MARKS[kind] if plain else ("", "")
        text.append(f"{left}{LABELS[kind]}{right}", style=STYLES[kind])
    return text


# ---------------------------------------------------------------------------- one round


def render_round(record: StepRecord, token_text: TokenText, text_so_far: Text, notes: list[str]) -> RenderableType:
    """One round: title, the drafts and their verdicts, the emitted token, the text so far."""
    parts: list[RenderableType] = [round_title(record)]
    if record.emitted_kind != FIRST:
        parts.append(draft_table(record, token_text) if record.draft_tokens else Text("  (no drafts this round)"))
    parts.append(emitted_line(record, token_text))
    if record.stop_reason:
        parts.append(Text(f"  stop: {record.stop_reason}", style="bold"))
    parts.extend(indent(Text(f"note: {note}", style="dim")) for note in notes)
    parts.append(indent(Text("text: ") + text_so_far))
    parts.append(Text(""))
    return Group(*parts)


def indent(renderable: RenderableType) -> Padding:
    """Two spaces in, wrapped lines included."""
    return Padding(renderable, (0, 0, 0, 2), expand=False)


def round_title(record: StepRecord) -> Text:
    title = Text(f"round {record.round}", style="bold")
    if record.emitted_kind == FIRST:
        title.append(f"  first-target pass  prefill {format_seconds(record.verify_seconds)}")
        return title
    title.append(f"  pos {record.position}  gamma {record.gamma}")
    if record.policy_info:
        title.append(f" ({format_info(record.policy_info)})", style="dim")
    title.append(f"  draft {format_seconds(record.draft_seconds)}  verify {format_seconds(record.verify_seconds)}")
    return title


def draft_table(record: StepRecord, token_text: TokenText) -> Table:
    """One row per draft token: q, p, p/q, r (sampling only) and the verdict."""
    sampling = bool(record.draws)
    table = Table(box=None, padding=(0, 1), pad_edge=False, show_edge=False, header_style="bold")
    table.add_column("#", justify="right")
    table.add_column("draft", max_width=TOKEN_WIDTH, no_wrap=True, overflow="ellipsis")
    for name in ("q", "p", "p/q") + (("r",) if sampling else ()):
        table.add_column(name, justify="right")
    table.add_column("verdict")
    for i, token in enumerate(record.draft_tokens):
        q, p = _at(record.draft_probs, i), _at(record.target_probs, i)
        row = [Text(f" {i + 1}"), Text(shorten(escape_token(token_text(token)), TOKEN_WIDTH))]
        row += [Text(format_prob(q)), Text(format_prob(p)), Text(format_ratio(p, q) if p is not None else "-")]
        if sampling:
            row.append(Text(format_prob(_at(record.draws, i))))
        row.append(verdict(record, i))
        table.add_row(*row)
    return table


def _at(values: list, i: int):
    return values[i] if i < len(values) else None


def verdict(record: StepRecord, i: int) -> Text:
    """Accepted, rejected (the first failure), or not checked (after a rejection)."""
    if i < record.accepted:
        cut = ", cut by stop" if i >= len(record.tokens) else ""
        return Text(f"✓ accepted{cut}", style=STYLES[DRAFT])
    if i == record.accepted:
        return Text("✗ rejected", style=STYLES[CORRECTION])
    return Text("· not checked", style="dim")


def emitted_line(record: StepRecord, token_text: TokenText) -> Text:
    """The token after the accepted prefix, with where it came from and its probability."""
    line = Text("  → ")
    line.append(escape_token(token_text(record.emitted_token)), style=STYLES.get(record.emitted_kind))
    kind = LABELS[FIRST] if record.emitted_kind == FIRST else record.emitted_kind
    line.append(f"  {kind}", style=STYLES.get(record.emitted_kind))
    line.append(f"  {_emitted_source(record)}")
    if record.emitted_kind != FIRST and len(record.tokens) <= record.accepted:
        line.append("  (cut by stop)", style="dim")
    return line


def _emitted_source(record: StepRecord) -> str:
    prob = format_prob(record.emitted_prob)
    if record.emitted_kind == CORRECTION:
        if record.draws:
            return f"prob {prob} from norm(max(0, p - q))"
        return f"p={prob}, the target's argmax"
    return f"p={prob}"


SAMPLING_NOTE = (
    "sampling: a draft is accepted if r < p/q; the first rejected one is replaced by a draw from norm(max(0, p - q));"
    " if all pass, a bonus token comes from p"
)
GREEDY_NOTE = (
    "greedy: a draft is accepted while it equals the target's argmax; the argmax replaces the first mismatch (p and q"
    " shown for information)"
)
ONE_HOT_NOTE = (
    'q "-": the draft has no probabilities (n-gram, a copy, a drafter of another tokenizer); it is verified as a'
    " one-hot q (q=1 on the drafted token), so sampling accepts it if r < p"
)


def round_notes(record: StepRecord) -> list[str]:
    """Explanations a round may need (the tracer shows each kind once)."""
    notes = []
    if record.draft_tokens:
        if record.draws:
            notes.append(SAMPLING_NOTE)
        else:
            notes.append(GREEDY_NOTE)
    if any(q is None for q in record.draft_probs):
        notes.append(ONE_HOT_NOTE)
    return notes


# ---------------------------------------------------------------------------- header and summary


def render_header(header: dict, plain: bool) -> RenderableType:
    """What was run: the prompt, every other setting as key=value, how the drafter maps to
    the target, then the legend."""
    parts: list[RenderableType] = [Text("specbench trace", style="bold")]
    if "prompt" in header:
        parts.append(Text("prompt: ") + Text(shorten(escape_text(str(header["prompt"])), 240), style="italic"))
    settings = {k: v for k, v in header.items() if k not in ("prompt", "mapping")}
    if settings:
        parts.append(Text(format_info(settings)))
    if "mapping" in header:  # how the drafter's drafts reach the target (pairing.drafter_mapping)
        parts.append(Text(f"drafter -> target: {header['mapping']}"))
    parts.append(render_legend(plain))
    parts.append(Text(""))
    return Group(*parts)


def render_summary(records: list[StepRecord], stats: RunStats, estimated: bool = False) -> RenderableType:
    """The summary: the run's numbers, accepted drafts per round, acceptance by position."""
    stop = next((r.stop_reason for r in reversed(records) if r.stop_reason), None)
    parts: list[RenderableType] = [Text("summary", style="bold"), metrics_table(stats, estimated, stop)]
    counts = accepted_length_histogram(records)
    if sum(counts):
        parts += [Text(""), histogram_table(counts)]
    positions = acceptance_by_position(records)
    if positions:
        parts += [Text(""), position_table(positions)]
    return Group(*parts)


def metrics_table(stats: RunStats, estimated: bool, stop: str | None) -> Table:
    grid = Table.grid(padding=(0, 2))
    grid.add_column(style="bold")
    grid.add_column(justify="right")
    grid.add_column(style="dim")
    per_second = "estimated: no stats saved" if estimated else "after the first-target pass"
    rows = [
        ("new tokens", str(stats.new_tokens), f"stop: {stop}" if stop else ""),
        ("rounds", str(stats.rounds), "after the first-target pass"),
        ("drafted", str(stats.drafted), ""),
        ("accepted", str(stats.accepted), ""),
        (
            "acceptance rate",
            "–" if stats.acceptance_rate is None else f"{stats.acceptance_rate:.1%}",
            "accepted / drafted",
        ),
        ("mean accepted length", f"{stats.mean_accepted_length:.2f}", "per round, counting the emitted token"),
        ("tokens/s", f"{stats.tokens_per_second:.1f}", per_second),
        (
            "decode time",
            format_seconds(stats.decode_seconds),
            f"draft {format_seconds(stats.draft_seconds)}, verify {format_seconds(stats.verify_seconds)}",
        ),
        ("prefill time", format_seconds(stats.prefill_seconds), "the first-target pass"),
    ]
    for row in rows:
        grid.add_row(*(Text(cell) for cell in row))
    return grid


def histogram_table(counts: list[int]) -> Table:
    table = Table(
        box=None,
        padding=(0, 1),
        pad_edge=False,
        header_style="bold",
        title="accepted drafts per round",
        title_justify="left",
        title_style="bold",
    )
    table.add_column("accepted", justify="right")
    table.add_column("rounds", justify="right")
    table.add_column("")
    top = max(counts)
    for n, count in enumerate(counts):
        table.add_row(Text(str(n)), Text(str(count)), Text(bar(count / top if top else 0.0), style=STYLES[DRAFT]))
    return table


def position_table(positions: list[PositionAcceptance]) -> Table:
    table = Table(
        box=None,
        padding=(0, 1),
        pad_edge=False,
        header_style="bold",
        title="acceptance by draft position",
        title_justify="left",
        title_style="bold",
        caption="rate = accepted / drafted; if reached = accepted / rounds that checked it",
        caption_justify="left",
        caption_style="dim",
    )
    for name in ("draft #", "drafted", "reached", "accepted", "rate", "if reached"):
        table.add_column(name, justify="right")
    table.add_column("")
    for row in positions:
        cells = (row.position, row.drafted, row.reached, row.accepted, f"{row.rate:.0%}", f"{row.rate_if_reached:.0%}")
        table.add_row(*(Text(str(c)) for c in cells), Text(bar(row.rate), style=STYLES[DRAFT]))
    return table


def bar(fraction: float) -> str:
    return "█" * round(max(0.0, min(1.0, fraction)) * BAR_WIDTH)


# ---------------------------------------------------------------------------- the tracer


class Tracer:
    """Draws a generation on a console round by round: the live view and the replay alike.

    Pass `tracer.on_step` as speculative_generate's on_step; call finish(stats) at the end.
    """

    def __init__(self, console: Console, token_text: TokenText, header: dict | None = None):
        self.console = console
        self.token_text = token_text
        self.header = dict(header or {})
        self.records: list[StepRecord] = []
        self.segments: list[tuple[str, str]] = []  # (kind, text) of every output token so far
        self._notes_shown: set[str] = set()

    def start(self) -> None:
        self.console.print(render_header(self.header, is_plain(self.console)))

    def on_step(self, record: StepRecord) -> None:
        self.records.append(record)
        self.segments += round_segments(record, self.token_text)
        notes = [n for n in round_notes(record) if n not in self._notes_shown]
        self._notes_shown.update(notes)
        text = render_segments(self.segments, is_plain(self.console), budget=self._tail_budget())
        self.console.print(render_round(record, self.token_text, text, notes))

    def finish(self, stats: RunStats | None = None) -> None:
        """The summary and the whole text (stats None: rebuilt from the records)."""
        estimated = stats is None
        stats = stats_from_records(self.records) if stats is None else stats
        self.console.print(render_summary(self.records, stats, estimated))
        self.console.print()
        self.console.print(render_legend(is_plain(self.console)))
        self.console.print(render_segments(self.segments, is_plain(self.console)))

    def _tail_budget(self) -> int:
        return max(20, 2 * self.console.width - 12)  # about two lines after "  text: "


def live_tracer(console: Console, token_text: TokenText, header: dict | None = None) -> Tracer:
    """A Tracer that has printed its header: each on_step(record) prints that round."""
    tracer = Tracer(console, token_text, header)
    tracer.start()
    return tracer


def tee(*callbacks: OnStep | None) -> OnStep:
    """One on_step that calls each given callback in turn (None entries are skipped)."""
    active = [cb for cb in callbacks if cb is not None]

    def on_step(record: StepRecord) -> None:
        for callback in active:
            callback(record)

    return on_step


def replay(trace: TraceFile | str | Path, console: Console) -> None:
    """Render a whole trace file exactly as the live run showed it."""
    if not isinstance(trace, TraceFile):
        trace = read_trace(trace)
    tracer = live_tracer(console, trace.token_text, trace.header)
    for record in trace.records:
        tracer.on_step(record)
    tracer.finish(trace.stats)
