"""Shared test fixtures: tiny models built from a config (no downloads) and a bigram mock.

Two kinds of tiny target/drafter pairs:
- `tiny_pair`: random Qwen2 models of different sizes and seeds; greedy agreement is rare,
  so almost every draft is rejected (exercises the correction path);
- `close_pair`: the drafter is the target with noise added to its weights, so drafts are
  often but not always accepted (exercises partial acceptance and bonus tokens).
"""

from __future__ import annotations

import copy

import pytest
import torch
from transformers import Qwen2Config, Qwen2ForCausalLM

VOCAB = 64

# needs_kernel's names: the speed.native getter of each library, and PyTorch's own int8
# weight-only kernel (nothing to build)
KERNELS = {
    "gemv": ("kernel", "why_not"),
    "linear": ("linear_kernel", "linear_why_not"),
    "q4k": ("q4k_kernel", "q4k_why_not"),
    "q6k": ("q6k_kernel", "q6k_why_not"),
    "layer": ("layer_kernel", "layer_why_not"),
}
TORCH_INT8 = "torch-int8"


def missing_kernel(name: str) -> str | None:
    """None when kernel `name` runs here, else why not (building it the first time)."""
    if name == TORCH_INT8:
        from specbench.speed.quantize import int8_available

        return None if int8_available() else "no int8 weight-only kernel in this torch"
    from specbench.speed import native

    getter, why_not = KERNELS[name]
    return None if getattr(native, getter)() is not None else f"{name}: {getattr(native, why_not)()}"


def pytest_runtest_setup(item):
    """`@pytest.mark.needs_kernel("q4k", "linear")` skips a test unless every kernel named
    runs here (either=True: unless one of them does). Resolved when the test sets up, not
    while pytest collects, so collecting builds no kernel and needs no compiler."""
    for marker in item.iter_markers("needs_kernel"):
        reasons = [why for why in map(missing_kernel, marker.args) if why is not None]
        if reasons and (not marker.kwargs.get("either") or len(reasons) == len(marker.args)):
            pytest.skip(f"specbench's kernels are not built here: {'; '.join(reasons)}")


@pytest.fixture(scope="module")
def single_thread():
    """Tiny models run fastest on one thread: on a shared 2-core machine two spinning
    intra-op threads made the tiny-model test files 6-20x slower. Restored after the module;
    a file opts in with `pytestmark = pytest.mark.usefixtures("single_thread")`."""
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)


def tiny_model(seed: int, layers: int = 2, hidden: int = 32, vocab: int = VOCAB, max_positions: int = 256):
    torch.manual_seed(seed)
    config = Qwen2Config(
        vocab_size=vocab,
        hidden_size=hidden,
        intermediate_size=2 * hidden,
        num_hidden_layers=layers,
        num_attention_heads=4,
        num_key_value_heads=2,
        max_position_embeddings=max_positions,
        eos_token_id=None,
        tie_word_embeddings=False,
    )
    return Qwen2ForCausalLM(config).eval()


def int8_target(seed: int = 0):
    """tiny_model(seed) as an int8 target (`--dtype int8`): every Linear of its 2 layers and
    its head an Int8TargetLinear."""
    from specbench.speed.quantize import quantize_target

    model = tiny_model(seed)
    assert quantize_target(model) == 2 * 7 + 1
    return model


@torch.inference_mode()
def block_and_steps(model, prompt: torch.Tensor, tail: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """The logits of tail ([1, k]) after prompt ([1, n]) fed as one block and as k one-token
    steps over a KV cache: ([k, vocab], [k, vocab]). Greedy parity needs them bit-equal."""
    from specbench.core.cache import cache_arg, new_cache

    cache = new_cache(model)
    model(input_ids=prompt, **cache_arg(model, cache), use_cache=True)
    together = model(input_ids=tail, **cache_arg(model, cache), use_cache=True).logits[0]
    cache = new_cache(model)
    model(input_ids=prompt, **cache_arg(model, cache), use_cache=True)
    steps = [
        model(input_ids=tail[:, i : i + 1], **cache_arg(model, cache), use_cache=True).logits[0, 0]
        for i in range(tail.shape[1])
    ]
    return together, torch.stack(steps)


def as_cpu_target(model):
    """model as load_model leaves a CPU target: row-invariant attention (core/attention.py),
    then the lean forward over a cache (speed/lean_step.py)."""
    from specbench.core.attention import use_row_invariant_attention
    from specbench.speed.lean_step import use_lean_forward

    assert use_row_invariant_attention(model) and use_lean_forward(model)
    return model


def noisy_copy(model, scale: float, seed: int):
    """A copy of model with Gaussian noise (relative to each weight's std) on every weight."""
    clone = copy.deepcopy(model)
    gen = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for param in clone.parameters():
            std = param.float().std() if param.numel() > 1 else torch.tensor(1.0)
            param.add_(torch.randn(param.shape, generator=gen) * std * scale)
    return clone


def sharpened(model, factor: float = 30.0):
    """A copy of model with its output head scaled: the same greedy choices, a peakier
    softmax (a random tiny model's rows are nearly flat, which confidence-driven policies
    would never draft from)."""
    clone = copy.deepcopy(model)
    with torch.no_grad():
        clone.lm_head.weight.mul_(factor)
    return clone


# the stop policies' thresholds near the medians of close_pair's drafter, sharpened by 30:
# its h (0.42) and top q (0.48), so that they both stop and run on
SHARPENED_THRESHOLDS = {"entropy-stop": 0.42, "confidence-stop": 0.48}


@pytest.fixture(scope="session")
def tiny_pair():
    return tiny_model(0, layers=2, hidden=32), tiny_model(1, layers=1, hidden=16)


@pytest.fixture(scope="session")
def close_pair():
    target = tiny_model(0, layers=2, hidden=32)
    return target, noisy_copy(target, scale=0.2, seed=7)


PROMPTS = [[1, 5, 9, 12, 3], [7], [2, 2, 2, 2, 2, 2, 2, 2], [40, 13, 61, 0, 8, 8, 19]]


def accepted_with_greedy_parity(target, drafter, gamma: int, max_new_tokens: int = 40) -> int:
    """Run fixed-gamma speculative decoding with a model drafter on every prompt of PROMPTS,
    assert each output equals the target's plain greedy decoding, return the drafts accepted."""
    from specbench.core.generate import GenerationConfig, plain_generate, speculative_generate
    from specbench.drafters import ModelDrafter
    from specbench.policies import FixedGamma

    config = GenerationConfig(max_new_tokens=max_new_tokens)
    accepted = 0
    for prompt in PROMPTS:
        result = speculative_generate(target, ModelDrafter(drafter), prompt, config, FixedGamma(gamma))
        assert result.token_ids == plain_generate(target, prompt, config).token_ids
        accepted += result.stats.accepted
    return accepted
