"""Tiny Q4_K blocks and GGUF files for tests of the q4k target (gguf_blocks.py, prepared.py)."""

from __future__ import annotations

import numpy as np
import torch

from conftest import tiny_model
from specbench.speed.gguf_blocks import BLOCK_BYTES, QK, dequantize, repack

HIDDEN = 256  # Q4_K needs widths that are multiples of 256


def random_q4k(rows: int, cols: int, seed: int, scale: float = 0.002) -> np.ndarray:
    """Valid Q4_K bytes [rows, cols / 256 * 144]: small positive float16 d and dmin, any
    scale bytes and nibbles."""
    rng = np.random.default_rng(seed)
    blocks = rng.integers(0, 256, size=(rows, cols // QK, BLOCK_BYTES), dtype=np.uint8)
    d = (rng.uniform(0.2, 1.0, size=(rows, cols // QK, 2)) * scale).astype(np.float16)
    blocks[..., 0:4] = d.view(np.uint8).reshape(rows, cols // QK, 4)
    return blocks.reshape(rows, -1)


GGUF_NAMES = {  # Qwen2's Linear layers and their GGUF tensor names
    "self_attn.q_proj": "attn_q",
    "self_attn.k_proj": "attn_k",
    "self_attn.v_proj": "attn_v",
    "self_attn.o_proj": "attn_output",
    "mlp.gate_proj": "ffn_gate",
    "mlp.up_proj": "ffn_up",
    "mlp.down_proj": "ffn_down",
}


def q4k_model_and_file(tmp_path, seed: int = 0, skip: str | None = None):
    """A tiny Qwen2 (hidden 256) whose every Linear weight is random Q4_K blocks dequantized,
    and a GGUF file holding those blocks (under the names llama.cpp gives them); `skip`: one
    GGUF name written as float32 instead."""
    from gguf import GGMLQuantizationType, GGUFWriter

    model = tiny_model(seed, hidden=HIDDEN)
    writer = GGUFWriter(str(tmp_path / "tiny.gguf"), "qwen2")
    named = {f"output": model.lm_head}
    for i, layer in enumerate(model.model.layers):
        for hf, gguf_name in GGUF_NAMES.items():
            named[f"blk.{i}.{gguf_name}"] = layer.get_submodule(hf)
    for k, (name, linear) in enumerate(named.items()):
        raw = random_q4k(linear.out_features, linear.in_features, seed=100 * seed + k, scale=0.02)
        with torch.no_grad():
            linear.weight.copy_(dequantize(**repack(raw)))
        if name == skip:
            writer.add_tensor(name + ".weight", linear.weight.detach().numpy())
        else:
            writer.add_tensor(name + ".weight", raw, raw_dtype=GGMLQuantizationType.Q4_K)
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    return model, tmp_path / "tiny.gguf"
