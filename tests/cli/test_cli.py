"""`specbench generate`, `models` and `clear-cache` through Typer's CliRunner, on tiny local models.

The models are tiny random Qwen2s saved with save_pretrained next to a character tokenizer
built in the test (tiny_hf.py); the drafter is the target with noise on its weights, so
drafts are sometimes accepted and sometimes not. Nothing is downloaded, and the cache
folder is a temp dir, so `clear-cache` here can never touch a real cache.
"""

from __future__ import annotations

import json

import pytest
import torch
from conftest import tiny_model
from tiny_hf import char_tokenizer, char_vocab, one_thread, save_tiny
from typer.testing import CliRunner

from specbench import paths
from specbench.bench import calibration_cache
from specbench.cli import app, report
from specbench.models import defaults

runner = CliRunner()

STATS_KEYS = {
    "new_tokens",
    "drafted",
    "accepted",
    "acceptance_rate",
    "mean_accepted_length",
    "target_forwards",
    "tokens_per_second",
}


@pytest.fixture(autouse=True, scope="module")
def _one_thread():
    with one_thread():
        yield


@pytest.fixture(autouse=True)
def temp_cache(tmp_path, monkeypatch):
    monkeypatch.setenv(paths.CACHE_ENV, str(tmp_path / "cache"))


@pytest.fixture(scope="module")
def tiny(tmp_path_factory):
    root = tmp_path_factory.mktemp("cli-models")
    target = tiny_model(0)
    return {
        "target": str(save_tiny(root / "target", like=target, noise=0.0)),
        "drafter": str(save_tiny(root / "drafter", like=target, noise=0.3, seed=5)),
        "swapped": str(
            save_tiny(
                root / "swapped", like=target, noise=0.3, seed=5, tokenizer=char_tokenizer(char_vocab(swap=("e", "t")))
            )
        ),
        "short": str(save_tiny(root / "short", max_positions=16)),
        "narrow": str(
            save_tiny(
                root / "narrow",
                seed=6,
                vocab_size=48,
                tokenizer=char_tokenizer(
                    char_vocab(chars="abcdefghijklmnopqrstuvwxyz0123456789 .,:"), chat_template=None
                ),
            )
        ),
        "capitals": str(
            save_tiny(
                root / "capitals", seed=5, tokenizer=char_tokenizer(char_vocab(chars="ABCDEFGHIJ"), chat_template=None)
            )
        ),
    }


def run(*args: str):
    return runner.invoke(app, [str(a) for a in args])


def generate_json(tiny, *args: str) -> dict:
    result = run("generate", "write a sorting function", "--target", tiny["target"], "--json", *args)
    assert result.exit_code == 0, result.output
    return json.loads(result.stdout)


# ---------------------------------------------------------------------------- generate


def test_json_schema(tiny):
    out = generate_json(
        tiny, "--drafter", tiny["drafter"], "--gamma-policy", "fixed", "--max-new-tokens", "20", "--gamma", "3"
    )
    assert {"text", "token_ids", "stats"} <= set(out)
    assert STATS_KEYS <= set(out["stats"])
    stats = out["stats"]
    assert stats["new_tokens"] == len(out["token_ids"]) <= 20
    assert 0 < stats["drafted"] and 0 <= stats["accepted"] <= stats["drafted"]
    assert stats["acceptance_rate"] == pytest.approx(stats["accepted"] / stats["drafted"])
    assert stats["target_forwards"] >= 2
    assert out["drafter"] == "drafter" and out["target"] == "target" and out["gamma"] == 3
    assert out["text"] == char_tokenizer().decode(out["token_ids"], skip_special_tokens=True)


def test_greedy_speculative_equals_plain_through_the_cli(tiny):
    """The user-facing promise: --drafter none and a real drafter print the same greedy text."""
    spec = generate_json(tiny, "--drafter", tiny["drafter"], "--max-new-tokens", "40", "--gamma", "4")
    plain = generate_json(tiny, "--drafter", "none", "--max-new-tokens", "40")
    assert spec["token_ids"] == plain["token_ids"]
    assert plain["stats"]["drafted"] == 0 and plain["drafter"] == "none" and plain["drafter_kept_ids"] is None
    assert spec["stats"]["target_forwards"] < plain["stats"]["target_forwards"] or spec["stats"]["accepted"] == 0


