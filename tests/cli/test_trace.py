"""The step-by-step trace: what a person reads at 80 columns without colour, the trace file,
the replay command, and the live path on tiny models.

Records are built by hand, so each test states exactly the round it renders.
"""

from __future__ import annotations

import json
from io import StringIO

import pytest
from rich.console import Console
from rich.text import Text
from typer.testing import CliRunner

from specbench.cli import app, trace, tracefile, tracestats, ui
from specbench.core.stats import FIRST, RunStats, StepRecord

VOCAB_TEXT = {1: "Hello", 2: ",", 3: " world", 4: "\n", 5: " the", 6: "\t", 7: "<eos>", 8: "cat", 9: " dog", 10: "\\n"}


def token_text(token_id: int) -> str:
    return VOCAB_TEXT[token_id]


def first(token: int = 1, prob: float = 0.81) -> StepRecord:
    return StepRecord(0, 0, 0, [], [], [], [], 0, token, FIRST, prob, [token], verify_seconds=0.12)


def spec_round(n, position, drafts, q, p, draws, accepted, emitted, kind, prob, tokens=None, **extra) -> StepRecord:
    """A speculative round; tokens default to the accepted drafts + the emitted token."""
    if tokens is None:
        tokens = drafts[:accepted] + [emitted]
    return StepRecord(
        n,
        position,
        len(drafts),
        drafts,
        q,
        p,
        draws,
        accepted,
        emitted,
        kind,
        prob,
        tokens,
        draft_seconds=0.02,
        verify_seconds=0.04,
        **extra,
    )


GREEDY_FIRST_REJECTED = [
    first(),
    spec_round(1, 1, [2, 3, 5], [0.9, 0.8, 0.7], [0.2, 0.9, 0.6], [], 0, 9, "correction", 0.64),
]
SAMPLING_ALL_ACCEPTED = [
    first(),
    spec_round(
        1,
        1,
        [2, 3, 4],
        [0.9, 0.8, 0.5],
        [0.85, 0.9, 0.45],
        [0.5, 0.2, 0.7],
        3,
        5,
        "bonus",
        0.3,
        policy_info={"entropy": 0.31, "gamma": 3},
    ),
]
SAMPLING_FIRST_REJECTED = [
    first(),
    spec_round(1, 1, [2, 3, 4], [0.9, 0.8, 0.5], [0.3, 0.9, 0.45], [0.72], 0, 9, "correction", 0.55),
]
EOS_MID_ROUND = [  # drafts "cat <eos> world" all accepted, but output stops at <eos>
    first(),
    spec_round(
        1, 1, [8, 7, 3], [0.4, 0.5, 0.6], [0.4, 0.9, 0.9], [], 3, 5, "bonus", 0.9, tokens=[8, 7], stop_reason="eos"
    ),
]
NGRAM = [  # n-gram drafter: no q
    first(),
    spec_round(1, 1, [5, 6], [None, None], [0.6, 0.2], [0.1, 0.5], 1, 4, "correction", 0.4),
]


def render(records, stats=None, header=None, colour=False, width=80) -> str:
    """Drive a live tracer with the records; the text a terminal without colour would show."""
    out = StringIO()
    console = Console(file=out, width=width, force_terminal=colour, color_system="truecolor" if colour else None)
    tracer = trace.live_tracer(console, token_text, header or {"prompt": "Say hi", "temperature": 0})
    for record in records:
        tracer.on_step(record)
    tracer.finish(stats)
    return out.getvalue()


def squash(text: str) -> str:
    """Whitespace runs as one space, so assertions do not depend on column alignment."""
    return " ".join(text.split())


def line_with(text: str, needle: str) -> str:
    return next(line for line in text.splitlines() if needle in line)


# ---------------------------------------------------------------------------- one round


