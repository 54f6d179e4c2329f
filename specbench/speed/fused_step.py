"""A q4k drafter's decoder layers as two native calls each (q4k_layer.c): its draft steps.

Why: on a 2-core CPU a q4k drafter's draft step spent about a third of its time around its
kernels, in PyTorch's small operations (lean_step.py's forward makes some 90 a layer: the
norms, rotary, bf16 <-> float32 conversions, attention, the gated MLP). FusedLayers runs a
layer as `layer_in` (norm, q|k|v, rotary), the cache's own update (HF's DynamicCache, as
every forward uses it), and `layer_out` (attention, o, residual, norm, MLP, residual), in
float32 throughout. `python bench/drafter_step.py` times it beside the other ways.

It computes other bits than the lean forward (float32 activations instead of bf16, its own
exp): a drafter only has to be deterministic, verification keeps decoding lossless. What it
keeps is row independence: a row's numbers do not depend on which other rows share the call
(q4k_layer.c says why), so a round's two-row catch-up gives what one-row steps give, and the
sweep's profile, which feeds one token a step, sees what real rounds see.

Where it applies: a drafter LeanDecoder stacks (lean_step.py) whose q, k, v, o, gate, up and
down are all Q4KLinear (`--draft-dtype q4k`, the CPU default), on the CPU, with a head
dimension that is a multiple of 8 and the q4k_layer library built. Anywhere else
`fused_layers` returns None and the lean forward runs as before.
"""

from __future__ import annotations

import ctypes

import torch

from specbench.speed import native
from specbench.speed.gguf_blocks import Q4KLinear


class Q4KArgs(ctypes.Structure):
    _fields_ = [("qs", ctypes.c_void_p), ("sm", ctypes.c_void_p), ("d", ctypes.c_void_p), ("dmin", ctypes.c_void_p), ("bias", ctypes.c_void_p), ("N", ctypes.c_int), ("K", ctypes.c_int)]


class LayerArgs(ctypes.Structure):
    _fields_ = [
        *((name, ctypes.c_int) for name in ("H", "Hq", "KV", "D", "I")),
        *((name, ctypes.c_float) for name in ("eps1", "eps2", "scaling")),
        ("norm1", ctypes.c_void_p),
        ("norm2", ctypes.c_void_p),
        *((name, Q4KArgs) for name in ("qkv", "o", "gate_up", "down")),
    ]


def fused_layers(lean) -> FusedLayers | None:
    """FusedLayers over a stacking LeanDecoder's layers, or None where they do not apply."""
    lib = native.layer_kernel()
    if lib is None or lean.head_dim % 8 != 0:
        return None
    # q|k|v and gate|up are stacked (Stacked.q4k) only when each part is a Q4KLinear
    linears = [linear for i in range(len(lean.qkv)) for linear in (lean.qkv[i].q4k, lean.gate_up[i].q4k, lean.o[i].linears[0], lean.down[i].linears[0])]
    if not all(isinstance(linear, Q4KLinear) and linear.qs.device.type == "cpu" for linear in linears):
        return None
    norms = [norm for layer in lean.decoder.layers for norm in (layer.input_layernorm, layer.post_attention_layernorm)]
    if not all(isinstance(getattr(norm, "variance_epsilon", None), float) and getattr(norm, "weight", None) is not None for norm in norms):
        return None
    return FusedLayers(lean, lib)


def _q4k_args(linear: Q4KLinear) -> Q4KArgs:
    bias = None if linear.bias is None else linear.bias.data_ptr()
    return Q4KArgs(linear.qs.data_ptr(), linear.sm.data_ptr(), linear.d.data_ptr(), linear.dmin.data_ptr(), bias, linear.out_features, linear.in_features)


