"""A lean forward for Qwen2 and Llama layouts: a model drafter's draft steps, and a CPU
target's forwards over its cache.

Why: a draft step feeds one token (two in a round's catch-up) through a 24-layer drafter,
and on a 2-core CPU its int8 kernels are so short that the plumbing around them shows:
HF's decoder forward (mask building, attention dispatch, per-layer keyword handling) and
seven kernel calls per layer. This forward does the same math with the model's own modules
and weights: embedding, the model's rotary embedding, RMSNorm modules, q/k/v, SDPA over the
HF DynamicCache (cache.update, as HF's attention does; computed in float32 on a CPU, where
PyTorch's bfloat16 SDPA is several times slower), o, the gated SiLU MLP, final norm.
Where q/k/v (and gate/up) are int8 (quantize.py), their rows are stacked into one weight
and run as one int8 kernel call; the modules' own buffers become views of the stacked
ones, so no memory is added and HF's forward reads the very same numbers.

`python dev/drafter_step.py` times it against HF's forward on this machine.

A model whose Linears are all specbench's own kernels (a q4k drafter, `--draft-dtype q4k`,
the CPU default; a q4k or int8 target) runs its layers as fused_step.py's native calls
instead, in float32: a third faster a draft step, a fifth a target step; this forward stays
for every other model.

Rows fed over a cache attend one at a time, as core/attention.py does for the target, and
the int8 kernels work row by row: a row's hidden state comes out the same whether it was fed
alone or with others, so the sweep's profile (one token a step) sees what real rounds see.

A call takes at most quantize.MAX_INT8_ROWS new tokens (draft_vocab.draft_hidden feeds a
longer catch-up over a cache in calls of that many); a prompt longer than that,
and any model of another layout (Qwen2/Llama with sliding windows, Qwen3's q/k norms,
Gemma, ...), goes through HF's forward. Lossless either way: the drafter's q is whatever it
computed, and verification checks every draft against the target.

The target (use_lean_forward, called by models/loading.py): the same decoder, unstacked and
for any number of rows, runs a float32 CPU target's forwards over a cache (every decoding
step and every verify pass, specbench's and HF's generate alike). A target's logits decide
the text, so every mode must get the same bits for a row, whether it is fed alone or in a
verify pass. For a target of PyTorch Linears the lean forward gives the very bits the
model's own forward gives: the same modules, the same ops in the same order, attention row
by row exactly as core/attention.py's; tests/speed/test_lean_step.py compares them bit for
bit. A q4k or int8 target's layers run fused_step.py's native calls, row-invariant too, a
rounding away from its own forward. Any call it does not reproduce (the prompt's first
forward, a batch, padding, outputs asked for) runs the model's own forward, in every mode
alike. `python dev/target_step.py` times the ways.
"""

from __future__ import annotations

import inspect
import weakref

import torch
import torch.nn.functional as F
from transformers.modeling_outputs import CausalLMOutputWithPast

from specbench.core.attention import ROWS
from specbench.core.generate import model_device
from specbench.speed.fused_step import fused_layers
from specbench.speed.gguf_blocks import Q4K_BUFFERS, Q4KLinear
from specbench.speed.quantize import MAX_INT8_ROWS, Int8Linear, fast_int8_linear, runs_int8

LAYOUTS = ("qwen2", "llama")  # model_type values whose decoder layers this forward reproduces
MAX_LEAN_ROWS = MAX_INT8_ROWS

_built: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()  # model -> LeanDecoder | None


def lean_decoder(model) -> LeanDecoder | None:
    """The model's LeanDecoder (built on first use, stacking its int8 rows), or None when its
    layout is not one this forward reproduces or it is not on the CPU: the lean forward is a
    CPU path (a row's one-row bits in any call), and a GPU runs transformers' kernels, whose
    rows are not batch-invariant anyway, better as one launch-bound forward than one per
    MAX_LEAN_ROWS rows. Asked at each call: a model can move after its decoder was built."""
    if model_device(model).type != "cpu":
        return None
    if model not in _built:
        _built[model] = LeanDecoder(model) if supports(model) else None
    return _built[model]