@pytest.mark.parametrize("drafter", ["ngram", "prompt-lookup"])
def test_model_free_drafters(tiny, drafter):
    out = generate_json(tiny, "--drafter", drafter, "--max-new-tokens", "16")
    assert out["drafter"] == drafter
    assert out["token_ids"] == generate_json(tiny, "--drafter", "none", "--max-new-tokens", "16")["token_ids"]


def test_sampling_is_reproducible_by_seed(tiny):
    """The same seed and the same gammas give the same sampled text. The cost policy's
    gammas move with its warm start (what earlier runs kept), so both runs start cold."""
    args = (
        "--calibration",
        "none",
        "--drafter",
        tiny["drafter"],
        "--temperature",
        "1.0",
        "--top-k",
        "20",
        "--top-p",
        "0.9",
        "--max-new-tokens",
        "24",
    )
    first = generate_json(tiny, *args, "--seed", "7")
    assert first["token_ids"] == generate_json(tiny, *args, "--seed", "7")["token_ids"]
    assert first["temperature"] == 1.0 and first["top_p"] == 0.9


def test_gamma_policy_option(tiny):
    out = generate_json(tiny, "--drafter", tiny["drafter"], "--gamma-policy", "heuristic", "--max-new-tokens", "16")
    assert out["gamma_policy"] == "heuristic" and out["stats"]["new_tokens"] >= 1


def test_trace_shows_rounds_and_trace_out_replays_the_same(tiny, tmp_path):
    """--trace renders every round live; --trace-out saves them, and `specbench trace FILE`
    replays the same rounds without loading any model."""
    path = tmp_path / "run.jsonl"
    live = run(
        "generate",
        "write a sorting function",
        "--target",
        tiny["target"],
        "--drafter",
        tiny["drafter"],
        "--max-new-tokens",
        "12",
        "--gamma",
        "3",
        "--trace",
        "--trace-out",
        path,
    )
    assert live.exit_code == 0, live.output
    assert "round 1" in live.stdout and "summary" in live.stdout and "acceptance rate" in live.stdout
    replay = run("trace", path)
    assert replay.exit_code == 0, replay.output
    rounds = lambda text: [line for line in text.splitlines() if line.startswith("round ")]  # noqa: E731
    assert rounds(replay.stdout) == rounds(live.stdout) and rounds(live.stdout)


def test_adaptive_policy_knobs_reach_the_policy(tiny):
    out = generate_json(
        tiny,
        "--drafter",
        tiny["drafter"],
        "--gamma-policy",
        "egag",
        "--gamma-min",
        "2",
        "--gamma-max",
        "5",
        "--max-new-tokens",
        "16",
    )
    plain = generate_json(tiny, "--drafter", "none", "--max-new-tokens", "16")
    assert out["token_ids"] == plain["token_ids"] and out["stats"]["drafted"] >= 2


def test_cost_policy_measures_costs_once_then_reads_the_cache(tiny):
    first = run(
        "generate",
        "write a sorting function",
        "--target",
        tiny["target"],
        "--drafter",
        tiny["drafter"],
        "--gamma-policy",
        "cost",
        "--max-new-tokens",
        "8",
        "--json",
    )
    assert first.exit_code == 0, first.output
    assert "costs: c =" in first.stderr and "(cached)" not in first.stderr
    second = run(
        "generate",
        "write a sorting function",
        "--target",
        tiny["target"],
        "--drafter",
        tiny["drafter"],
        "--gamma-policy",
        "cost",
        "--max-new-tokens",
        "8",
        "--json",
    )
    assert "costs (cached): c =" in second.stderr
    assert json.loads(first.stdout)["token_ids"] == json.loads(second.stdout)["token_ids"]


