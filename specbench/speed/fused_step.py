"""The decoder layers of a model whose Linears are specbench's own kernels, as native calls
(q4k_layer.c): a q4k drafter's draft steps, and a q4k or int8 target's forwards over its
cache.

Why: on a 2-core CPU a q4k drafter's draft step spent about a third of its time around its
kernels, in PyTorch's small operations (lean_step.py's forward makes some 90 a layer: the
norms, rotary, bf16 <-> float32 conversions, attention, the gated MLP), and the default
target's step about a fifth. FusedLayers runs a layer as `layer_in` (norm, q|k|v, rotary),
the cache's new rows, and `layer_out` (attention, o, residual, norm, MLP, residual), in
float32 throughout. The cache stays HF's DynamicCache. Where kv_slab.py gives its layers room
ahead (full attention in float32 or bf16: every layout the lean forward takes), all the
layers run in one native call that writes their new rows into that room, which saves
Python's work between the calls and the concatenation of every layer's cache at every step.
Elsewhere each layer's rows go through the cache's own update between its two calls. Either
way, the same bits.
`python dev/drafter_step.py` and `python dev/target_step.py` time it beside the other ways.

It computes other bits than the lean forward and the model's own (float32 activations
instead of bf16, its own order of sums, its own exp). What it keeps is row independence: a
row's numbers do not depend on which other rows share the call (q4k_layer.c says why).
- A drafter only has to be deterministic (verification keeps decoding lossless); row
  independence makes a round's two-row catch-up give what one-row steps give, so the sweep's
  profile, which feeds one token a step, sees what real rounds see.
- A target's logits decide the text. Every forward over a cache runs here, in every mode
  (plain decoding, specbench's rounds, HF's assisted generation), so a k-row verify pass
  gives each row the bits of a one-token step, and greedy speculative decoding equals plain
  decoding token for token (tests/speed/test_fused_step.py, test_q4k_target.py, the real
  pair's tests). The prompt's first forward stays the model's
  own, in every mode alike. The price: the model's own forward, HF's, over the same cache
  gives logits a rounding away (a few tenths of a logit on the default target, where a
  float32 sum in another order moves an activation across a step of the kernels' int8
  activations), so HF's forward alone would not reproduce specbench's text of a q4k or int8
  target token for token at a near tie.

Where it applies: on the CPU, a decoder LeanDecoder runs (lean_step.py) whose every q, k,
v, o, gate, up and down is a Q4KLinear, a Q6KLinear or an Int8TargetLinear (int8 rows with
float32 scales: a target's; int8_linear.c built where there is one), with a head dimension
that is a multiple of 8 and the q4k_layer library built: `--draft-dtype q4k` (the CPU
default drafter), `--dtype q4k` (the default target: its file's Q4_K and Q6_K blocks) and
`--dtype int8`. Anywhere else `fused_layers` returns None and the lean forward
runs as before.
"""

from __future__ import annotations

import ctypes

import torch

from specbench.speed import kv_slab, native
from specbench.speed.gguf_blocks import Q4KLinear, Q6KLinear, check_order
from specbench.speed.quantize import Int8TargetLinear

Q4K_BLOCKS, INT8_ROWS, Q6K_BLOCKS = 0, 1, 2  # q4k_layer.c's kinds of Linear


def _fields(ctype, *names: str) -> list[tuple[str, type]]:
    """Struct fields of one ctype, named as in q4k_layer.c."""
    return [(name, ctype) for name in names]


class LinearArgs(ctypes.Structure):
    """q4k_layer.c's linear_t: one Linear's arrays as its kind reads them (w: blocks, or
    int8 rows [N, K]; bias [N] or NULL), N outputs over K inputs, and the kind."""

    _fields_ = [
        *_fields(ctypes.c_void_p, "w", "sm", "sc", "d", "dmin", "bias"),
        *_fields(ctypes.c_int, "N", "K", "kind"),
    ]


class LayerArgs(ctypes.Structure):
    """q4k_layer.c's layer_t: a decoder layer's sizes, norms and Linears."""

    _fields_ = [
        *_fields(ctypes.c_int, "H", "Hq", "KV", "D", "I"),
        *_fields(ctypes.c_float, "eps1", "eps2", "scaling"),
        *_fields(ctypes.c_void_p, "norm1", "norm2"),
        *_fields(ctypes.c_int, "n_in", "n_mlp"),
        ("inputs", LinearArgs * 3),
        ("o", LinearArgs),
        ("mlp", LinearArgs * 2),
        ("down", LinearArgs),
        ("int8", ctypes.c_void_p),
    ]


