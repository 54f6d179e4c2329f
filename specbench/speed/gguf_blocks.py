"""A target's Linear layers over its GGUF file's own Q4_K and Q6_K blocks (`--dtype q4k`).

Why: a CPU decoding step is bound by reading weights. The int8 target (quantize.py) reads
8 bits a weight and rounds the file's 4-bit weights a second time; the Q4_K blocks the
GGUF file already holds are 4.5 bits a weight and are the weights themselves. Q4KLinear
keeps those blocks as they are (repacked into four arrays, no value changed; the Q4_K
kernel reads each super-block's nibbles in lane order, to_kernel_order, and a Q6_K kernel
built for AVX2 alone its values likewise, q6k_to_kernel_order) and runs them through
q4k_linear.c, which, like int8_linear.c, gives a row the same bits whatever else shares
the call, so greedy speculative decoding of a q4k target still equals its plain decoding
token for token. Activations are rounded to int8 per 256 columns (llama.cpp's
Q8_K rule): that, not the weights, is where a q4k target's logits differ from the float32
target's.

A Q4_K_M file (the default target's) keeps its head and half its attn_v and ffn_down in
Q6_K (6.56 bits a weight): Q6KLinear runs those through q6k_linear.c the same way, so the
whole target multiplies by the file's own weights, as llama.cpp does.

Which layers: models/build.py makes every Linear of a q4k target whose GGUF tensor is Q4_K
or Q6_K one of these (the rest int8), and a q4k drafter's decoder layers Q4KLinear over
quantize_q4k's blocks. A drafter's layers may also hold a bfloat16 twin of their weight
(speed/twins.py), which calls of TWIN_ROWS rows or more go through instead: a drafter's rows
need not be batch-invariant. A target's layers never get one.

Knows nothing about decoding or loading.
"""

from __future__ import annotations

import numpy as np
import torch

from specbench.speed import native

Q4K = "q4k"  # the dtype name that asks for this
QK = 256  # columns per Q4_K super-block
BLOCK_BYTES = 144  # d (f16), dmin (f16), 12 bytes of 6-bit scales and mins, 128 bytes of nibbles
Q4K_BUFFERS = ("qs", "sm", "d", "dmin")  # a Q4KLinear's block arrays (repack's layout)
Q6K_BLOCK_BYTES = 210  # 128 bytes of low 4 bits, 64 of high 2 bits, 16 int8 scales, d (f16)
Q6K_BUFFERS = ("ql", "qh", "sc", "d")  # a Q6KLinear's block arrays (repack_q6k's layout)
TWIN_ROWS = 16  # a call of at least this many rows goes through the layer's bfloat16 twin, if it has one


def q4k_why_not() -> str | None:
    """None where a q4k target can run on this machine, else one line on why not."""
    if (why := native.q4k_why_not()) is not None:
        return f"the q4k target needs specbench's AVX2 kernel: {why}"
    return None


# ---------------------------------------------------------------------------- blocks


def repack(raw: np.ndarray) -> dict[str, torch.Tensor]:
    """A Q4_K tensor's bytes [N, K / 256 * 144] -> the kernel's arrays, no value changed:
    qs [N, K/256, 128] nibbles in the kernel's order (to_kernel_order), sm [N, K/256, 16]
    (sc[8] then m[8], 0..63), d and dmin [N, K/256] float32 (exact widenings of the file's
    float16)."""
    rows = raw.shape[0]
    blocks = np.ascontiguousarray(raw, dtype=np.uint8).reshape(rows, -1, BLOCK_BYTES)
    d = blocks[..., 0:2].copy().view(np.float16)[..., 0].astype(np.float32)
    dmin = blocks[..., 2:4].copy().view(np.float16)[..., 0].astype(np.float32)
    scales = blocks[..., 4:16].reshape(rows, -1, 3, 4)
    lo, hi, mixed = scales[..., 0, :], scales[..., 1, :], scales[..., 2, :]
    sc = np.concatenate([lo & 0x3F, (mixed & 0x0F) | ((lo >> 2) & 0x30)], axis=-1)
    m = np.concatenate([hi & 0x3F, (mixed >> 4) | ((hi >> 2) & 0x30)], axis=-1)
    return {
        "qs": to_kernel_order(torch.from_numpy(np.ascontiguousarray(blocks[..., 16:]))),
        "sm": torch.from_numpy(np.ascontiguousarray(np.concatenate([sc, m], axis=-1))),
        "d": torch.from_numpy(np.ascontiguousarray(d)),
        "dmin": torch.from_numpy(np.ascontiguousarray(dmin)),
    }