def test_greedy_first_rejected_reads_as_a_correction():
    """Greedy rounds show q, p, p/q but no r column; the argmax replaces the first mismatch."""
    text = render(GREEDY_FIRST_REJECTED)
    assert squash(line_with(text, "p/q")) == "# draft q p p/q verdict"
    assert squash(line_with(text, " 1  ,")) == "1 , 0.900 0.200 0.22 ✗ rejected"
    assert squash(line_with(text, "␣world")) == "2 ␣world 0.800 0.900 1.12 · not checked"
    assert squash(line_with(text, "→ ␣dog")) == "→ ␣dog correction p=0.640, the target's argmax"
    assert "greedy: a draft is accepted while it equals the target's argmax" in squash(text)
    assert "text: «Hello»⟦ dog⟧" in text


def test_sampling_all_accepted_shows_draws_and_bonus():
    """Sampling rounds show r next to p/q; all accepted ends with a bonus token from p."""
    text = render(SAMPLING_ALL_ACCEPTED)
    assert "round 1 pos 1 gamma 3 (entropy=0.31 gamma=3) draft 20.0 ms verify 40.0 ms" in squash(text)
    assert squash(line_with(text, " 1  ,")) == "1 , 0.900 0.850 0.94 0.500 ✓ accepted"
    assert squash(line_with(text, " 3  \\n")) == "3 \\n 0.500 0.450 0.90 0.700 ✓ accepted"
    assert squash(line_with(text, "→ ␣the")) == "→ ␣the bonus p=0.300"
    assert "sampling: a draft is accepted if r < p/q" in squash(text)
    assert "text: «Hello», world\\n⟨ the⟩" in text


def test_sampling_first_rejected_draws_from_the_residual():
    """Only the examined draft has an r; the correction's probability is the residual's."""
    text = render(SAMPLING_FIRST_REJECTED)
    assert squash(line_with(text, " 1  ,")) == "1 , 0.900 0.300 0.33 0.720 ✗ rejected"
    assert squash(line_with(text, "␣world")) == "2 ␣world 0.800 0.900 1.12 - · not checked"
    assert squash(line_with(text, "→ ␣dog")) == "→ ␣dog correction prob 0.550 from norm(max(0, p - q))"


def test_eos_mid_round_shows_what_the_stop_cut():
    """Drafts accepted after the EOS, and the bonus, were never output: the trace says so."""
    text = render(EOS_MID_ROUND)
    assert squash(line_with(text, "<eos>")).endswith("✓ accepted")
    assert squash(line_with(text, " 3  ␣world")).endswith("✓ accepted, cut by stop")
    assert squash(line_with(text, "→ ␣the")) == "→ ␣the bonus p=0.900 (cut by stop)"
    assert "stop: eos" in text
    assert text.rstrip().endswith("«Hello»cat<eos>")


def test_ngram_drafts_without_q_show_a_dash_and_the_one_hot_rule():
    text = render(NGRAM)
    assert squash(line_with(text, "␣the")) == "1 ␣the - 0.600 - 0.100 ✓ accepted"
    assert squash(line_with(text, " 2  \\t")) == "2 \\t - 0.200 - 0.500 ✗ rejected"
    assert "one-hot q (q=1 on the drafted token)" in squash(text)


def test_notes_appear_once():
    """The acceptance rule is explained at the first round that needs it, not every round."""
    records = SAMPLING_ALL_ACCEPTED + [spec_round(2, 5, [2], [0.5], [0.5], [0.1], 1, 3, "bonus", 0.2)]
    assert render(records).count("sampling: a draft is accepted") == 1


def test_escaping_makes_whitespace_and_controls_visible():
    assert trace.escape_token(" a\tb\n") == "␣a\\tb\\n"
    assert trace.escape_token("\\n") == "\\\\n"  # a real backslash-n is not a newline
    assert trace.escape_token("") == '""'
    assert trace.escape_token("\x1b[0m\u200b") == "\\x1b[0m\\u200b"
    assert trace.escape_text(" a\tb\n") == " a\\tb\\n"


