"""Builds and loads int8_gemv.c, specbench's own int8 kernel for a drafter's draft steps.

The C file is compiled once per machine with the system C compiler (`cc`, or $CC) for this
CPU (-march=native) into the cache (defaults.cache_root() / "native", keyed by the source,
the flags and the CPU's model and flags), and loaded with ctypes. It uses OpenMP through
the runtime PyTorch has already loaded, so both share one thread pool.

No compiler, a failed build, or a CPU without AVX512BW and AVX512-VNNI: kernel() returns
None and callers keep PyTorch's int8 kernel (`why_not()` says which). SPECBENCH_NATIVE=0
turns it off.
"""

from __future__ import annotations

import ctypes
import functools
import hashlib
import os
import platform
import shutil
import subprocess
import tempfile
from pathlib import Path

import torch  # noqa: F401  (loads PyTorch's OpenMP runtime before the kernel's)

from specbench.models import defaults

SOURCE = Path(__file__).with_name("int8_gemv.c")
FLAGS = ["-O3", "-march=native", "-fopenmp", "-shared", "-fPIC"]


def kernel() -> ctypes.CDLL | None:
    """The loaded kernel library, or None where it cannot be had on this machine."""
    return _load()[0]


def why_not() -> str | None:
    """None when the kernel is in use, else one line on why not."""
    return _load()[1]


def name() -> str:
    """What runs a drafter's few-row int8 layers here: for results' metadata."""
    lib, reason = _load()
    return "specbench int8_gemv (AVX512-VNNI)" if lib is not None else f"torch._weight_int8pack_mm ({reason})"


@functools.cache
def _load() -> tuple[ctypes.CDLL | None, str | None]:
    """(the library, None), or (None, why it cannot be had); built and loaded once."""
    if os.environ.get("SPECBENCH_NATIVE", "1") == "0":
        return None, "SPECBENCH_NATIVE=0"
    if platform.machine() not in ("x86_64", "AMD64"):
        return None, f"not an x86-64 CPU ({platform.machine()})"
    compiler = _compiler()
    if compiler is None:
        return None, "no C compiler (cc or gcc) on PATH"
    path = defaults.cache_root() / "native" / f"int8_gemv-{_key(compiler)}.so"
    if not path.exists():
        error = _build(compiler, path)
        if error:
            return None, error
    try:
        lib = ctypes.CDLL(str(path))
    except OSError as error:
        return None, f"could not load {path}: {error}"
    lib.specbench_int8_ready.restype = ctypes.c_int
    if not lib.specbench_int8_ready():
        return None, "this CPU lacks AVX512BW or AVX512-VNNI"
    gemv = lib.specbench_int8_gemv
    gemv.restype = ctypes.c_int
    gemv.argtypes = [ctypes.c_void_p, ctypes.c_int, ctypes.c_int, ctypes.c_void_p, ctypes.c_void_p, ctypes.c_void_p, ctypes.c_int, ctypes.c_void_p]
    return lib, None


def _compiler() -> str | None:
    return os.environ.get("CC") or shutil.which("cc") or shutil.which("gcc")


def _key(compiler: str) -> str:
    """A short hash of what the built library depends on: source, compiler, flags, CPU."""
    digest = hashlib.sha256(SOURCE.read_bytes())
    digest.update(" ".join([compiler, *FLAGS]).encode())
    digest.update(_cpu_signature().encode())
    return digest.hexdigest()[:16]


def _cpu_signature() -> str:
    try:
        lines = Path("/proc/cpuinfo").read_text().splitlines()
    except OSError:
        return platform.processor()
    wanted = [line for line in lines if line.startswith(("model name", "flags"))]
    return "\n".join(dict.fromkeys(wanted))


# The instruction sets that decide which fast path runs on an x86 CPU: AVX2 and FMA for
# PyTorch's fp32 and int8 kernels; AVX512BW + AVX512_VNNI for specbench's int8 kernel;
# AVX512_BF16 / AMX for oneDNN's bf16 paths.
SPEED_FLAGS = ("avx2", "fma", "avx512f", "avx512bw", "avx512_vnni", "avx512_bf16", "avx_vnni", "amx_tile")


def cpu_description() -> dict:
    """The CPU's model name and which of SPEED_FLAGS it has, for every number's record
    ({"model": "...", "flags": ["avx2", ...]}; empty where /proc/cpuinfo is unreadable)."""
    try:
        lines = Path("/proc/cpuinfo").read_text().splitlines()
    except OSError:
        return {"model": platform.processor(), "flags": []}
    model = next((line.split(":", 1)[1].strip() for line in lines if line.startswith("model name")), platform.processor())
    flags = set(next((line.split(":", 1)[1].split() for line in lines if line.startswith("flags")), []))
    return {"model": model, "flags": [f for f in SPEED_FLAGS if f in flags]}


def _build(compiler: str, path: Path) -> str | None:
    """Compile SOURCE to path (atomically); None on success, else one line on what failed."""
    path.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=path.parent) as scratch:
        out = Path(scratch) / path.name
        try:
            done = subprocess.run([compiler, *FLAGS, str(SOURCE), "-o", str(out)], capture_output=True, text=True, timeout=120)
        except (OSError, subprocess.TimeoutExpired) as error:
            return f"the build failed: {error}"
        if done.returncode != 0:
            last = (done.stderr.strip().splitlines() or ["no output"])[-1]
            return f"the build failed: {last}"
        os.replace(out, path)
    return None