def supports(model) -> bool:
    """Whether the model is a plain Qwen2/Llama decoder: full attention, gated SiLU MLP."""
    config = getattr(model, "config", None)
    if getattr(config, "model_type", None) not in LAYOUTS or getattr(config, "hidden_act", None) != "silu":
        return False
    if getattr(config, "use_sliding_window", False) or getattr(config, "pretraining_tp", 1) != 1:
        return False
    if any(kind != "full_attention" for kind in getattr(config, "layer_types", None) or ()):
        return False
    decoder = model.get_decoder() if hasattr(model, "get_decoder") else None
    if decoder is None or not all(hasattr(decoder, name) for name in ("embed_tokens", "layers", "norm", "rotary_emb")):
        return False
    wanted = {"self_attn": ("q_proj", "k_proj", "v_proj", "o_proj"), "mlp": ("gate_proj", "up_proj", "down_proj")}
    return all(
        hasattr(getattr(layer, part, None), name)
        for layer in decoder.layers
        for part, names in wanted.items()
        for name in names
    )


class Stacked:
    """Linears that read the same input, run as one kernel call over their stacked rows when
    all are Int8Linear (and the call fits the int8 kernel) or all are Q4KLinear, else one by
    one. The layers' own buffers become views of the stacked ones: no memory is added."""

    def __init__(self, linears: list[torch.nn.Module]):
        self.linears = linears
        self.sizes = _sizes(linears)
        self.packed = _stack_int8(linears) if all(isinstance(linear, Int8Linear) for linear in linears) else None
        self.q4k = (
            _stack_q4k(linears)
            if len(linears) > 1 and all(isinstance(linear, Q4KLinear) for linear in linears)
            else None
        )

    def parts(self) -> list[torch.nn.Module]:
        """The Linears a call runs, their outputs side by side: the stacked Q4KLinear, or each."""
        return [self.q4k] if self.q4k is not None else self.linears

    def __call__(
        self,
        x: torch.Tensor,  # [..., in]
    ) -> list[torch.Tensor]:
        if self.packed is not None and runs_int8(x):
            return list(fast_int8_linear(x, *self.packed).split(self.sizes, dim=-1))
        if self.q4k is not None:
            return list(self.q4k(x).split(self.sizes, dim=-1))
        return [linear(x) for linear in self.linears]


def _stacked(parent: torch.nn.Module, names: tuple[str, ...]) -> Stacked:
    return Stacked([getattr(parent, name) for name in names])


class Unstacked:
    """Stacked's call, one Linear at a time, each looked up on its parent at every call: a
    kernel swapped in later (speed/kernels.py) is the one that runs, as in HF's forward."""

    def __init__(self, parent: torch.nn.Module, names: tuple[str, ...]):
        self.parent, self.names = parent, names

    def parts(self) -> list[torch.nn.Module]:
        """The Linears a call runs now, their outputs side by side."""
        return [getattr(self.parent, name) for name in self.names]

    def __call__(
        self,
        x: torch.Tensor,  # [..., in]
    ) -> list[torch.Tensor]:
        return [getattr(self.parent, name)(x) for name in self.names]


def _stack_int8(linears: list[Int8Linear]) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor | None]:
    """(rows, scales, bias) of the stacked layers; each layer's buffers become views of them."""
    qweight = torch.cat([linear.qweight for linear in linears])
    scales = torch.cat([linear.scales for linear in linears])
    sizes = _sizes(linears)
    for linear, q, s in zip(linears, qweight.split(sizes), scales.split(sizes)):
        linear.qweight, linear.scales = q, s
    return qweight, scales, _stacked_bias(linears, scales.dtype)


def _stack_q4k(linears: list[Q4KLinear]) -> Q4KLinear | None:
    """One Q4KLinear over the layers' stacked blocks (None if their widths differ); each
    layer's buffers become views of its rows."""
    if len({linear.in_features for linear in linears}) != 1:
        return None
    blocks = {name: torch.cat([getattr(linear, name) for linear in linears]) for name in Q4K_BUFFERS}
    for name, tensor in blocks.items():
        for linear, part in zip(linears, tensor.split(_sizes(linears))):
            setattr(linear, name, part)
    return Q4KLinear(blocks, _stacked_bias(linears, torch.float32), linears[0].in_features)


def _sizes(linears) -> list[int]:
    return [linear.out_features for linear in linears]


def _stacked_bias(linears, dtype: torch.dtype) -> torch.Tensor | None:
    """The layers' biases end to end (zeros for a layer without one), or None if none has one."""
    biases = [linear.bias for linear in linears]
    if all(b is None for b in biases):
        return None
    return torch.cat(
        [
            b.detach().to(dtype) if b is not None else torch.zeros(linear.out_features, dtype=dtype)
            for b, linear in zip(biases, linears)
        ]
    )