def test_the_cost_policy_starts_warm_from_what_earlier_runs_kept(tiny, tmp_path):
    """The first run starts cold and keeps its calibration; the next starts warm from it
    (and says so); --calibration none starts cold; another pair's file is refused in one
    line, a corrupt one is ignored and replaced."""
    args = ("--drafter", tiny["drafter"], "--max-new-tokens", "12")
    first = run("generate", "write a sorting function", "--target", tiny["target"], *args, "--json")
    assert first.exit_code == 0, first.output
    assert "calibration" not in first.stderr
    kept = list(paths.costs_dir().glob("*.calibration.json"))
    assert len(kept) == 1 and "model+lookup" in json.loads(kept[0].read_text())["drafters"]
    second = run("generate", "write a sorting function", "--target", tiny["target"], *args, "--json")
    assert "calibration: warm, from" in second.stderr
    cold = run("generate", "hello", "--target", tiny["target"], *args, "--calibration", "none", "--json")
    assert cold.exit_code == 0 and "calibration" not in cold.stderr
    other = tmp_path / "other.json"
    other.write_text(json.dumps({"key": "another pair", "format": calibration_cache.FORMAT, "drafters": {}}))
    refused = run("generate", "hello", "--target", tiny["target"], *args, "--calibration", str(other))
    assert refused.exit_code == 2 and "another model pair" in refused.stderr
    assert len(refused.stderr.strip().splitlines()[-1]) > 20 and "Traceback" not in refused.output
    corrupt = tmp_path / "corrupt.json"
    corrupt.write_text("{ cut")
    used = run("generate", "hello", "--target", tiny["target"], *args, "--calibration", str(corrupt), "--json")
    assert used.exit_code == 0 and "starting cold" in used.stderr
    assert json.loads(corrupt.read_text())["format"] == calibration_cache.FORMAT


def test_the_default_policy_is_cost_with_gamma_up_to_12(tiny):
    """The recommended settings are the defaults; a given --gamma still wins, and plain
    decoding (--drafter none) measures no costs."""
    out = run(
        "generate",
        "write a sorting function",
        "--target",
        tiny["target"],
        "--drafter",
        tiny["drafter"],
        "--max-new-tokens",
        "8",
        "--json",
    )
    assert out.exit_code == 0, out.output
    settings = json.loads(out.stdout)
    assert (settings["gamma_policy"], settings["gamma"]) == ("cost", 12) and "costs: c =" in out.stderr
    assert (
        generate_json(tiny, "--drafter", tiny["drafter"], "--gamma-policy", "fixed", "--max-new-tokens", "8")["gamma"]
        == 4
    )
    assert generate_json(tiny, "--drafter", tiny["drafter"], "--gamma", "6", "--max-new-tokens", "8")["gamma"] == 6
    plain = run(
        "generate",
        "write a sorting function",
        "--target",
        tiny["target"],
        "--drafter",
        "none",
        "--max-new-tokens",
        "8",
        "--json",
    )
    assert plain.exit_code == 0, plain.output
    assert "costs" not in plain.stderr and json.loads(plain.stdout)["stats"]["drafted"] == 0


def test_onednn_kernels_keep_greedy_output(tiny):
    from specbench.speed.kernels import onednn_available

    if not onednn_available():
        pytest.skip("no oneDNN in this torch build")
    fast = generate_json(tiny, "--drafter", tiny["drafter"], "--kernels", "onednn", "--max-new-tokens", "24")
    plain = generate_json(tiny, "--drafter", "none", "--max-new-tokens", "24")
    assert fast["token_ids"] == plain["token_ids"]


def test_raw_skips_the_chat_template(tiny):
    chat = generate_json(tiny, "--drafter", "none", "--max-new-tokens", "2")
    raw = generate_json(tiny, "--drafter", "none", "--max-new-tokens", "2", "--raw")
    assert raw["prompt_tokens"] == len("write a sorting function")
    assert chat["prompt_tokens"] > raw["prompt_tokens"]


def test_streams_the_text_then_a_summary(tiny):
    args = ("--target", tiny["target"], "--drafter", tiny["drafter"], "--max-new-tokens", "30")
    streamed = run("generate", "write a sorting function", *args)
    assert streamed.exit_code == 0, streamed.output
    expected = generate_json(tiny, "--drafter", tiny["drafter"], "--max-new-tokens", "30")
    assert streamed.stdout == expected["text"] + "\n"
    summary = streamed.stderr.strip().splitlines()[-1]
    assert f"{expected['stats']['new_tokens']} tokens" in summary
    assert "tok/s" in summary and "acceptance" in summary and "mean accepted length" in summary