def test_every_line_fits_80_columns():
    for records in (GREEDY_FIRST_REJECTED, SAMPLING_ALL_ACCEPTED, EOS_MID_ROUND, NGRAM):
        long_info = {"entropy": 0.123456, "threshold": 0.5, "reason": "entropy above threshold"}
        records = records[:1] + [StepRecord(**{**vars(records[1]), "policy_info": long_info})]
        assert max(len(line) for line in render(records).splitlines()) <= 80


def test_text_so_far_keeps_the_tail():
    """Long output shows only its last two lines' worth per round, led by an ellipsis."""
    records = [first()] + [spec_round(n, 2 * n - 1, [3], [0.9], [0.9], [], 1, 3, "bonus", 0.9) for n in range(1, 40)]
    last_round = render(records).split("round 39")[1].split("summary")[0]
    text_line = squash(last_round.split("text: ", 1)[1])
    assert text_line.startswith("…") and len(text_line) <= 2 * 80


def test_colour_replaces_the_brackets():
    """With colour the kinds are colours, not brackets; without colour, brackets and a legend."""
    coloured = render(SAMPLING_FIRST_REJECTED, colour=True)
    assert "\x1b[" in coloured and "⟦" not in coloured
    plain = render(SAMPLING_FIRST_REJECTED)
    assert "\x1b[" not in plain
    assert "text: accepted draft · ⟦correction⟧ · ⟨bonus⟩ · «first token»" in plain


def test_no_color_terminal_keeps_the_brackets():
    """NO_COLOR on a real terminal: bold may remain, but the kinds must still be told apart."""
    out = StringIO()
    console = Console(file=out, width=80, force_terminal=True, color_system="truecolor", no_color=True)
    tracer = trace.live_tracer(console, token_text)
    for record in SAMPLING_FIRST_REJECTED:
        tracer.on_step(record)
    assert "«Hello»⟦ dog⟧" in Text.from_ansi(out.getvalue()).plain


# ---------------------------------------------------------------------------- summary


def test_summary_counts():
    records = [
        first(),
        spec_round(1, 1, [2, 3, 4], [0.9] * 3, [0.9] * 3, [], 3, 5, "bonus", 0.9),
        spec_round(2, 5, [2, 3, 4], [0.9] * 3, [0.9] * 3, [], 1, 9, "correction", 0.9),
        spec_round(3, 7, [2, 3, 4], [0.9] * 3, [0.9] * 3, [], 0, 9, "correction", 0.9),
        spec_round(4, 8, [2, 3], [0.9] * 2, [0.9] * 2, [], 2, 5, "bonus", 0.9),
    ]
    assert tracestats.accepted_length_histogram(records) == [1, 1, 1, 1]
    by_position = tracestats.acceptance_by_position(records)
    assert [(r.drafted, r.reached, r.accepted) for r in by_position] == [(4, 4, 3), (4, 3, 2), (3, 1, 1)]
    stats = RunStats(
        new_tokens=11, first_pass_tokens=1, drafted=11, accepted=6, rounds=4, target_forwards=5, decode_seconds=2.0
    )
    text = squash(render(records, stats))
    assert "rounds 4" in text and "drafted 11" in text and "accepted 6" in text
    assert "acceptance rate 54.5%" in text
    assert "mean accepted length 2.50" in text
    assert "tokens/s 5.0" in text
    assert "0 1 ████████████████████████ 1 1 ████████████████████████" in text
    assert "1 4 4 3 75% 75%" in text and "2 4 3 2 50% 67%" in text and "3 3 1 1 33% 100%" in text


def test_summary_without_stats_is_rebuilt_and_says_so():
    text = squash(render(SAMPLING_ALL_ACCEPTED))
    assert "new tokens 5" in text and "rounds 1" in text and "mean accepted length 4.00" in text
    assert "estimated: no stats saved" in text


# ---------------------------------------------------------------------------- the trace file


STATS = RunStats(
    new_tokens=5,
    first_pass_tokens=1,
    drafted=3,
    accepted=3,
    rounds=1,
    target_forwards=2,
    prefill_seconds=0.12,
    decode_seconds=0.07,
    draft_seconds=0.02,
    verify_seconds=0.04,
)
HEADER = {"prompt": "Say hi\nplease", "target": "tiny-t", "drafter": "tiny-d", "temperature": 0.7, "seed": 0}