# The lane order (q4k_linear.c, every build): nibble 32(2j + h) + b of a
# super-block holds column 8j + 4h + b % 4 of sub-block b // 4, where the file's order holds
# column b of sub-block 2j + h. LANE_SOURCE[i]: the file-order nibble that lane-order nibble i holds.
_J, _H, _B = np.meshgrid(np.arange(4), np.arange(2), np.arange(32), indexing="ij")
LANE_SOURCE = torch.from_numpy((_B // 4 * 32 + 8 * _J + 4 * _H + _B % 4).reshape(-1))
FILE_SOURCE = torch.argsort(LANE_SOURCE)


def nibbles(
    qs: torch.Tensor,  # [..., 128] uint8
) -> torch.Tensor:
    """qs [..., 128] -> [..., 256] values 0..15: byte 32j + b's low nibble at 64j + b, its high at 64j + 32 + b."""
    q = qs.reshape(*qs.shape[:-1], 4, 1, 32)
    return torch.cat([q & 0x0F, q >> 4], dim=-2).reshape(*qs.shape[:-1], 256)


def _pack(values: torch.Tensor) -> torch.Tensor:
    """nibbles' inverse: [..., 256] values 0..15 -> [..., 128] bytes."""
    v = values.reshape(*values.shape[:-1], 4, 2, 32)
    return (v[..., 0, :] | (v[..., 1, :] << 4)).reshape(*values.shape[:-1], 128).contiguous()


def to_kernel_order(
    qs: torch.Tensor,  # [..., 128] uint8
) -> torch.Tensor:
    """Nibbles in the file's order -> the lane order the Q4_K kernel reads in every build."""
    return _pack(nibbles(qs)[..., LANE_SOURCE])


def to_file_order(
    qs: torch.Tensor,  # [..., 128] uint8
) -> torch.Tensor:
    """to_kernel_order's inverse."""
    return _pack(nibbles(qs)[..., FILE_SOURCE])


def dequantize(
    qs: torch.Tensor,  # [N, K/256, 128] uint8 nibbles
    sm: torch.Tensor,  # [N, K/256, 16] uint8
    d: torch.Tensor,  # [N, K/256] float32
    dmin: torch.Tensor,  # [N, K/256] float32
) -> torch.Tensor:
    """The float32 weight [N, K] the blocks (qs in the kernel's order) stand for, rounded as
    gguf-py (and so transformers' GGUF loader) rounds it: (d * sc) * q - dmin * m."""
    rows, nsb = d.shape
    sc, m = sm[..., :8].float(), sm[..., 8:].float()
    scale = (d[..., None] * sc)[..., None]  # [N, nsb, 8, 1]
    q = nibbles(to_file_order(qs)).reshape(rows, nsb, 8, 32).float()
    return (scale * q - (dmin[..., None] * m)[..., None]).reshape(rows, nsb * QK)


def repack_q6k(raw: np.ndarray) -> dict[str, torch.Tensor]:
    """A Q6_K tensor's bytes [N, K / 256 * 210] -> the kernel's arrays, no value changed:
    ql [N, K/256, 128] and qh [N, K/256, 64] in the kernel's order (q6k_to_kernel_order), sc
    [N, K/256, 16] int8, d [N, K/256] float32 (an exact widening of the file's float16)."""
    rows = raw.shape[0]
    blocks = np.ascontiguousarray(raw, dtype=np.uint8).reshape(rows, -1, Q6K_BLOCK_BYTES)
    d = blocks[..., 208:210].copy().view(np.float16)[..., 0].astype(np.float32)
    ql, qh = q6k_to_kernel_order(
        torch.from_numpy(np.ascontiguousarray(blocks[..., :128])),
        torch.from_numpy(np.ascontiguousarray(blocks[..., 128:192])),
    )
    return {
        "ql": ql,
        "qh": qh,
        "sc": torch.from_numpy(np.ascontiguousarray(blocks[..., 192:208]).view(np.int8)),
        "d": torch.from_numpy(np.ascontiguousarray(d)),
    }


# The Q6_K lane order (q6k_linear.c, a build for AVX2 alone): stored value 32v + 2p + t of a
# super-block is column 2v + t of sub-block p (of 16), where the file's order stores column
# 32v + 2p + t there.
_V, _P6, _T = np.meshgrid(np.arange(8), np.arange(16), np.arange(2), indexing="ij")
Q6K_LANE_SOURCE = torch.from_numpy((16 * _P6 + 2 * _V + _T).reshape(-1))
Q6K_FILE_SOURCE = torch.argsort(Q6K_LANE_SOURCE)


def _stored_q6k_values(ql: torch.Tensor, qh: torch.Tensor) -> torch.Tensor:
    """The 6-bit values q (0..63) [N, nsb, 256] in the order ql and qh store them: each half
    of 128 takes ql's 64 bytes' low then high nibbles, and qh's 32 bytes' bit pairs 0-1, 2-3,
    4-5, 6-7 as the top two bits of each 32."""
    rows, nsb = ql.shape[:2]
    low = (ql.reshape(rows, nsb, 2, 1, 64) >> torch.tensor([0, 4], dtype=torch.uint8).reshape(1, 1, 1, 2, 1)) & 0x0F
    high = (
        qh.reshape(rows, nsb, 2, 1, 32) >> torch.tensor([0, 2, 4, 6], dtype=torch.uint8).reshape(1, 1, 1, 4, 1)
    ) & 0x03
    return low.reshape(rows, nsb, QK) | (high.reshape(rows, nsb, QK) << 4)


def _store_q6k_values(values: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """_stored_q6k_values' inverse: [N, nsb, 256] values 0..63 -> (ql, qh)."""
    lead = values.shape[:-1]
    low = (values & 0x0F).reshape(*lead, 2, 2, 64)
    high = (values >> 4).reshape(*lead, 2, 4, 32)
    ql = low[..., 0, :] | (low[..., 1, :] << 4)
    qh = high[..., 0, :] | (high[..., 1, :] << 2) | (high[..., 2, :] << 4) | (high[..., 3, :] << 6)
    return ql.reshape(*lead, 128).contiguous(), qh.reshape(*lead, 64).contiguous()


def q6k_to_kernel_order(
    ql: torch.Tensor,  # [N, K/256, 128] uint8
    qh: torch.Tensor,  # [N, K/256, 64] uint8
) -> tuple[torch.Tensor, torch.Tensor]:
    """A Q6_K tensor's ql and qh in the file's order -> the order the kernel built here reads
    (the same tensors where that is the file's)."""
    return _store_q6k_values(_stored_q6k_values(ql, qh)[..., Q6K_LANE_SOURCE]) if native.lane_order() else (ql, qh)


def q6k_values(
    ql: torch.Tensor,  # [N, K/256, 128] uint8
    qh: torch.Tensor,  # [N, K/256, 64] uint8
) -> torch.Tensor:
    """The 6-bit values q (0..63) [N, nsb, 256] in column order, from repack_q6k's ql and qh."""
    values = _stored_q6k_values(ql, qh)
    return values[..., Q6K_FILE_SOURCE] if native.lane_order() else values


def dequantize_q6k(
    ql: torch.Tensor,  # [N, K/256, 128] uint8
    qh: torch.Tensor,  # [N, K/256, 64] uint8
    sc: torch.Tensor,  # [N, K/256, 16] int8
    d: torch.Tensor,  # [N, K/256] float32
) -> torch.Tensor:
    """The float32 weight [N, K] the Q6_K blocks stand for, rounded as gguf-py rounds it:
    (d * sc) * (q - 32)."""
    rows, nsb = d.shape
    scale = (d[..., None] * sc.float())[..., None]  # [N, nsb, 16, 1]
    q = (q6k_values(ql, qh).to(torch.int16) - 32).float().reshape(rows, nsb, 16, 16)
    return (scale * q).reshape(rows, nsb * QK)


def quantize_q4k(
    weight: torch.Tensor,  # [N, K]
) -> dict[str, torch.Tensor]:
    """A float weight [N, K] as Q4_K blocks in repack's layout, for a drafter's layers that
    its file does not hold as Q4_K (a drafter needs no fidelity to be lossless: its q is
    whatever it computes). K is zero-padded to a multiple of 256 (q4k_linear.c pads the
    activations alike). Each sub-block of 32 spans [min(w, 0), max(w)] in 15 steps, its scale
    and min then rounded to 6 bits of the super-block's d and dmin (float16 values, as in a
    GGUF file), and each weight to the nearest of its 16 levels."""
    rows, width = weight.shape
    nsb = -(-width // QK)
    w = torch.nn.functional.pad(weight.detach().float(), (0, nsb * QK - width)).reshape(rows, nsb, 8, 32)
    low, high = w.amin(-1).clamp(max=0), w.amax(-1).clamp(min=0)
    step, floor = (high - low) / 15, -low  # per sub-block, both >= 0
    d = (step.amax(-1) / 63).half().float()  # [N, nsb]
    dmin = (floor.amax(-1) / 63).half().float()
    sc = _levels(step, d, 63)
    m = _levels(floor, dmin, 63)
    scale, offset = (d[..., None] * sc)[..., None], (dmin[..., None] * m)[..., None]
    q = (
        torch.where(scale > 0, torch.round((w + offset) / scale.clamp(min=torch.finfo(torch.float32).tiny)), 0)
        .clamp(0, 15)
        .to(torch.uint8)
    )
    return {
        "qs": to_kernel_order(_pack(q.reshape(rows, nsb, 256))),
        "sm": torch.cat([sc, m], dim=-1).to(torch.uint8).contiguous(),
        "d": d.contiguous(),
        "dmin": dmin.contiguous(),
    }


def _levels(values: torch.Tensor, unit: torch.Tensor, top: int) -> torch.Tensor:
    """values [N, nsb, 8] in whole units [N, nsb], rounded and clamped to 0..top (0 where the unit is 0)."""
    u = unit[..., None]
    return torch.where(u > 0, torch.round(values / u.clamp(min=torch.finfo(torch.float32).tiny)), 0).clamp(0, top)


class Q4KLinear(torch.nn.Module):
    """y = x W^T + b with W as Q4_K blocks (a GGUF file's own, or quantize_q4k's); every row
    of x (float32) through q4k_linear.c (batch-invariant, see the module docstring). No dense
    copy is kept, but a drafter's bfloat16 twin (speed/twins.py). in_features may be less than
    the blocks' 256-column multiple (zero-padded)."""

    # [out, in] bfloat16, a drafter's only; on the class, as a prepared model's unpickled layers have none of their own
    twin: torch.Tensor | None = None

    def __init__(self, blocks: dict[str, torch.Tensor], bias: torch.Tensor | None, in_features: int | None = None):
        super().__init__()
        self.out_features, nsb = blocks["d"].shape
        self.in_features = nsb * QK if in_features is None else in_features
        if not (nsb - 1) * QK < self.in_features <= nsb * QK:
            raise ValueError(f"{nsb} Q4_K super-blocks cannot hold {self.in_features} columns")
        for name in Q4K_BUFFERS:
            self.register_buffer(name, blocks[name].contiguous())
        self.register_buffer("bias", None if bias is None else bias.detach().float().clone().contiguous())

    def forward(
        self,
        x: torch.Tensor,  # [..., in]
    ) -> torch.Tensor:
        return twin_linear(x, self) if uses_twin(x, self) else q4k_linear(x, self)

    def dense(self) -> torch.Tensor:
        """The float32 weight [out, in_features] the blocks stand for (dequantize)."""
        return dequantize(self.qs, self.sm, self.d, self.dmin)[:, : self.in_features]

    def dense_bf16(self) -> torch.Tensor:
        """dense() rounded to bfloat16 ([out, in_features], contiguous), bit for bit: made in
        one pass by q4k_linear.c where it is built (a drafter's twin, at each load), else
        through the float32 copy."""
        lib = native.q4k_kernel()
        if lib is None:
            return self.dense().to(torch.bfloat16).contiguous()
        rows, nsb = self.d.shape
        out = torch.empty(rows, nsb * QK, dtype=torch.bfloat16)
        qs = to_file_order(self.qs).contiguous()
        blocks = (qs, self.sm, self.d, self.dmin)
        if lib.specbench_q4k_to_bf16(*(b.data_ptr() for b in blocks), rows, nsb * QK, out.data_ptr()) != 0:
            raise RuntimeError(f"q4k_to_bf16 refused {rows} x {nsb} super-blocks")
        return out if self.in_features == nsb * QK else out[:, : self.in_features].contiguous()

    def extra_repr(self) -> str:
        return f"in_features={self.in_features}, out_features={self.out_features}, Q4_K blocks"


class Q6KLinear(torch.nn.Module):
    """y = x W^T + b with W as a GGUF file's own Q6_K blocks; every row of x (float32)
    through q6k_linear.c (batch-invariant like q4k_linear.c). No dense copy is kept, but a
    drafter's bfloat16 twin (speed/twins.py)."""

    # [out, in] bfloat16, a drafter's only; on the class, as a prepared model's unpickled layers have none of their own
    twin: torch.Tensor | None = None

    def __init__(self, blocks: dict[str, torch.Tensor], bias: torch.Tensor | None):
        super().__init__()
        self.out_features, nsb = blocks["d"].shape
        self.in_features = nsb * QK
        for name in Q6K_BUFFERS:
            self.register_buffer(name, blocks[name].contiguous())
        self.register_buffer("bias", None if bias is None else bias.detach().float().clone().contiguous())
        self.lanes = native.lane_order()  # the order its ql and qh are in (q6k_to_kernel_order)

    def forward(
        self,
        x: torch.Tensor,  # [..., in]
    ) -> torch.Tensor:
        return twin_linear(x, self) if uses_twin(x, self) else q6k_linear(x, self)

    def dense(self) -> torch.Tensor:
        """The float32 weight [out, in_features] the blocks stand for (dequantize_q6k)."""
        return dequantize_q6k(self.ql, self.qh, self.sc, self.d)[:, : self.in_features]

    def dense_bf16(self) -> torch.Tensor:
        """dense() rounded to bfloat16 ([out, in_features], contiguous)."""
        return self.dense().to(torch.bfloat16).contiguous()

    def extra_repr(self) -> str:
        return f"in_features={self.in_features}, out_features={self.out_features}, Q6_K blocks"


def q4k_linear(
    x: torch.Tensor,  # [..., in]
    layer: Q4KLinear,
) -> torch.Tensor:
    """x [..., in] times the layer's Q4_K weight, plus its bias, through q4k_linear.c.

    A target step makes some 170 of these calls, so the wrapper does no more than it must:
    no copy of a float32 contiguous x, and no conversion of a float32 result."""
    blocks = (layer.qs, layer.sm, layer.d, layer.dmin)
    return _block_linear(x, layer, native.q4k_kernel(), "specbench_q4k_linear", blocks, native.q4k_why_not)


def uses_twin(x: torch.Tensor, layer: Q4KLinear | Q6KLinear) -> bool:
    """Whether x [..., in] goes through the layer's bfloat16 twin: it has one, and x has at
    least TWIN_ROWS rows."""
    return layer.twin is not None and x.numel() >= TWIN_ROWS * x.shape[-1]


def twin_linear(x: torch.Tensor, layer: Q4KLinear | Q6KLinear) -> torch.Tensor:
    """x [..., in] times the layer's bfloat16 twin (oneDNN's GEMM), plus its bias, in x's
    dtype; a twin packed by twins.packed goes through the op made for such weights."""
    bias = None if layer.bias is None else layer.bias.to(torch.bfloat16)
    x16 = x.to(torch.bfloat16)
    if layer.twin.is_mkldnn:
        out = torch.ops.mkldnn._linear_pointwise(x16.contiguous(), layer.twin, bias, "none", [], "")
    else:
        out = torch.nn.functional.linear(x16, layer.twin, bias)
    return out.to(x.dtype)


def check_order(layer: Q6KLinear) -> None:
    """Raises where the layer's values are not in the order the Q6_K kernel built here reads
    (a layer made before SPECBENCH_MARCH changed the build): its products would be wrong."""
    if layer.lanes != native.lane_order():
        raise RuntimeError(
            "a layer's blocks are in another order than the kernel built here reads: load the model again"
        )


def q6k_linear(
    x: torch.Tensor,  # [..., in]
    layer: Q6KLinear,
) -> torch.Tensor:
    """x [..., in] times the layer's Q6_K weight, plus its bias, through q6k_linear.c."""
    check_order(layer)
    return _block_linear(
        x,
        layer,
        native.q6k_kernel(),
        "specbench_q6k_linear",
        (layer.ql, layer.qh, layer.sc, layer.d),
        native.q6k_why_not,
    )


def _block_linear(x: torch.Tensor, layer, lib, entry: str, blocks: tuple, why_not) -> torch.Tensor:
    """One call of a block kernel: x, its rows and width, the block arrays, the bias, out."""
    if lib is None:
        raise RuntimeError(f"the {entry.removeprefix('specbench_')} kernel is not available: {why_not()}")
    width = x.shape[-1]
    if width != layer.in_features:
        raise ValueError(f"a layer of {layer.in_features} inputs got {width}")
    x2 = x if x.dtype == torch.float32 and x.is_contiguous() else x.float().contiguous()
    rows = x2.numel() // width
    out = torch.empty(*x.shape[:-1], layer.out_features, dtype=torch.float32)
    bias = None if layer.bias is None else layer.bias.data_ptr()
    args = (x2.data_ptr(), rows, width, *(b.data_ptr() for b in blocks), bias, layer.out_features, out.data_ptr())
    if rows and getattr(lib, entry)(*args) != 0:
        raise RuntimeError(f"{entry.removeprefix('specbench_')} refused a call of {rows} x {width}")
    return out if x.dtype == torch.float32 else out.to(x.dtype)


# ---------------------------------------------------------------------------- random blocks
# Blocks of random weights, for models of real shapes whose values do not matter (what a
# forward costs: `specbench costs --random-weights`, the scale benchmark's GGUF files).

RANDOM_ROWS = 8192  # rows drawn at a time (bounds the temporaries)


def _half(values: np.ndarray) -> np.ndarray:
    """float values [..., n] -> their float16 bytes [..., 2n]."""
    return values.astype(np.float16).view(np.uint8)


def random_q4k(rows: int, cols: int, rng: np.random.Generator, std: float = 0.02) -> np.ndarray:
    """Q4_K bytes [rows, cols / 256 * 144] of weights with mean about 0 and std about `std`.

    w = d * sc * q - dmin * m with q uniform in 0..15 (std 4.61), sc uniform in 8..31 (rms
    20.7), dmin = 8 d and m = round(7.5 sc / 8) (so each sub-block's mean is within 4 d of 0),
    d = d0 * uniform(0.75, 1.25) per super-block, d0 = std / (4.61 * 20.7 * 1.01)."""
    d0 = std / (4.61 * 20.7 * 1.01)

    def fill(chunk: np.ndarray) -> None:
        shape = chunk.shape[:2]
        chunk[..., 16:] = rng.integers(0, 256, size=(*shape, 128), dtype=np.uint8)
        d = d0 * rng.uniform(0.75, 1.25, size=(*shape, 1)).astype(np.float32)
        chunk[..., 0:2] = _half(d)
        chunk[..., 2:4] = _half(8 * d)
        sc = rng.integers(8, 32, size=(*shape, 8), dtype=np.uint8)
        m = np.rint(sc * (7.5 / 8)).astype(np.uint8)
        chunk[..., 4:16] = pack_scales_mins(sc, m)

    return _random_blocks(rows, cols, BLOCK_BYTES, fill)


def _random_blocks(rows: int, cols: int, block_bytes: int, fill) -> np.ndarray:
    """Blocks [rows, cols / 256 * block_bytes], filled RANDOM_ROWS rows at a time by
    fill(chunk) (chunk: [n, cols / 256, block_bytes] uint8, written in place)."""
    nsb = cols // QK
    out = np.empty((rows, nsb, block_bytes), dtype=np.uint8)
    for r0 in range(0, rows, RANDOM_ROWS):
        fill(out[r0 : r0 + RANDOM_ROWS])
    return out.reshape(rows, nsb * block_bytes)


def pack_scales_mins(sc: np.ndarray, m: np.ndarray) -> np.ndarray:
    """Eight 6-bit scales and eight 6-bit mins [..., 8] -> Q4_K's 12 packed bytes [..., 12]
    (repack's unpacking inverted: bytes 0-3 hold sc 0-3 and the top 2 bits of sc 4-7, bytes
    4-7 m 0-3 and the top 2 bits of m 4-7, bytes 8-11 the low 4 bits of sc 4-7 and of m 4-7)."""
    lo = sc[..., :4] | ((sc[..., 4:] >> 4) << 6)
    hi = m[..., :4] | ((m[..., 4:] >> 4) << 6)
    mixed = (sc[..., 4:] & 0x0F) | ((m[..., 4:] & 0x0F) << 4)
    return np.concatenate([lo, hi, mixed], axis=-1).astype(np.uint8)


def random_q6k(rows: int, cols: int, rng: np.random.Generator, std: float = 0.02) -> np.ndarray:
    """Q6_K bytes [rows, cols / 256 * 210] of weights with mean about 0 and std about `std`.

    w = d * sc * (q - 32) with q uniform in 0..63 (std 18.5, mean 31.5), sc uniform in 4..15
    (rms 10.1), d = d0 * uniform(0.75, 1.25) per super-block, d0 = std / (18.5 * 10.1 * 1.01)."""
    d0 = std / (18.5 * 10.1 * 1.01)

    def fill(chunk: np.ndarray) -> None:
        shape = chunk.shape[:2]
        chunk[..., :192] = rng.integers(0, 256, size=(*shape, 192), dtype=np.uint8)  # ql, qh
        chunk[..., 192:208] = rng.integers(4, 16, size=(*shape, 16), dtype=np.uint8)  # int8 scales, positive
        chunk[..., 208:210] = _half(d0 * rng.uniform(0.75, 1.25, size=(*shape, 1)).astype(np.float32))

    return _random_blocks(rows, cols, Q6K_BLOCK_BYTES, fill)