def test_summary_says_no_drafts_rather_than_a_zero_acceptance():
    """A cost policy that never finds a draft worth it drafts nothing: 0/0 is no rate."""
    from types import SimpleNamespace

    from specbench.cli.generate import summary_line
    from specbench.core.stats import RunStats

    pair = SimpleNamespace(drafter_name="default")
    idle = summary_line(
        SimpleNamespace(stats=RunStats(new_tokens=5, target_forwards=5), stop_reason="max_new_tokens"), pair
    )
    assert "no drafts" in idle and "acceptance" not in idle
    busy = summary_line(
        SimpleNamespace(
            stats=RunStats(new_tokens=5, drafted=4, accepted=3, rounds=2, target_forwards=3),
            stop_reason="max_new_tokens",
        ),
        pair,
    )
    assert "acceptance 75% (3/4)" in busy


def test_streaming_happens_during_generation(tiny, monkeypatch):
    """Text must reach stdout round by round, not all at the end."""
    from specbench.models.text import TextStream

    seen: list[str] = []
    original = TextStream.push

    def spy(self, ids):
        text = original(self, ids)
        seen.append(text)
        return text

    monkeypatch.setattr(TextStream, "push", spy)
    result = run(
        "generate",
        "hello",
        "--target",
        tiny["target"],
        "--drafter",
        tiny["drafter"],
        "--max-new-tokens",
        "25",
        "--gamma",
        "2",
    )
    assert result.exit_code == 0
    assert len([s for s in seen if s]) > 3


def test_int8_drafter_keeps_greedy_output(tiny):
    plain = generate_json(tiny, "--drafter", "none", "--max-new-tokens", "24")
    out = generate_json(
        tiny, "--drafter", tiny["drafter"], "--draft-dtype", "int8", "--gamma-policy", "fixed", "--max-new-tokens", "24"
    )
    assert out["token_ids"] == plain["token_ids"] and out["stats"]["drafted"] > 0


def test_device_auto_runs_on_this_machine(tiny):
    out = generate_json(tiny, "--drafter", tiny["drafter"], "--device", "auto", "--max-new-tokens", "8")
    assert out["stats"]["new_tokens"] >= 1


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["", "--drafter", "none"], "the prompt is empty"),
        (["   ", "--drafter", "none"], "the prompt is empty"),
        (["hi", "--gamma", "0"], "gamma must be"),
        (["hi", "--gamma", "-3"], "gamma must be"),
        (["hi", "--max-new-tokens", "0"], "max-new-tokens must be >= 1"),
        (["hi", "--top-p", "0"], "top-p must be in (0, 1]"),
        (["hi", "--top-p", "1.5"], "top-p must be in (0, 1]"),
        (["hi", "--temperature", "-1"], "temperature must be >= 0"),
        (["hi", "--temperature", "nan"], "temperature must be >= 0 and finite, got nan"),
        (["hi", "--temperature", "inf"], "temperature must be >= 0 and finite, got inf"),
        (["hi", "--seed", "-1"], "seed must be in 0 .. 2**64 - 1"),
        (["hi", "--seed", str(2**64)], "seed must be in 0 .. 2**64 - 1"),
        (["hi", "--top-k", "-1"], "top-k must be >= 0"),
        (["hi", "--gamma-policy", "nope"], "unknown gamma policy 'nope'"),
        (["hi", "--target", "/no/such/model"], "no such model file or folder: /no/such/model"),
        (["hi", "--target", "missing.gguf"], "no such model file or folder: missing.gguf"),
        (["hi", "--drafter", "./no-such-drafter"], "no such model file or folder: ./no-such-drafter"),
        (["hi", "--dtype", "int3"], "unknown dtype 'int3'"),
        (["hi", "--dtype", "int8", "--device", "cuda"], "--dtype int8 runs on the CPU only, not on cuda"),
        (["hi", "--device", "tpu"], "unknown device 'tpu'"),
        (["hi", "--kernels", "fast"], "unknown kernels 'fast'"),
        (["hi", "--draft-vocab", "-1"], "--draft-vocab must be >= 0"),
        (
            ["hi", "--gamma-policy", "egag", "--gamma-min", "5", "--gamma-max", "3"],
            "gamma-min (5) must not exceed gamma-max (3)",
        ),
        (["hi", "--gamma-policy", "egag", "--egag-beta", "1.5"], "egag-beta must be in [0, 1)"),
        (["hi", "--gamma-policy", "entropy-stop", "--threshold", "2"], "threshold must be in (0, 1)"),
        (["hi", "--trace", "--json"], "--trace and --json"),
    ],
)
def test_bad_input_is_one_line_on_stderr(tiny, args, message):
    """Checked before any model loads: one line, exit 2, no traceback."""
    prompt, *rest = args
    rest = rest if "--target" in rest else [*rest, "--target", tiny["target"]]
    result = run("generate", prompt, *rest)
    assert result.exit_code == 2
    assert result.stdout == ""
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error:"), result.stderr
    assert message in lines[0]
    assert "Traceback" not in result.output


