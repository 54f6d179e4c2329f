"""specbench with bigger targets: load time, peak memory and plain decoding speed for each
GGUF given, beside llama.cpp's plain decoding of the same file.

The GGUFs are meant to be dev/scale_models.py's random-weight Qwen2.5 1.5B, 3B, 7B and 14B
(any Qwen2 GGUF works). For each, on this machine:
  - first load: `specbench generate "hi" --max-new-tokens 1 --target FILE --drafter D` in a
    new SPECBENCH_CACHE (CACHES/STEM, emptied first; outside the repository: it holds
    prepared models), wall time and peak RSS of the process (os.wait4's rusage);
    specbench's compiled kernels and the prepared default drafter are hard-linked into it
    from --seed-cache where it has them (recorded as "seeded"), so the first load is the
    target's, not a compile's;
    the record lists what that run wrote into the cache (a prepared target, the cost
    policy's measured costs of the pair under costs/);
  - warm load: the same command again in the same cache;
  - plain decoding, --rounds times, alternating which goes first: `specbench generate PROMPT
    --target FILE --drafter none --json --max-new-tokens N` (decode tokens/s from its stats,
    prefill apart) and `llama-bench -m FILE -p 0 -n N -t THREADS -r 3` (tg N's mean tokens/s);
    specbench gets OMP_NUM_THREADS=THREADS;
  - the drafter's cost ratio c and the verify curve v(k): `specbench costs`, written to
    OUT/STEM-costs.json for `specbench predict --costs`.
A run that fails (a load killed for memory, say) is recorded with its exit status and last
line, and the script goes on.

Writes OUT/STEM.json (every measurement, the machine) for each file and OUT/scale.csv (one
row per file, rewritten at each file), each with the CPU's model name and the instruction
sets that pick fast paths (avx2, avx512f, avx512_vnni, avx512_bf16, amx_*).

    python dev/scale.py GGUF [GGUF ...] --llama-bench PATH [--out results/scale]
        [--threads 2] [--rounds 2] [--max-new-tokens 64] [--drafter default]
        [--seed-cache DIR] [--caches /tmp/specbench-scale] [--skip-loads] [--specbench PATH]
"""

from __future__ import annotations

import argparse
import csv
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from common import machine_line
from gguf import GGUFReader

from specbench import paths
from specbench.models import defaults
from specbench.speed import native

PROMPT = "Write a Python function that checks whether a string is a palindrome."
FLAGS = ("avx2", "avx512f", "avx512_vnni", "avx512_bf16")  # and every amx_* flag


# ---------------------------------------------------------------------------- the machine


def cpu() -> dict:
    """The CPU's model name and which of FLAGS and amx_* it has, from /proc/cpuinfo."""
    lines = Path("/proc/cpuinfo").read_text().splitlines()
    model = next((line.split(":", 1)[1].strip() for line in lines if line.startswith("model name")), "unknown")
    have = set(next((line.split(":", 1)[1].split() for line in lines if line.startswith("flags")), []))
    flags = [f for f in FLAGS if f in have] + sorted(f for f in have if f.startswith("amx"))
    return {
        "model": model,
        "flags": flags,
        "cores": os.cpu_count(),
        "specbench_kernels_march": native.march(),
        "line": machine_line(),
    }


# ---------------------------------------------------------------------------- runs


def run_measured(command: list[str], env: dict) -> dict:
    """Run `command`, returning its exit status, wall seconds, peak RSS (GB, of it and the
    children it waited for: os.wait4's rusage, KiB on Linux), stdout and the last line of stderr."""
    with tempfile.TemporaryFile("w+") as out, tempfile.TemporaryFile("w+") as err:
        start = time.perf_counter()
        process = subprocess.Popen(command, stdout=out, stderr=err, env=env, text=True)
        _, status, usage = os.wait4(process.pid, 0)
        seconds = time.perf_counter() - start
        process.returncode = os.waitstatus_to_exitcode(status)  # reaped here, not by Popen
        out.seek(0)
        err.seek(0)
        stdout, stderr = out.read(), err.read()
    last = (stderr.strip().splitlines() or [""])[-1]
    return {
        "rc": process.returncode,
        "seconds": round(seconds, 3),
        "peak_rss_gb": round(usage.ru_maxrss * 1024 / 1e9, 3),
        "stdout": stdout,
        "last_stderr": last,
    }


def specbench_env(cache: Path, threads: int) -> dict:
    return {**os.environ, paths.CACHE_ENV: str(cache), "OMP_NUM_THREADS": str(threads)}


def fresh_cache(cache: Path, seed: Path | None) -> list[str]:
    """Empty `cache`, then hard-link (copy across file systems) the compiled kernels and the
    prepared default drafter from `seed` into it where `seed` has them; returns what was seeded."""
    shutil.rmtree(cache, ignore_errors=True)
    cache.mkdir(parents=True)
    seeded = []
    if seed is None:
        return seeded
    for part in (Path("native"), Path("models") / defaults.DRAFTER.slug):
        source = seed / part
        if source.is_dir() and (part.name == "native" or (source / defaults.MANIFEST).is_file()):
            (cache / part).parent.mkdir(parents=True, exist_ok=True)
            shutil.copytree(source, cache / part, copy_function=_link_or_copy, ignore=shutil.ignore_patterns(".*lock"))
            seeded.append(str(part))
    return seeded