@pytest.mark.parametrize(
    "records", [GREEDY_FIRST_REJECTED, SAMPLING_ALL_ACCEPTED, SAMPLING_FIRST_REJECTED, EOS_MID_ROUND, NGRAM]
)
def test_replay_equals_live(tmp_path, records):
    """The file carries the token texts, so a replay without any tokenizer reads the same."""
    path = tmp_path / "run.jsonl"
    tracefile.write_trace(path, records, token_text, HEADER, STATS)
    replayed = StringIO()
    trace.replay(path, Console(file=replayed, width=80))
    assert replayed.getvalue() == render(records, STATS, HEADER)


def test_trace_file_layout(tmp_path):
    """Header first; each token text stored once; round lines read back as StepRecords."""
    path = tmp_path / "run.jsonl"
    tracefile.write_trace(
        path,
        SAMPLING_ALL_ACCEPTED + [spec_round(2, 5, [2], [0.5], [0.5], [0.1], 1, 3, "bonus", 0.2)],
        token_text,
        HEADER,
        STATS,
    )
    lines = path.read_text().splitlines()
    assert json.loads(lines[0]) == {"specbench_trace": 1, "header": HEADER}
    assert json.loads(lines[1])["texts"] == {"1": "Hello"}
    assert json.loads(lines[3])["texts"] == {}  # ids 2 and 3 were stored by round 1
    assert StepRecord.from_json(lines[2]) == SAMPLING_ALL_ACCEPTED[1]
    assert tracefile.read_trace(path).stats == STATS


def test_interrupted_trace_still_replays(tmp_path):
    """A run killed mid-way leaves no stats line; the replay rebuilds the summary."""
    path = tmp_path / "run.jsonl"
    writer = tracefile.TraceWriter(path, token_text, HEADER)
    for record in SAMPLING_ALL_ACCEPTED:
        writer.on_step(record)
    saved = tracefile.read_trace(path)  # before close: every line is already flushed
    assert saved.stats is None and saved.records == SAMPLING_ALL_ACCEPTED


def test_a_last_line_cut_short_is_left_out(tmp_path):
    """A run killed mid-write leaves half a line at the end: the finished rounds before it
    replay (as from an interrupted run); a broken line that was finished still fails."""
    path = tmp_path / "run.jsonl"
    tracefile.write_trace(path, SAMPLING_ALL_ACCEPTED, token_text, HEADER)
    whole = path.read_text()
    path.write_text(whole[: whole.rindex("\n", 0, len(whole) - 1) + 20])  # 19 characters of the last record
    saved = tracefile.read_trace(path)
    assert saved.stats is None and saved.records == SAMPLING_ALL_ACCEPTED[:-1]
    path.write_text(whole[: whole.rindex("\n", 0, len(whole) - 1) + 20] + "\n" + whole[whole.index("\n") + 1 :])
    with pytest.raises(tracefile.TraceFileError, match="not JSON"):
        tracefile.read_trace(path)


def test_unwritable_trace_path_is_a_trace_error(tmp_path):
    with pytest.raises(tracefile.TraceFileError, match="cannot write a trace there"):
        tracefile.TraceWriter(tmp_path / "no-such-dir" / "run.jsonl", token_text)


@pytest.mark.parametrize(
    "content, message",
    [
        ("", "not JSON"),
        ("not json\n", "not JSON"),
        ('{"round": 0}\n', "not a specbench trace"),
        ('{"specbench_trace": 9, "header": {}}\n', "trace format 9"),
        ('{"specbench_trace": 1, "header": {}}\n{"round": 1}\n', ":2: not a step record"),
        ('{"specbench_trace": 1, "header": {}}\n[1, 2]\n', ":2: expected a JSON object"),
    ],
)
def test_bad_files_give_one_line_reasons(tmp_path, content, message):
    path = tmp_path / "bad.jsonl"
    path.write_text(content)
    with pytest.raises(tracefile.TraceFileError, match=message.replace("(", r"\(")):
        tracefile.read_trace(path)