def fused_layers(lean) -> FusedLayers | None:
    """FusedLayers over a LeanDecoder's layers, or None where they do not apply. The layers
    are checked first: a model of PyTorch Linears never builds or loads the library."""
    parts = [
        part
        for i in range(len(lean.qkv))
        for group in (lean.qkv[i], lean.gate_up[i], lean.o[i], lean.down[i])
        for part in group.parts()
    ]
    if lean.head_dim % 8 != 0 or not all(_native(linear) for linear in parts):
        return None
    if native.layer_kernel() is None:
        return None
    int8 = None
    if any(isinstance(linear, Int8TargetLinear) for linear in parts):
        if (int8_lib := native.linear_kernel()) is None:
            return None
        int8 = ctypes.cast(int8_lib.specbench_int8_linear, ctypes.c_void_p).value
    norms = [norm for layer in lean.decoder.layers for norm in (layer.input_layernorm, layer.post_attention_layernorm)]
    if not all(
        isinstance(getattr(norm, "variance_epsilon", None), float) and getattr(norm, "weight", None) is not None
        for norm in norms
    ):
        return None
    return FusedLayers(lean, int8)


def _native(linear) -> bool:
    """Whether q4k_layer.c runs this Linear: Q4_K or Q6_K blocks, or a target's int8 rows, on the CPU."""
    if isinstance(linear, (Q4KLinear, Q6KLinear)):
        return linear.d.device.type == "cpu"
    if isinstance(linear, Int8TargetLinear):
        tensors = [linear.qweight, linear.scales] + ([] if linear.bias is None else [linear.bias])
        return linear.scales.dtype == torch.float32 and all(
            t.device.type == "cpu" and t.is_contiguous() for t in tensors
        )
    return False


def _linear_args(linear) -> LinearArgs:
    bias = None if linear.bias is None else linear.bias.data_ptr()
    if isinstance(linear, Q4KLinear):  # lane order in every build: nothing to check
        return LinearArgs(
            linear.qs.data_ptr(),
            linear.sm.data_ptr(),
            None,
            linear.d.data_ptr(),
            linear.dmin.data_ptr(),
            bias,
            linear.out_features,
            linear.in_features,
            Q4K_BLOCKS,
        )
    if isinstance(linear, Q6KLinear):
        check_order(linear)
        return LinearArgs(
            linear.ql.data_ptr(),
            linear.qh.data_ptr(),
            linear.sc.data_ptr(),
            linear.d.data_ptr(),
            None,
            bias,
            linear.out_features,
            linear.in_features,
            Q6K_BLOCKS,
        )
    return LinearArgs(
        linear.qweight.data_ptr(),
        None,
        None,
        linear.scales.data_ptr(),
        None,
        bias,
        linear.out_features,
        linear.in_features,
        INT8_ROWS,
    )


def _group_args(linears: list, size: int):
    array = (LinearArgs * size)()
    for j, linear in enumerate(linears):
        array[j] = _linear_args(linear)
    return array