def test_cuda_without_a_gpu_is_one_line(tiny):
    if torch.cuda.is_available():
        pytest.skip("this machine has CUDA")
    result = run("generate", "hi", "--target", tiny["target"], "--device", "cuda")
    assert (
        result.exit_code == 2
        and result.stderr.strip() == "error: --device cuda: PyTorch sees no CUDA device on this machine"
    )


def test_prompt_longer_than_the_context(tiny):
    result = run("generate", "a much too long prompt", "--target", tiny["short"], "--drafter", "none", "--raw")
    assert result.exit_code == 2
    assert (
        result.stderr.strip()
        == "error: the prompt is 22 tokens; the model's context holds 16, leaving no room to generate"
    )


def test_a_pair_with_no_common_text_says_so(tiny):
    result = run("generate", "hi", "--target", tiny["target"], "--drafter", tiny["capitals"])
    assert result.exit_code == 2
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1
    assert "no common text" in lines[0] and "--drafter none" in lines[0]


@pytest.mark.parametrize("drafter", ["swapped", "early-exit:1"])
def test_generate_with_another_tokenizer_or_early_exit(tiny, drafter):
    """A drafter with another tokenizer and the target's own first layer: both run, say how
    they map to the target, and give plain decoding's greedy output."""
    spec = tiny.get(drafter, drafter)
    out = generate_json(tiny, "--drafter", spec, "--gamma-policy", "fixed", "--max-new-tokens", "20")
    plain = generate_json(tiny, "--drafter", "none", "--max-new-tokens", "20")
    assert out["token_ids"] == plain["token_ids"]
    assert out["mapping"].startswith(
        "another tokenizer" if drafter == "swapped" else "early exit: the target's first 1 of 2 layers"
    )


def test_generate_with_a_narrower_drafter_and_the_cost_policy(tiny):
    """The cost policy times both models on ids the narrower drafter can read (timing_ids)."""
    out = generate_json(tiny, "--drafter", tiny["narrow"], "--max-new-tokens", "12")
    assert out["token_ids"] == generate_json(tiny, "--drafter", "none", "--max-new-tokens", "12")["token_ids"]
    assert out["mapping"].startswith("another tokenizer")


def test_trace_header_says_how_the_drafter_maps(tiny):
    result = run(
        "generate",
        "hi",
        "--target",
        tiny["target"],
        "--drafter",
        "early-exit:1",
        "--trace",
        "--max-new-tokens",
        "6",
        "--gamma-policy",
        "fixed",
    )
    assert result.exit_code == 0, result.output
    assert "drafter -> target: early exit: the target's first 1 of 2 layers" in " ".join(result.stdout.split())


def test_models_lists_how_each_drafter_maps():
    result = run("models")
    assert result.exit_code == 0
    assert "translated through text" in result.stdout and "early-exit:N" in result.stdout


def test_a_hub_id_that_is_not_cached(tiny, tmp_path, monkeypatch):
    import huggingface_hub.constants

    monkeypatch.setattr(huggingface_hub.constants, "HF_HUB_CACHE", str(tmp_path / "hf" / "hub"))
    result = run("generate", "hi", "--target", "nobody/no-such-model", "--drafter", "none")
    assert result.exit_code == 2
    assert result.stderr.strip().splitlines() == [
        "error: cannot load target nobody/no-such-model: not in the local Hugging Face cache (specbench never"
        " downloads; set HF_HOME or give a local folder)"
    ]