class LeanDecoder:
    """hidden = LeanDecoder(model)(input_ids [1, n], cache): the decoder's final hidden states
    [1, n, hidden] for n <= max_rows new tokens (None: any number; native layers, `fused`,
    take any number whatever max_rows says) after what the cache holds (which it extends).
    stack=False runs every Linear by itself: the target's way, where stacking would copy a
    gigabyte of mapped weights to save nothing measurable."""

    def __init__(self, model, stack: bool = True, max_rows: int | None = MAX_LEAN_ROWS):
        self.decoder = model.get_decoder()
        self.config = config = model.config
        self.max_rows = max_rows
        self.heads, self.kv_heads = config.num_attention_heads, config.num_key_value_heads
        self.head_dim = getattr(config, "head_dim", None) or config.hidden_size // config.num_attention_heads
        group = _stacked if stack else Unstacked
        self.qkv = [group(layer.self_attn, ("q_proj", "k_proj", "v_proj")) for layer in self.decoder.layers]
        self.gate_up = [group(layer.mlp, ("gate_proj", "up_proj")) for layer in self.decoder.layers]
        self.o = [group(layer.self_attn, ("o_proj",)) for layer in self.decoder.layers]
        self.down = [group(layer.mlp, ("down_proj",)) for layer in self.decoder.layers]
        # layers of specbench's own kernels as native calls (fused_step.py): a q4k drafter's, a q4k or int8 target's
        self.fused = fused_layers(self)

    def __call__(
        self,
        input_ids: torch.Tensor,  # [1, n] ids
        cache,
    ) -> torch.Tensor:
        n = input_ids.shape[1]
        if self.fused is not None:  # native layers: any number of rows, each computed as alone
            return self.fused(input_ids, cache)
        if self.max_rows is not None and n > self.max_rows:
            raise ValueError(f"the lean forward takes at most {self.max_rows} tokens, got {n}")
        past = cache.get_seq_length()
        hidden = self.decoder.embed_tokens(input_ids)
        positions = torch.arange(past, past + n, device=input_ids.device).unsqueeze(0)
        cos, sin = self.decoder.rotary_emb(hidden, positions)
        mask = None if n == 1 or past > 0 else _block_causal_mask(n, past, input_ids.device)
        # config.num_hidden_layers, as HF's decoder reads it (an early-exit drafter lowers it)
        for i, layer in enumerate(self.decoder.layers[: self.config.num_hidden_layers]):
            hidden = hidden + self._attention(i, layer.self_attn, layer.input_layernorm(hidden), cos, sin, mask, cache)
            x = layer.post_attention_layernorm(hidden)
            gate, up = self.gate_up[i](x)
            (down,) = self.down[i](F.silu(gate) * up)
            hidden = hidden + down
        return self.decoder.norm(hidden)

    def _attention(self, i: int, attn, x: torch.Tensor, cos, sin, mask, cache) -> torch.Tensor:
        n = x.shape[1]
        q, k, v = self.qkv[i](x)
        q = q.view(1, n, self.heads, self.head_dim).transpose(1, 2)
        k = k.view(1, n, self.kv_heads, self.head_dim).transpose(1, 2)
        v = v.view(1, n, self.kv_heads, self.head_dim).transpose(1, 2)
        q, k = _rotate(q, k, cos, sin)
        k, v = cache.update(k, v, i)
        gqa = self.kv_heads != self.heads
        past = k.shape[2] - n
        q, k, v = _attention_dtype(q), _attention_dtype(k), _attention_dtype(v)
        if n == 1 or past == 0:
            out = F.scaled_dot_product_attention(q, k, v, attn_mask=mask, scale=attn.scaling, enable_gqa=gqa)
        else:  # row by row over a cache: each row's bits are a one-row step's (core/attention.py)
            rows = [
                F.scaled_dot_product_attention(
                    q[:, :, r : r + 1],
                    k[:, :, : past + r + 1],
                    v[:, :, : past + r + 1],
                    scale=attn.scaling,
                    enable_gqa=gqa,
                )
                for r in range(n)
            ]
            out = torch.cat(rows, dim=2)
        (o,) = self.o[i](out.transpose(1, 2).reshape(1, n, self.heads * self.head_dim).to(x.dtype))
        return o


def _attention_dtype(t: torch.Tensor) -> torch.Tensor:
    """bfloat16 attention inputs as float32 on a CPU, where PyTorch's bfloat16 SDPA is several
    times slower than float32's, conversion included, and grows faster with the cache; on a
    GPU they stay as they are."""
    return t.float() if t.dtype == torch.bfloat16 and t.device.type == "cpu" else t


def _block_causal_mask(n: int, past: int, device) -> torch.Tensor:
    """[n, past + n] bool: new token i sees the cache and new tokens 0..i."""
    return torch.arange(past + n, device=device)[None, :] <= past + torch.arange(n, device=device)[:, None]