class FusedLayers:
    """hidden = FusedLayers(lean, int8)(input_ids [1, n], cache): the decoder's final hidden states
    [1, n, hidden] (computed in float32, returned in the model's dtype) after what the cache
    holds, which it extends, as LeanDecoder's call does. int8: the address of int8_linear.c's
    entry, for Int8TargetLinear layers. Holds float32 copies of the norms' weights (a few KB) and
    the layers' weight addresses, taken at the first call (so a copy of the model, which copies
    this too, takes its own); the weights are the model's."""

    def __init__(self, lean, int8: int | None):
        self.lean, self.int8 = lean, int8
        self.embed, self.rotary, self.norm = lean.decoder.embed_tokens, lean.decoder.rotary_emb, lean.decoder.norm
        # the model's dtype: what HF's forward stores and returns (an embedding may keep its rows quantized)
        self.dtype = self.norm.weight.dtype
        self.q_width, self.kv_width = lean.heads * lean.head_dim, lean.kv_heads * lean.head_dim
        self.lib = self.args = self.keep = self.array = None  # taken at the first call

    def __getstate__(self) -> dict:
        """What a copy keeps: not the addresses (ctypes refuses to copy them; they would be the original's)."""
        return {**self.__dict__, "lib": None, "args": None, "keep": None, "array": None}

    def _take_addresses(self) -> None:
        self.lib = native.layer_kernel()
        self.keep = []  # the float32 norm weights the layer descriptions point to
        self.args = [self._layer_args(i, layer) for i, layer in enumerate(self.lean.decoder.layers)]
        self.array = (LayerArgs * len(self.args))(*self.args)  # the same descriptions side by side, for one call

    def _layer_args(self, i: int, layer) -> LayerArgs:
        lean = self.lean
        norms = [
            norm.weight.detach().float().contiguous()
            for norm in (layer.input_layernorm, layer.post_attention_layernorm)
        ]
        self.keep += norms
        qkv, gate_up = lean.qkv[i].parts(), lean.gate_up[i].parts()
        return LayerArgs(
            layer.post_attention_layernorm.weight.shape[0],
            lean.heads,
            lean.kv_heads,
            lean.head_dim,
            sum(linear.out_features for linear in gate_up) // 2,
            layer.input_layernorm.variance_epsilon,
            layer.post_attention_layernorm.variance_epsilon,
            layer.self_attn.scaling,
            norms[0].data_ptr(),
            norms[1].data_ptr(),
            len(qkv),
            len(gate_up),
            _group_args(qkv, 3),
            _linear_args(lean.o[i].parts()[0]),
            _group_args(gate_up, 2),
            _linear_args(lean.down[i].parts()[0]),
            self.int8,
        )

    def __call__(
        self,
        input_ids: torch.Tensor,  # [1, n] ids
        cache,
    ) -> torch.Tensor:
        if self.args is None:
            self._take_addresses()
        n = input_ids.shape[1]
        past = cache.get_seq_length()
        hidden = self.embed(input_ids).float().reshape(n, -1).contiguous()
        positions = torch.arange(past, past + n, device=input_ids.device).unsqueeze(0)
        cos, sin = (t.float().reshape(n, -1).contiguous() for t in self.rotary(hidden, positions))
        qkv = torch.empty(n, self.q_width + 2 * self.kv_width)
        # config.num_hidden_layers, as HF's decoder reads it (an early-exit drafter lowers it)
        count = self.lean.config.num_hidden_layers
        slabs = kv_slab.slabs(cache, count, past + n, self.dtype, self.lean.kv_heads, self.lean.head_dim)
        if slabs is not None:
            self._layers_in_one_call(hidden, n, cos, sin, qkv, slabs, past)
            kv_slab.extend(cache, slabs, past + n)
        else:
            self._layers_one_by_one(hidden, n, cos, sin, qkv, cache)
        return self.norm(hidden.unsqueeze(0)).to(self.dtype)

    def _layers_in_one_call(self, hidden, n: int, cos, sin, qkv, slabs: list, past: int) -> None:
        """Every layer in one native call, which writes the new key and value rows into the
        slabs (kv_slab.py) at positions past..past+n-1."""
        pointers = ctypes.c_void_p * len(slabs)
        keys, values = (
            pointers(*(slab[0].data_ptr() for slab in slabs)),
            pointers(*(slab[1].data_ptr() for slab in slabs)),
        )
        stride = slabs[0][0].stride()  # [1, kv heads, capacity, head dim]: the same for every slab
        status = self.lib.specbench_layers(
            self.array,
            len(slabs),
            hidden.data_ptr(),
            n,
            cos.data_ptr(),
            sin.data_ptr(),
            qkv.data_ptr(),
            keys,
            values,
            int(slabs[0][0].dtype == torch.bfloat16),
            stride[1],
            stride[2],
            past,
        )
        if status != 0:
            raise RuntimeError(f"q4k_layer refused a forward of {n} rows after {past} cached tokens")

    def _layers_one_by_one(self, hidden, n: int, cos, sin, qkv, cache) -> None:
        """Each layer as two native calls with the cache's own update between them: for the
        layers kv_slab.py does not take."""
        q, kv = self.q_width, self.kv_width
        k_rows, v_rows = qkv[:, q : q + kv], qkv[:, q + kv :]
        for i in range(self.lean.config.num_hidden_layers):
            args = ctypes.byref(self.args[i])
            if (
                self.lib.specbench_layer_in(args, hidden.data_ptr(), n, cos.data_ptr(), sin.data_ptr(), qkv.data_ptr())
                != 0
            ):
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
            status = self.lib.specbench_layer_out(
                args,
                hidden.data_ptr(),
                n,
                qkv.data_ptr(),
                keys.data_ptr(),
                values.data_ptr(),
                bf16,
                keys.stride(1),
                keys.stride(2),
                keys.shape[2],
            )
            if status != 0:
                raise RuntimeError(f"q4k_layer refused layer {i}'s attention over {keys.shape[2]} keys")
