"""Builds and loads specbench's own int8 and 4-bit kernels (C files beside this module).

Five libraries, each compiled once per machine with the system C compiler (`cc`, or $CC) for
this CPU (-march=native; SPECBENCH_MARCH=x86-64-v3, say, builds for another target, as
for AVX2 alone on an AVX-512 CPU) into the cache (paths.native_dir(), keyed by the
source, the flags and the CPU's model and flags), and loaded with ctypes. All use OpenMP
through the runtime PyTorch has already loaded, so they share one thread pool.

  int8_gemv.c    (kernel())         a drafter's draft steps, up to 4 bf16 rows; needs
                                    AVX512BW and AVX512-VNNI.
  int8_linear.c  (linear_kernel())  any number of rows, fp32 or bf16, summed exactly in
                                    integers, so each row's result does not depend on the
                                    others: the int8 target (quantize.Int8TargetLinear) and
                                    the draft steps where the VNNI kernel is missing; needs AVX2.
  q4k_linear.c   (q4k_kernel())     any number of fp32 rows over a GGUF file's own Q4_K
                                    blocks, batch-invariant like int8_linear.c: the q4k
                                    target (gguf_blocks.Q4KLinear); needs AVX2.
  q6k_linear.c   (q6k_kernel())     the same over Q6_K blocks: the q4k target's Q6_K layers
                                    and head (gguf_blocks.Q6KLinear); includes q4k_linear.c
                                    (its activations); needs AVX2.
  q4k_layer.c    (layer_kernel())   a decoder layer of a q4k drafter or a q4k or int8 target
                                    in two calls, around the cache (fused_step.py); includes
                                    q6k_linear.c and q4k_linear.c, calls int8_linear.c's
                                    entry; needs AVX2.

No compiler, a failed build, or a CPU without the instructions: the getter returns None,
callers keep PyTorch's kernels (or refuse an int8 or q4k target, or run a q4k drafter's
layers through the lean forward) and `why_not()`, `linear_why_not()`, `q4k_why_not()`,
`q6k_why_not()` and `layer_why_not()` say why. SPECBENCH_NATIVE=0 turns all five off.
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
from dataclasses import dataclass
from pathlib import Path

import torch  # noqa: F401  (loads PyTorch's OpenMP runtime before the kernels')

from specbench import paths

# -ffp-contract=off: the float epilogue stays three separate roundings (no fused multiply-add),
# the same in every build, so int8_linear.c's results equal the exact reference bit for bit
FLAGS = ["-O3", "-ffp-contract=off", "-fopenmp", "-shared", "-fPIC"]
MARCH_ENV = "SPECBENCH_MARCH"  # the CPU the kernels are built for: native unless it says


def march() -> str:
    """What the kernels are built for: SPECBENCH_MARCH's target, else native (this CPU)."""
    return os.environ.get(MARCH_ENV) or "native"


def flags() -> list[str]:
    """The compiler's flags: FLAGS and -march."""
    return [*FLAGS, f"-march={march()}"]


_P, _I, _L = ctypes.c_void_p, ctypes.c_int, ctypes.c_long
HEADER = Path(__file__).with_name("bf16.h")  # shared by the C files (in every build key)


@dataclass(frozen=True)
class Entry:
    """One C function of a library: its symbol and its arguments as (name, ctype), in the C
    prototype's order and with its names. Each returns int: 0, or -1 for a call it refuses."""

    symbol: str
    args: tuple[tuple[str, type], ...] = ()

    @property
    def argtypes(self) -> list[type]:
        return [ctype for _, ctype in self.args]


@dataclass(frozen=True)
class Library:
    source: str  # the C file beside this module
    ready: str  # symbol: int f(void), 1 when the CPU has what the code needs
    needs: str  # those instructions, for the reason it is not used
    entries: tuple[Entry, ...]  # the functions callers use
    includes: tuple = ()  # the other C files it #includes (in its build key)

    @property
    def path(self) -> Path:
        return Path(__file__).with_name(self.source)

    def sources(self) -> bytes:
        """What its build depends on besides the flags and the CPU: its C text and what it includes."""
        files = [self.path, *(Path(__file__).with_name(name) for name in self.includes), HEADER]
        return b"".join(file.read_bytes() for file in files)


# y [M, N] = x [M, K] W^T + bias over N output rows of weights: the shapes every linear
# kernel below takes, after its own weight arguments
_ROWS = (("M", _I), ("K", _I))
_OUT = (("bias", _P), ("N", _I), ("y", _P))

