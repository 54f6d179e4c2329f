"""An embedding table kept as its file stores it: GGUF blocks of any type, or bf16/f16 rows.

Why: a large vocabulary's embedding is the largest single tensor of a model (Qwen2.5 7B's
152k x 3584 is 2.2 GB as float32), and a step reads only the rows of the tokens it feeds.
So the table stays in its stored bytes, one row of blocks per token, and a lookup
dequantizes just the rows it needs with gguf-py's own dequantizer: the values are those
transformers' GGUF loader gives the whole table (it calls the same function), so a model
with a RowEmbedding computes what the dense embedding computed, bit for bit. Every GGML
type stores a row as whole blocks, so any row can be read alone.

Knows nothing about loading or decoding; models/build.py makes these.
"""

from __future__ import annotations

import numpy as np
import torch

# ggml type ids of the dense formats a safetensors file stores (gguf-py dequantizes them too)
F32, F16, BF16 = 0, 1, 30
DENSE_TYPES = {torch.float32: F32, torch.float16: F16, torch.bfloat16: BF16}


def dequantize_rows(rows: np.ndarray, qtype: int) -> np.ndarray:
    """rows [n, row bytes] of ggml type qtype -> float32 [n, columns], as gguf-py computes it."""
    from gguf import GGMLQuantizationType, dequantize

    return np.asarray(dequantize(rows, GGMLQuantizationType(qtype)), dtype=np.float32).reshape(rows.shape[0], -1)


class RowEmbedding(torch.nn.Module):
    """nn.Embedding's lookup over a table stored as rows of ggml type `qtype` ([vocab, row
    bytes] uint8); the looked-up rows come out in `dtype`."""

    def __init__(self, rows: torch.Tensor, qtype: int, embedding_dim: int, dtype: torch.dtype):
        super().__init__()
        self.register_buffer("rows", rows)  # [vocab, row bytes] uint8
        self.qtype, self.embedding_dim, self.out_dtype = int(qtype), int(embedding_dim), dtype
        self.num_embeddings = rows.shape[0]

    def forward(
        self,
        input_ids: torch.Tensor,  # [...] ids
    ) -> torch.Tensor:
        picked = self.rows[input_ids.reshape(-1).cpu()].numpy()
        values = torch.from_numpy(dequantize_rows(picked, self.qtype)[:, : self.embedding_dim])
        return values.to(device=input_ids.device, dtype=self.out_dtype).reshape(*input_ids.shape, self.embedding_dim)

    def extra_repr(self) -> str:
        out = str(self.out_dtype).removeprefix("torch.")
        return f"{self.num_embeddings}, {self.embedding_dim}, ggml type {self.qtype}, rows out as {out}"