# ---------------------------------------------------------------------------- models, clear-cache


def test_models_lists_the_default_pair():
    result = run("models")
    assert result.exit_code == 0, result.output
    for model in defaults.PAIR:
        assert model.name in result.stdout
        assert str(defaults.cached_dir(model)) in result.stdout.replace("\n", "")
    assert paths.CACHE_ENV in result.stdout and "clear-cache" in result.stdout


def test_clear_cache_removes_specbench_folders_only():
    assert "nothing cached" in run("clear-cache").stdout
    entry = defaults.cached_dir(defaults.TARGET)
    entry.mkdir(parents=True)
    (entry / "model.safetensors").write_bytes(b"x" * 1000)
    for folder, name in ((paths.costs_dir(), "pair.json"), (paths.native_dir(), "kernel.so")):
        folder.mkdir(parents=True)
        (folder / name).write_bytes(b"x" * 100)
    (paths.cache_root() / "mine.txt").write_text("keep")
    result = run("clear-cache")
    assert result.exit_code == 0 and result.stdout.startswith("removed 1.2 kB from")
    assert not any(folder.exists() for folder in paths.own_dirs())
    assert (paths.cache_root() / "mine.txt").exists()


def test_sweep_end_reports_what_each_drafter_model_was_priced_with():
    """The sweep's closing lines repeat, per drafter model, the pricing line it printed when
    pricing began (its one measurement, or the median of several), and the range that
    model's own measurements spanned: another model's blocks never enter its range."""
    from specbench.bench.costs import Costs

    def costs(c, target_ms, verify=1.1):
        return Costs(
            c=c,
            target_step_seconds=target_ms / 1000,
            drafter_step_seconds=c * target_ms / 1000,
            verify_cost={1: 1.0, 2: verify},
            context_tokens=9,
        )

    one = report._costs_lines({"sweep": costs(0.25, 300)}, {"": (costs(0.25, 300), 1)})
    assert one == ["pricing with its one measurement: c = 0.250, target step 300.0 ms, v(2..2) 1.10"]
    measured = {
        "a/0@small": costs(0.25, 300),
        "b/0@small": costs(0.2, 280),
        "c/0@small": costs(0.3, 320),
        "a/0@big": costs(0.9, 500),
        "b/0@big": costs(0.8, 510),
    }
    pooled = {"small": (costs(0.25, 300, verify=1.2), 3), "big": (costs(0.85, 505), 2)}
    many = report._costs_lines(measured, pooled)
    assert many == [
        "pricing with the median of 3 measurements of small: c = 0.250, target step 300.0 ms, v(2..2) 1.20",
        "  its 3 measurements, one per prompt: c 0.200 to 0.300, target step 280 to 320 ms",
        "pricing with the median of 2 measurements of big: c = 0.850, target step 505.0 ms, v(2..2) 1.10",
        "  its 2 measurements, one per prompt: c 0.800 to 0.900, target step 500 to 510 ms",
    ]
    assert report._costs_lines({}, {}) == []
    tiny = report._costs_lines({"a/0": costs(0.5, 0.31), "b/0": costs(0.6, 0.46)}, {"": (costs(0.55, 0.4), 2)})
    assert tiny[1] == "  its 2 measurements, one per prompt: c 0.500 to 0.600, target step 0.31 to 0.46 ms"
    repeated = report._costs_lines(
        {"a/0": costs(0.5, 30), "a/1": costs(0.6, 40), "b/0": costs(0.5, 30), "b/1": costs(0.6, 40)},
        {"": (costs(0.55, 35), 4)},
    )
    assert (
        repeated[1] == "  its 4 measurements, one per prompt and repeat: c 0.500 to 0.600, target step 30 to 40 ms"
    )  # --repeats 2


def test_sweep_end_judges_points_on_their_repeats_only_when_they_have_several():
    one = {"repeats_per_point": 1, "points": 8, "points_within_10pct_share": 0.5}
    assert report._repeats_clause(one) == ""
    three = {"repeats_per_point": 3, "points": 64, "points_within_10pct_share": 0.9}
    assert report._repeats_clause(three) == "means over up to 3 repeats within 10% for 90% of 64 point(s); "