def files(folder: Path) -> set[str]:
    """Every file under `folder`, relative to it."""
    return {str(p.relative_to(folder)) for p in folder.rglob("*") if p.is_file()}


def _link_or_copy(source: str, dest: str) -> None:
    try:
        os.link(source, dest)
    except OSError:
        shutil.copy2(source, dest)


def load(specbench: str, gguf: Path, drafter: str, cache: Path, threads: int) -> dict:
    """One `generate "hi" --max-new-tokens 1` run: wall time and peak RSS of the process."""
    command = [
        specbench,
        "generate",
        "hi",
        "--max-new-tokens",
        "1",
        "--json",
        "--target",
        str(gguf),
        "--drafter",
        drafter,
    ]
    done = run_measured(command, specbench_env(cache, threads))
    record = {key: done[key] for key in ("rc", "seconds", "peak_rss_gb")}
    if done["rc"] != 0:
        record["error"] = done["last_stderr"]
    else:
        stats = json.loads(done["stdout"])["stats"]
        record["prefill_seconds"] = stats["prefill_seconds"]
    return record


def specbench_plain(specbench: str, gguf: Path, cache: Path, threads: int, tokens: int) -> dict:
    """Plain decoding tokens/s of one `generate --drafter none --json` run (prefill apart)."""
    command = [
        specbench,
        "generate",
        PROMPT,
        "--json",
        "--max-new-tokens",
        str(tokens),
        "--target",
        str(gguf),
        "--drafter",
        "none",
    ]
    done = run_measured(command, specbench_env(cache, threads))
    if done["rc"] != 0:
        return {"rc": done["rc"], "error": done["last_stderr"], "tokens_per_second": None}
    result = json.loads(done["stdout"])
    stats = result["stats"]
    return {
        "rc": 0,
        "tokens_per_second": stats["tokens_per_second"],
        "new_tokens": stats["new_tokens"],
        "distinct_tokens": len(set(result["token_ids"])),
        "seconds": done["seconds"],
        "peak_rss_gb": done["peak_rss_gb"],
    }


def llama_plain(binary: str, gguf: Path, threads: int, tokens: int) -> dict:
    """llama-bench's tg<tokens>: mean tokens/s over its 3 repetitions (JSON output)."""
    command = [binary, "-m", str(gguf), "-p", "0", "-n", str(tokens), "-t", str(threads), "-r", "3", "-o", "json"]
    done = run_measured(command, dict(os.environ))
    if done["rc"] != 0:
        return {"rc": done["rc"], "error": done["last_stderr"], "tokens_per_second": None}
    test = json.loads(done["stdout"])[0]
    return {
        "rc": 0,
        "tokens_per_second": test["avg_ts"],
        "stddev": test["stddev_ts"],
        "build": test.get("build_commit"),
        "peak_rss_gb": done["peak_rss_gb"],
    }


def costs(specbench: str, gguf: Path, cache: Path, threads: int, out: Path) -> dict | None:
    """The default drafter's cost ratio c beside this target and the verify curve v(k), as
    {"c": float, "v": {k: float}, "file": path}: `specbench costs`, whose file (OUT/STEM-costs.json)
    `specbench predict --costs` re-prices a recorded sweep with; None if it failed."""
    path = out / f"{gguf.stem}-costs.json"
    command = [specbench, "costs", "--target", str(gguf), "--out", str(path)]
    done = run_measured(command, specbench_env(cache, threads))
    if done["rc"] != 0:
        return {"rc": done["rc"], "error": done["last_stderr"]}
    measured = json.loads(path.read_text())
    return {"c": measured["c"], "v": {int(k): v for k, v in measured["verify_cost"].items()}, "file": str(path)}


# ---------------------------------------------------------------------------- one file


def describe(gguf: Path) -> dict:
    """The file's size label, widths and depth (its metadata) and size on disk."""
    fields = GGUFReader(str(gguf)).fields
    arch = fields["general.architecture"].contents()

    def value(key: str):
        field = fields.get(key)
        return field.contents() if field is not None else None

    return {
        "file": gguf.name,
        "gb": round(gguf.stat().st_size / 1e9, 3),
        "size_label": value("general.size_label"),
        "hidden_size": value(f"{arch}.embedding_length"),
        "layers": value(f"{arch}.block_count"),
    }


def mean(values: list) -> float | None:
    values = [v for v in values if v is not None]
    return sum(values) / len(values) if values else None