class FusedLayers:
    """hidden = FusedLayers(lean, lib)(input_ids [1, n], cache): the decoder's final hidden
    states [1, n, hidden] (computed in float32, returned in the model's dtype) after what the
    cache holds, which it extends, as LeanDecoder's call does. Holds float32 copies of the
    norms' weights (a few KB) and the layers' block addresses; the blocks are the model's."""

    def __init__(self, lean, lib):
        self.lean, self.lib = lean, lib
        decoder = lean.decoder
        self.embed, self.rotary, self.norm = decoder.embed_tokens, decoder.rotary_emb, decoder.norm
        self.dtype = decoder.embed_tokens.weight.dtype  # the model's: what HF's forward stores and returns
        self.keep = []  # the float32 norm weights the layer descriptions point to
        self.args = [self._layer_args(i, layer) for i, layer in enumerate(decoder.layers)]
        self.q_width = lean.heads * lean.head_dim
        self.kv_width = lean.kv_heads * lean.head_dim

    def _layer_args(self, i: int, layer) -> LayerArgs:
        lean = self.lean
        norms = [norm.weight.detach().float().contiguous() for norm in (layer.input_layernorm, layer.post_attention_layernorm)]
        self.keep += norms
        gate_up = lean.gate_up[i].q4k
        return LayerArgs(
            layer.post_attention_layernorm.weight.shape[0],
            lean.heads,
            lean.kv_heads,
            lean.head_dim,
            gate_up.out_features // 2,
            layer.input_layernorm.variance_epsilon,
            layer.post_attention_layernorm.variance_epsilon,
            layer.self_attn.scaling,
            norms[0].data_ptr(),
            norms[1].data_ptr(),
            _q4k_args(lean.qkv[i].q4k),
            _q4k_args(lean.o[i].linears[0]),
            _q4k_args(gate_up),
            _q4k_args(lean.down[i].linears[0]),
        )

    def __call__(self, input_ids: torch.Tensor, cache) -> torch.Tensor:
        n = input_ids.shape[1]
        past = cache.get_seq_length()
        hidden = self.embed(input_ids).float().reshape(n, -1).contiguous()
        positions = torch.arange(past, past + n, device=input_ids.device).unsqueeze(0)
        cos, sin = (t.float().reshape(n, -1).contiguous() for t in self.rotary(hidden, positions))
        qkv = torch.empty(n, self.q_width + 2 * self.kv_width)
        q, kv = self.q_width, self.kv_width
        k_rows, v_rows = qkv[:, q : q + kv], qkv[:, q + kv :]
        # config.num_hidden_layers, as HF's decoder reads it (an early-exit drafter lowers it)
        for i in range(self.lean.config.num_hidden_layers):
            args = ctypes.byref(self.args[i])
            if self.lib.specbench_layer_in(args, hidden.data_ptr(), n, cos.data_ptr(), sin.data_ptr(), qkv.data_ptr()) != 0:
                raise RuntimeError(f"q4k_layer refused layer {i}'s input of {n} rows")
            # copies (copy=True): the cache must not keep a view of qkv, which the next layer overwrites
            k = k_rows.reshape(1, n, self.lean.kv_heads, self.lean.head_dim).transpose(1, 2).to(self.dtype, copy=True)
            v = v_rows.reshape(1, n, self.lean.kv_heads, self.lean.head_dim).transpose(1, 2).to(self.dtype, copy=True)
            keys, values = cache.update(k, v, i)
            if keys.stride() != values.stride() or keys.stride(3) != 1:
                keys, values = keys.contiguous(), values.contiguous()
            bf16 = int(keys.dtype == torch.bfloat16)
            if keys.dtype not in (torch.float32, torch.bfloat16) or values.dtype != keys.dtype:
                raise RuntimeError(f"q4k_layer reads a float32 or bfloat16 cache, not {keys.dtype}")
            status = self.lib.specbench_layer_out(args, hidden.data_ptr(), n, qkv.data_ptr(), keys.data_ptr(), values.data_ptr(), bf16, keys.stride(1), keys.stride(2), keys.shape[2])
            if status != 0:
                raise RuntimeError(f"q4k_layer refused layer {i}'s attention over {keys.shape[2]} keys")
        return self.norm(hidden.unsqueeze(0)).to(self.dtype)