GEMV = Library(
    "int8_gemv.c",
    "specbench_int8_ready",
    "AVX512BW or AVX512-VNNI",
    (Entry("specbench_int8_gemv", (("x", _P), *_ROWS, ("w", _P), ("wscale", _P), *_OUT)),),
)
LINEAR = Library(
    "int8_linear.c",
    "specbench_int8_linear_ready",
    "AVX2",
    (
        Entry(
            "specbench_int8_linear",
            (("x", _P), ("x_bf16", _I), *_ROWS, ("w", _P), ("wscale", _P), ("bias", _P), ("p_bf16", _I)) + _OUT[1:],
        ),
        Entry(
            "specbench_quantize_rows",
            (("w", _P), ("w_bf16", _I), ("N", _I), ("K", _I), ("q", _P), ("scale", _P), ("s_bf16", _I)),
        ),
    ),
)
Q4K = Library(
    "q4k_linear.c",
    "specbench_q4k_ready",
    "AVX2",
    (
        Entry("specbench_q4k_linear", (("x", _P), *_ROWS, ("qs", _P), ("sm", _P), ("d", _P), ("dmin", _P), *_OUT)),
        Entry("specbench_lane_order"),
        Entry(
            "specbench_q4k_to_bf16",
            (("qs", _P), ("sm", _P), ("d", _P), ("dmin", _P), ("N", _I), ("K", _I), ("out", _P)),
        ),
    ),
)
Q6K = Library(
    "q6k_linear.c",
    "specbench_q6k_ready",
    "AVX2",
    (Entry("specbench_q6k_linear", (("x", _P), *_ROWS, ("ql", _P), ("qh", _P), ("sc", _P), ("d", _P), *_OUT)),),
    includes=("q4k_linear.c",),
)
LAYER = Library(
    "q4k_layer.c",
    "specbench_layer_ready",
    "AVX2",
    (
        Entry("specbench_layer_in", (("L", _P), ("hidden", _P), ("n", _I), ("cos", _P), ("sin", _P), ("qkv", _P))),
        Entry(
            "specbench_layer_out",
            (("L", _P), ("hidden", _P), ("n", _I), ("qkv", _P), ("K", _P), ("V", _P), ("bf16", _I))
            + (("hs", _L), ("ts", _L), ("T", _I)),
        ),
        Entry(
            "specbench_layers",
            (("layers", _P), ("count", _I), ("hidden", _P), ("n", _I), ("cos", _P), ("sin", _P), ("qkv", _P))
            + (("K", _P), ("V", _P), ("bf16", _I), ("hs", _L), ("ts", _L), ("past", _I)),
        ),
    ),
    includes=("q4k_linear.c", "q6k_linear.c"),
)
LIBRARIES = (GEMV, LINEAR, Q4K, Q6K, LAYER)


def sources_digest() -> str:
    """A short hash of every kernel's C text. Cached measurements of their speed key on it
    (cost_cache.cost_key), so an edit that changes no bit but the speed (a prefetch
    distance, a tile's order of instructions) is measured again without a version to bump."""
    return hashlib.sha256(b"".join(library.sources() for library in LIBRARIES)).hexdigest()[:12]


def _getters(library: Library, what: str):
    """The pair of functions callers use for `library`: (the library, or None where it
    cannot be had on this machine) and (None when it is in use, else one line on why not)."""

    def get() -> ctypes.CDLL | None:
        return _load(library)[0]

    def why() -> str | None:
        return _load(library)[1]

    get.__doc__ = f"The {what} library, or None where it cannot be had on this machine."
    why.__doc__ = f"None when the {what} library is in use, else one line on why not."
    return get, why


kernel, why_not = _getters(GEMV, "AVX512-VNNI draft-step")
linear_kernel, linear_why_not = _getters(LINEAR, "batch-invariant AVX2 int8 linear")
q4k_kernel, q4k_why_not = _getters(Q4K, "batch-invariant Q4_K linear")
q6k_kernel, q6k_why_not = _getters(Q6K, "batch-invariant Q6_K linear")
layer_kernel, layer_why_not = _getters(LAYER, "decoder-layer (fused_step.py)")


def lane_order() -> bool:
    """Whether the Q6_K kernel built here reads its blocks' values in lane order (q6k_linear.c:
    a build for AVX2 alone) rather than the file's (a VNNI build); False where it is not
    built. (The Q4_K kernel reads lane order in every build.)"""
    lib = q4k_kernel()
    return lib is not None and bool(lib.specbench_lane_order())