def measure(gguf: Path, args, machine: dict) -> dict:
    cache = args.caches / gguf.stem
    record = {"machine": machine, "model": describe(gguf), "threads": args.threads, "drafter": args.drafter}
    print(f"{gguf.name}: {record['model']['gb']} GB", flush=True)
    if not args.skip_loads:
        record["seeded"] = fresh_cache(cache, args.seed_cache)
        before = files(cache)
        record["first_load"] = load(args.specbench, gguf, args.drafter, cache, args.threads)
        record["first_load"]["wrote"] = sorted(
            files(cache) - before
        )  # what it prepared or measured (costs/: the cost policy's)
        record["warm_load"] = load(args.specbench, gguf, args.drafter, cache, args.threads)
        for key in ("first_load", "warm_load"):
            print(f"  {key}: {record[key]}", flush=True)
    elif not cache.is_dir():  # plain decoding alone keeps an earlier run's cache
        record["seeded"] = fresh_cache(cache, args.seed_cache)
    rounds = []
    for round_ in range(args.rounds):
        order = ("llama", "specbench") if round_ % 2 == 0 else ("specbench", "llama")
        row = {"round": round_, "first": order[0]}
        for which in order:
            if which == "llama":
                row["llama"] = llama_plain(args.llama_bench, gguf, args.threads, args.max_new_tokens)
            else:
                row["specbench"] = specbench_plain(args.specbench, gguf, cache, args.threads, args.max_new_tokens)
        rounds.append(row)
        print(
            f"  round {round_}: specbench plain {row['specbench']} | llama.cpp tg{args.max_new_tokens} {row['llama']}",
            flush=True,
        )
    record["rounds"] = rounds
    record["specbench_plain_tps"] = mean([r["specbench"]["tokens_per_second"] for r in rounds])
    record["llama_tg_tps"] = mean([r["llama"]["tokens_per_second"] for r in rounds])
    record["costs"] = costs(args.specbench, gguf, cache, args.threads, args.out)
    return record


CSV_COLUMNS = [
    "file",
    "gb",
    "size_label",
    "first_load_s",
    "first_peak_gb",
    "warm_load_s",
    "warm_peak_gb",
    "specbench_plain_tps",
    "llama_tg_tps",
    "plain_vs_llama",
    "c",
    "v2",
    "v4",
    "threads",
    "cpu",
    "flags",
]


def csv_row(record: dict) -> dict:
    first, warm, costs_ = record.get("first_load", {}), record.get("warm_load", {}), record["costs"] or {}
    mine, llama = record["specbench_plain_tps"], record["llama_tg_tps"]
    verify = costs_.get("v", {})
    return {
        **{key: record["model"][key] for key in ("file", "gb", "size_label")},
        "first_load_s": first.get("seconds") if first.get("rc") == 0 else None,
        "first_peak_gb": first.get("peak_rss_gb"),
        "warm_load_s": warm.get("seconds") if warm.get("rc") == 0 else None,
        "warm_peak_gb": warm.get("peak_rss_gb"),
        "specbench_plain_tps": mine,
        "llama_tg_tps": llama,
        "plain_vs_llama": round(mine / llama, 3) if mine and llama else None,
        "c": costs_.get("c"),
        "v2": verify.get(2),
        "v4": verify.get(4),
        "threads": record["threads"],
        "cpu": record["machine"]["model"],
        "flags": " ".join(record["machine"]["flags"]),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("gguf", nargs="+", type=Path, help="GGUF targets (dev/scale_models.py's)")
    parser.add_argument("--llama-bench", required=True, help="path of a llama-bench binary")
    parser.add_argument("--out", type=Path, default=Path("results/scale"))
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--max-new-tokens", type=int, default=64)
    parser.add_argument("--drafter", default="default", help="the drafter of the load runs (plain decoding has none)")
    parser.add_argument(
        "--seed-cache",
        type=Path,
        default=paths.cache_root(),
        help=(
            "a specbench cache whose compiled kernels and prepared default drafter each new cache starts with "
            "(default: $SPECBENCH_CACHE)"
        ),
    )
    parser.add_argument(
        "--caches",
        type=Path,
        default=Path("/tmp/specbench-scale"),
        help="where each file's SPECBENCH_CACHE goes (it holds prepared models: keep it out of the repository)",
    )
    parser.add_argument("--skip-loads", action="store_true", help="measure plain decoding only")
    parser.add_argument(
        "--specbench",
        default=str(Path(sys.executable).with_name("specbench")),
        help="the specbench command (default: this environment's)",
    )
    args = parser.parse_args()
    if missing := [str(p) for p in args.gguf if not p.is_file()]:
        parser.error(f"no such file: {', '.join(missing)}")
    args.gguf = [p.resolve() for p in args.gguf]
    args.out.mkdir(parents=True, exist_ok=True)
    machine = cpu()
    print(f"{machine['line']}; flags: {' '.join(machine['flags']) or 'none'}", flush=True)
    rows = []
    for gguf in args.gguf:
        record = measure(gguf, args, machine)
        (args.out / f"{gguf.stem}.json").write_text(json.dumps(record, indent=1) + "\n")
        rows.append(csv_row(record))
        with open(args.out / "scale.csv", "w", newline="") as out:
            writer = csv.DictWriter(out, fieldnames=CSV_COLUMNS)
            writer.writeheader()
            writer.writerows(rows)
        print(
            f"  specbench plain {record['specbench_plain_tps']} tok/s, "
            f"llama.cpp tg {record['llama_tg_tps']} tok/s -> {args.out / 'scale.csv'}",
            flush=True,
        )


if __name__ == "__main__":
    main()