def test_sweep_end_says_which_way_the_predictions_lean():
    assert report._bias_clause({"median_error": 0.031}) == " (median error +3.1%, predicted / measured - 1)"
    assert report._bias_clause({"median_error": -0.004}) == " (median error -0.4%, predicted / measured - 1)"
    assert report._bias_clause({"median_error": None}) == ""


def test_paths_and_names_print_as_they_are(tiny, tmp_path, monkeypatch):
    """A path or name with brackets is text, not rich markup: it prints as it is (a "[/]"
    once ended `models` and `clear-cache` in a MarkupError), and the line that says where
    the trace went starts a line of its own after the generated text."""
    cache = tmp_path / "c[/]x"
    monkeypatch.setenv(paths.CACHE_ENV, str(cache))
    for command in ("models", "clear-cache"):
        result = run(command)
        assert result.exit_code == 0, result.output
        assert str(cache) in result.output.replace("\n", "")
    trace = tmp_path / "[bold]t.jsonl"
    result = run(
        "generate",
        "hi",
        "--target",
        tiny["target"],
        "--drafter",
        tiny["drafter"],
        "--max-new-tokens",
        "8",
        "--trace-out",
        trace,
    )
    assert result.exit_code == 0, result.output
    saved = [line for line in result.output.splitlines() if "trace saved to" in line]
    assert saved and saved[0].startswith("trace saved to") and str(trace) in result.output.replace("\n", "")


def test_cached_costs_belong_to_one_model_file_not_to_its_name(tiny, tmp_path):
    """Two folders of the same name hold two models: the second's cost policy measures its
    own costs instead of reading the first's."""
    first = save_tiny(tmp_path / "a" / "model", seed=1)
    second = save_tiny(tmp_path / "b" / "model", seed=2, layers=3)
    lines = []
    for target in (first, first, second):
        result = run("generate", "hi", "--target", target, "--drafter", "ngram", "--max-new-tokens", "4")
        assert result.exit_code == 0, result.output
        lines.append(next(line for line in result.output.splitlines() if line.startswith("costs")))
    assert "(cached)" not in lines[0] and "(cached)" in lines[1] and "(cached)" not in lines[2]


def test_a_cut_gguf_file_is_one_line(tmp_path):
    from tiny_hf import write_tiny_gguf

    whole = write_tiny_gguf(tmp_path / "whole.gguf").read_bytes()
    (tmp_path / "cut.gguf").write_bytes(whole[:1000])
    result = run("generate", "hi", "--target", tmp_path / "cut.gguf", "--drafter", "none")
    assert result.exit_code == 2 and "Traceback" not in result.output
    assert (
        result.stderr.strip().splitlines() == [result.stderr.strip()] and "looks cut short or corrupt" in result.stderr
    )


def test_generate_keeps_the_template_head_read_between_runs(tiny):
    """The first run's drafter reads the chat template's opening and keeps its cache in the
    cache folder; the next starts with it and gives the same text; a corrupt file is
    ignored and replaced. --json says how many prompt ids the drafter started with read."""
    args = ("--target", tiny["target"], "--drafter", tiny["drafter"], "--gamma-policy", "fixed", "--gamma", "3")
    args += ("--max-new-tokens", "12", "--json")
    first = run("generate", "write a sorting function", *args)
    assert first.exit_code == 0, first.output
    kept = list(paths.costs_dir().glob("*.head.pt"))
    assert len(kept) == 1
    written = kept[0].stat().st_mtime_ns
    second = run("generate", "write a sorting function", *args)
    assert json.loads(second.stdout)["token_ids"] == json.loads(first.stdout)["token_ids"]
    assert kept[0].stat().st_mtime_ns == written  # read, not written again
    head = len(torch.load(kept[0], weights_only=True)["ids"])
    assert json.loads(first.stdout)["drafter_kept_ids"] == 0
    assert 0 < json.loads(second.stdout)["drafter_kept_ids"] <= head
    kept[0].write_bytes(b"cut short")
    third = run("generate", "write a sorting function", *args)
    assert json.loads(third.stdout)["token_ids"] == json.loads(first.stdout)["token_ids"]
    assert json.loads(third.stdout)["drafter_kept_ids"] == 0
    assert torch.load(kept[0], weights_only=True)["format"] == 1
