"""Tiny Q4_K blocks and GGUF files, and a reference of the Q4_K kernel, for tests of q4k
layers (gguf_blocks.py, prepared.py)."""

from __future__ import annotations

import numpy as np
import torch

from conftest import tiny_model
from specbench.speed.gguf_blocks import BLOCK_BYTES, QK, Q4KLinear, dequantize, repack, use_gguf_blocks

HIDDEN = 256  # Q4_K needs widths that are multiples of 256


def random_q4k(rows: int, cols: int, seed: int, scale: float = 0.002) -> np.ndarray:
    """Valid Q4_K bytes [rows, cols / 256 * 144]: small positive float16 d and dmin, any
    scale bytes and nibbles."""
    rng = np.random.default_rng(seed)
    blocks = rng.integers(0, 256, size=(rows, cols // QK, BLOCK_BYTES), dtype=np.uint8)
    d = (rng.uniform(0.2, 1.0, size=(rows, cols // QK, 2)) * scale).astype(np.float16)
    blocks[..., 0:4] = d.view(np.uint8).reshape(rows, cols // QK, 4)
    return blocks.reshape(rows, -1)


def q4k_reference(x: torch.Tensor, layer: Q4KLinear) -> torch.Tensor:
    """q4k_linear.c's contract in PyTorch, operation for operation: int8 activations per 256
    columns, each super-block's integer sums in the kernel's 8 (and 4) lanes, then float32
    accumulation over super-blocks and the kernel's fixed horizontal sums."""
    rows, width = x.shape
    nsb = width // QK
    xb = x.reshape(rows, nsb, QK)
    amax = xb.abs().amax(dim=-1)
    scale = torch.where(amax > 0, amax / 127.0, torch.ones_like(amax))
    inv = torch.where(amax > 0, 127.0 / amax, torch.zeros_like(amax))
    xq = torch.round(xb * inv[..., None]).clamp(-127, 127).long()  # [M, nsb, 256]
    shifts = torch.tensor([0, 4], dtype=torch.uint8).reshape(1, 1, 1, 2, 1)
    q = ((layer.qs.reshape(-1, nsb, 4, 1, 32) >> shifts) & 0x0F).reshape(-1, nsb, 8, 32).long()  # [N, nsb, sub, 32]
    sc, mins = layer.sm[..., :8].long(), layer.sm[..., 8:].long()
    acc = torch.zeros(rows, layer.out_features, 8)
    accm = torch.zeros(rows, layer.out_features, 4)
    for s in range(nsb):
        xs = xq[:, s].reshape(rows, 8, 8, 4)  # [M, sub, lane, 4 columns]
        qw = q[:, s].reshape(-1, 8, 8, 4)  # [N, sub, lane, 4]
        lanes = torch.einsum("mjlc,njlc,nj->mnl", xs, qw, sc[:, s])  # exact int64
        bsum = xq[:, s].reshape(rows, 8, 32).sum(-1)  # [M, sub]
        mlanes = (mins[None, :, s] * bsum[:, None, :]).reshape(rows, -1, 4, 2).sum(-1)  # [M, N, 4]
        ds = layer.d[None, :, s] * scale[:, s, None]  # float32 products, as in the kernel
        dm = layer.dmin[None, :, s] * scale[:, s, None]
        acc = acc + lanes.float() * ds[..., None]
        accm = accm + mlanes.float() * dm[..., None]
    s4 = acc[..., :4] + acc[..., 4:]
    total = (s4[..., 0] + s4[..., 2]) + (s4[..., 1] + s4[..., 3])
    total = total - ((accm[..., 0] + accm[..., 2]) + (accm[..., 1] + accm[..., 3]))
    return total if layer.bias is None else total + layer.bias


GGUF_NAMES = {  # Qwen2's Linear layers and their GGUF tensor names
    "self_attn.q_proj": "attn_q",
    "self_attn.k_proj": "attn_k",
    "self_attn.v_proj": "attn_v",
    "self_attn.o_proj": "attn_output",
    "mlp.gate_proj": "ffn_gate",
    "mlp.up_proj": "ffn_up",
    "mlp.down_proj": "ffn_down",
}


def q4k_weights(model, seed: int) -> dict[str, tuple[torch.nn.Linear, np.ndarray]]:
    """Give every Linear of a tiny Qwen2 (hidden 256) random Q4_K blocks, dequantized, as its
    weight; returns GGUF tensor name ("blk.0.attn_q.weight", "output.weight") -> (the
    layer, its blocks)."""
    named = {"output": model.lm_head}
    for i, layer in enumerate(model.model.layers):
        for hf, gguf_name in GGUF_NAMES.items():
            named[f"blk.{i}.{gguf_name}"] = layer.get_submodule(hf)
    found = {}
    for k, (name, linear) in enumerate(named.items()):
        raw = random_q4k(linear.out_features, linear.in_features, seed=100 * seed + k, scale=0.02)
        with torch.no_grad():
            linear.weight.copy_(dequantize(**repack(raw)))
        found[name + ".weight"] = (linear, raw)
    return found


def q4k_model_and_file(tmp_path, seed: int = 0, skip: str | None = None):
    """A tiny Qwen2 (hidden 256) whose every Linear weight is random Q4_K blocks dequantized,
    and a GGUF file holding only those blocks (under the names llama.cpp gives them); `skip`:
    one GGUF name written as float32 instead."""
    from gguf import GGMLQuantizationType, GGUFWriter

    model = tiny_model(seed, hidden=HIDDEN)
    writer = GGUFWriter(str(tmp_path / "tiny.gguf"), "qwen2")
    for name, (linear, raw) in q4k_weights(model, seed).items():
        if name == f"{skip}.weight":
            writer.add_tensor(name, linear.weight.detach().numpy())
        else:
            writer.add_tensor(name, raw, raw_dtype=GGMLQuantizationType.Q4_K)
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    return model, tmp_path / "tiny.gguf"


def q4k_target(tmp_path, seed: int = 0):
    """A tiny q4k target: q4k_model_and_file's model with the file's Q4_K blocks swapped in
    for every Linear, as a q4k target is made."""
    model, path = q4k_model_and_file(tmp_path, seed)
    assert use_gguf_blocks(model, str(path)) == (2 * 7 + 1, 0)
    return model


def q4k_gguf_with_tokenizer(path, seed: int = 0):
    """A tiny Qwen2 (hidden 256) with Q4_K weights, written as a complete GGUF (the
    character tokenizer, norms and embedding in float32, every Linear as Q4_K): what the
    default target's file is, in small. Returns (the model, the path)."""
    from tiny_hf import write_tiny_gguf

    model = tiny_model(seed, hidden=HIDDEN)
    blocks = {name: raw for name, (_, raw) in q4k_weights(model, seed).items()}
    return model, write_tiny_gguf(path, model, raw=blocks)