def test_wrong_field_types_are_reported(tmp_path):
    path = tmp_path / "bad.jsonl"
    record = json.loads(GREEDY_FIRST_REJECTED[1].to_json())
    record["draft_probs"] = ["high", 0.8, 0.7]
    path.write_text(json.dumps({"specbench_trace": 1}) + "\n" + json.dumps(record) + "\n")
    with pytest.raises(tracefile.TraceFileError, match="bad step record field.*draft_probs"):
        tracefile.read_trace(path)


# ---------------------------------------------------------------------------- the command


def trace_args(path) -> list[str]:
    """Until a second command exists, Typer runs the only one without its name."""
    several = len(app.registered_commands) > 1 or app.registered_callback is not None
    return (["trace"] if several else []) + [str(path)]


@pytest.fixture
def plain_cli(monkeypatch):
    monkeypatch.setattr(ui, "console", Console(width=80, color_system=None))
    monkeypatch.setattr(ui, "err_console", Console(width=200, color_system=None, stderr=True))


def test_cli_replays_a_trace(tmp_path, plain_cli):
    path = tmp_path / "run.jsonl"
    tracefile.write_trace(path, SAMPLING_FIRST_REJECTED, token_text, HEADER, STATS)
    result = CliRunner().invoke(app, trace_args(path))
    assert result.exit_code == 0, result.output
    assert result.stdout == render(SAMPLING_FIRST_REJECTED, STATS, HEADER)
    assert "✗ rejected" in result.stdout


@pytest.mark.parametrize("name, content", [("missing.jsonl", None), ("bad.jsonl", "{oops\n")])
def test_cli_bad_file_is_one_error_line(tmp_path, plain_cli, name, content):
    path = tmp_path / name
    if content is not None:
        path.write_text(content)
    result = CliRunner().invoke(app, trace_args(path))
    assert result.exit_code != 0
    assert result.stdout == ""
    assert len(result.stderr.strip().splitlines()) == 1
    assert result.stderr.startswith("error: ") and name in result.stderr
    assert "Traceback" not in result.output


# ---------------------------------------------------------------------------- live, end to end


def test_live_trace_of_a_real_generation(close_pair, tmp_path):
    """speculative_generate drives the tracer and the writer through on_step; the replay of
    the written file equals what was shown live."""
    from specbench.core.generate import GenerationConfig, speculative_generate
    from specbench.core.sampling import SamplingConfig
    from specbench.drafters import ModelDrafter
    from specbench.policies import FixedGamma

    def text_of(token_id: int) -> str:
        return "\n" if token_id % 16 == 0 else (" " if token_id % 2 else "") + chr(97 + token_id % 26)

    target, drafter_model = close_pair
    header = {"prompt": "1 5 9 12 3", "gamma": 3, "temperature": 0.8}
    path = tmp_path / "live.jsonl"
    live = StringIO()
    tracer = trace.live_tracer(Console(file=live, width=80), text_of, header)
    writer = tracefile.TraceWriter(path, text_of, header)
    config = GenerationConfig(max_new_tokens=16, sampling=SamplingConfig(temperature=0.8), seed=3)
    result = speculative_generate(
        target,
        ModelDrafter(drafter_model),
        [1, 5, 9, 12, 3],
        config,
        FixedGamma(3),
        on_step=trace.tee(tracer.on_step, writer.on_step),
    )
    tracer.finish(result.stats)
    writer.close(result.stats)

    shown = live.getvalue()
    assert [f"round {n} " in shown for n in range(len(result.steps))] == [True] * len(result.steps)
    assert f"new tokens {len(result.token_ids)}" in squash(shown)
    assert f"drafted {result.stats.drafted} " in squash(shown)
    assert "".join(text for _, text in tracer.segments) == "".join(text_of(t) for t in result.token_ids)
    replayed = StringIO()
    trace.replay(path, Console(file=replayed, width=80))
    assert replayed.getvalue() == shown