def name() -> str:
    """What runs a drafter's few-row int8 layers here: for results' metadata."""
    if kernel() is not None:
        return "specbench int8_gemv (AVX512-VNNI)"
    if linear_kernel() is not None:
        return f"specbench int8_linear (AVX2; int8_gemv: {why_not()})"
    reasons = dict.fromkeys((why_not(), linear_why_not()))  # one reason when both share it
    return f"torch._weight_int8pack_mm ({'; '.join(reasons)})"


@functools.cache
def _load(library: Library) -> tuple[ctypes.CDLL | None, str | None]:
    """(the library, None), or (None, why it cannot be had); built and loaded once."""
    if os.environ.get("SPECBENCH_NATIVE", "1") == "0":
        return None, "SPECBENCH_NATIVE=0"
    if platform.machine() not in ("x86_64", "AMD64"):
        return None, f"not an x86-64 CPU ({platform.machine()})"
    compiler = _compiler()
    if compiler is None:
        return None, "no C compiler (cc or gcc) on PATH"
    stem = library.path.stem
    path = paths.native_dir() / f"{stem}-{_key(compiler, library)}.so"
    if not path.exists():
        error = _build(compiler, library.path, path)
        if error:
            return None, error
    try:
        lib = ctypes.CDLL(str(path))
    except OSError as error:
        return None, f"could not load {path}: {error}"
    ready = getattr(lib, library.ready)
    ready.restype = ctypes.c_int
    if not ready():
        target = march()
        built_for = "this CPU" if target == "native" else f"-march={target}"
        return None, f"{built_for} lacks {library.needs}"
    for entry in library.entries:
        function = getattr(lib, entry.symbol)
        function.restype = ctypes.c_int
        function.argtypes = entry.argtypes
    return lib, None


def _compiler() -> str | None:
    return os.environ.get("CC") or shutil.which("cc") or shutil.which("gcc")


def _key(compiler: str, library: Library) -> str:
    """A short hash of what the built library depends on: sources, compiler, flags, CPU."""
    digest = hashlib.sha256(library.sources())
    digest.update(" ".join([compiler, *flags()]).encode())
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
# PyTorch's fp32 and int8 kernels and specbench's int8_linear; AVX512BW + AVX512_VNNI for
# specbench's draft-step kernel (int8_gemv); AVX-VNNI or AVX512_VNNI for one instruction
# fewer in q4k_linear.c's and q6k_linear.c's sums; AVX512_BF16 / AMX for oneDNN's bf16 paths.
SPEED_FLAGS = ("avx2", "fma", "avx512f", "avx512bw", "avx512_vnni", "avx512_bf16", "avx_vnni", "amx_tile")


def cpu_description() -> dict:
    """The CPU's model name, which of SPEED_FLAGS it has and what specbench's kernels are
    built for (-march), for every number's record ({"model": "...", "flags": ["avx2", ...],
    "kernels_march": "native"}; no flags where /proc/cpuinfo is unreadable)."""
    try:
        lines = Path("/proc/cpuinfo").read_text().splitlines()
    except OSError:
        return {"model": platform.processor(), "flags": [], "kernels_march": march()}
    model = next(
        (line.split(":", 1)[1].strip() for line in lines if line.startswith("model name")), platform.processor()
    )
    have = _flags(lines)
    return {"model": model, "flags": [f for f in SPEED_FLAGS if f in have], "kernels_march": march()}


@functools.cache
def cpu_flags() -> frozenset[str]:
    """Every flag /proc/cpuinfo lists for the first CPU (empty where it is unreadable)."""
    try:
        return _flags(Path("/proc/cpuinfo").read_text().splitlines())
    except OSError:
        return frozenset()


def _flags(lines: list[str]) -> frozenset[str]:
    return frozenset(next((line.split(":", 1)[1].split() for line in lines if line.startswith("flags")), []))


def _build(compiler: str, source: Path, path: Path) -> str | None:
    """Compile source to path (atomically); None on success, else one line on what failed."""
    path.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=path.parent) as scratch:
        out = Path(scratch) / path.name
        try:
            done = subprocess.run(
                [compiler, *flags(), str(source), "-o", str(out)], capture_output=True, text=True, timeout=120
            )
        except (OSError, subprocess.TimeoutExpired) as error:
            return f"the build failed: {error}"
        if done.returncode != 0:
            last = (done.stderr.strip().splitlines() or ["no output"])[-1]
            return f"the build failed: {last}"
        os.replace(out, path)
    return None