def _rotate_half(x: torch.Tensor) -> torch.Tensor:
    half = x.shape[-1] // 2
    return torch.cat((-x[..., half:], x[..., :half]), dim=-1)


def _rotate(
    q: torch.Tensor, k: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor
) -> tuple[torch.Tensor, torch.Tensor]:
    """Rotary position embedding as Qwen2 and Llama apply it (cos, sin: [1, n, head_dim])."""
    cos, sin = cos.unsqueeze(1), sin.unsqueeze(1)
    return q * cos + _rotate_half(q) * sin, k * cos + _rotate_half(k) * sin


# ---------------------------------------------------------------------------- the target


def use_lean_forward(model) -> bool:
    """Route a CPU target's forwards over a cache through LeanForward, where its rows come
    out the same bits alone or in a verify pass: a float32 model of a layout LeanDecoder
    reproduces, with core/attention.py's row-invariant attention (whose rows the lean forward
    attends one at a time just as that does; fused_step.py's native layers do the same).
    False, and the model left as it is, elsewhere."""
    if isinstance(model.__dict__.get("forward"), LeanForward):
        return True
    config = getattr(model, "config", None)
    if not supports(model) or getattr(config, "_attn_implementation", None) != ROWS:
        return False
    if model.dtype != torch.float32 or model_device(model).type != "cpu":
        return False
    model.forward = LeanForward(model, model.forward)
    return True


class LeanForward:
    """A target's forward: a call over a cache (one sequence, every key attended, positions
    that follow the cache) runs the LeanDecoder and the model's head; any other call (a
    prompt's first forward, a batch, a padding mask, attentions asked for) runs the model's
    own forward. Which runs depends only on the call, so every decoding mode gets the same
    bits for a row; the lean one skips HF's mask building and per-layer keyword handling
    (and, for a q4k or int8 target, runs the native layers)."""

    def __init__(self, model, own):
        self.model, self.own = model, own
        self.decoder = LeanDecoder(model, stack=False, max_rows=None)
        self.__signature__ = inspect.signature(own)  # HF's generate reads the forward's parameters
        self.__wrapped__ = own

    def __call__(self, *args, **kwargs):
        call = None if args else lean_call(kwargs)
        if call is None:
            return self.own(*args, **kwargs)
        input_ids, cache, keep = call
        hidden = self.decoder(input_ids, cache)
        logits = self.model.get_output_embeddings()(hidden[:, -keep:] if keep else hidden)
        return CausalLMOutputWithPast(logits=logits, **{_OUTPUT_CACHE: cache})


_OUTPUT_CACHE = (
    "cache" if "cache" in CausalLMOutputWithPast.__dataclass_fields__ else "past_key_values"
)  # renamed in transformers 5.24
_PASSIVE = {
    "return_dict": (None, True),
    "output_attentions": (None, False),
    "output_hidden_states": (None, False),
    "use_cache": (None, True),
}


def lean_call(kwargs: dict) -> tuple[torch.Tensor, object, int] | None:
    """(input_ids, cache, logits_to_keep) of a forward call LeanForward can run, else None."""
    rest = dict(kwargs)
    input_ids = rest.pop("input_ids", None)
    cache, old_name = rest.pop("cache", None), rest.pop("past_key_values", None)
    cache = cache if cache is not None else old_name
    keep, mask = rest.pop("logits_to_keep", 0), rest.pop("attention_mask", None)
    positions, cache_position = rest.pop("position_ids", None), rest.pop("cache_position", None)
    if any(rest.pop(name, None) not in allowed for name, allowed in _PASSIVE.items()) or rest:
        return None
    if not isinstance(input_ids, torch.Tensor) or input_ids.dim() != 2 or input_ids.shape[0] != 1 or cache is None:
        return None
    if not isinstance(keep, int) or keep < 0 or not hasattr(cache, "get_seq_length"):
        return None
    past, n = cache.get_seq_length(), input_ids.shape[1]
    if past == 0:
        return None  # the prompt's first forward: HF's fused attention, as every mode runs it
    if mask is not None and (
        not isinstance(mask, torch.Tensor) or tuple(mask.shape) != (1, past + n) or not bool(mask.all())
    ):
        return None
    expected = torch.arange(past, past + n, device=input_ids.device)
    for given in (positions, cache_position):
        if given is not None and (not isinstance(given, torch.Tensor) or not torch.equal(given.reshape(-1), expected)):
            return None
    return input_ids, cache, keep
