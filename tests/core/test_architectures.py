"""Greedy parity on architectures the rest of the suite never builds.

The other tests use tiny Qwen2 and Llama models; specbench takes any causal LM transformers
loads. Each model here is built from its config (tiny, random); the drafter is a noisy copy,
so rounds both accept and reject. Sliding-window models (Mistral, Gemma 2 and 3, Qwen2 with
a window on some layers) are the case that broke: their cache layers forget what leaves the
window unless they record it, and every rejected round crops both caches after it filled.
"""

import pytest
import torch
import transformers as T
from conftest import PROMPTS, noisy_copy

from specbench.core.generate import GenerationConfig, plain_generate, speculative_generate
from specbench.core.sampling import SamplingConfig
from specbench.drafters import ModelDrafter
from specbench.policies import FixedGamma

V, H = 64, 32
DECODER = dict(
    vocab_size=V,
    hidden_size=H,
    intermediate_size=2 * H,
    num_hidden_layers=2,
    num_attention_heads=4,
    max_position_embeddings=256,
)
WINDOW = 6  # shorter than every prompt plus its output: the window fills in each run

CONFIGS = {
    "gpt2": lambda: T.GPT2Config(vocab_size=V, n_positions=256, n_embd=H, n_layer=2, n_head=4),
    "mistral-window": lambda: T.MistralConfig(num_key_value_heads=2, sliding_window=WINDOW, **DECODER),
    "qwen2-mixed-window": lambda: T.Qwen2Config(
        num_key_value_heads=2,
        use_sliding_window=True,
        sliding_window=WINDOW,
        layer_types=["sliding_attention", "full_attention"],
        **DECODER,
    ),
    "gemma2-window": lambda: T.Gemma2Config(num_key_value_heads=2, head_dim=8, sliding_window=WINDOW, **DECODER),
    "gemma3-window": lambda: T.Gemma3TextConfig(num_key_value_heads=2, head_dim=8, sliding_window=WINDOW, **DECODER),
    "qwen3": lambda: T.Qwen3Config(num_key_value_heads=2, head_dim=8, **DECODER),
    "phi3": lambda: T.Phi3Config(num_key_value_heads=2, pad_token_id=0, **DECODER),
    "gpt_neox": lambda: T.GPTNeoXConfig(**DECODER),
    "opt": lambda: T.OPTConfig(
        vocab_size=V, hidden_size=H, ffn_dim=2 * H, num_hidden_layers=2, num_attention_heads=4, word_embed_proj_dim=H
    ),
    "falcon": lambda: T.FalconConfig(
        vocab_size=V, hidden_size=H, num_hidden_layers=2, num_attention_heads=4, tie_word_embeddings=False
    ),  # tied, it repeats its input
}


def build(name: str):
    torch.manual_seed(0)
    target = T.AutoModelForCausalLM.from_config(CONFIGS[name]()).eval()
    return target, noisy_copy(target, 0.2, seed=7)


@pytest.mark.parametrize("name", list(CONFIGS))
def test_greedy_parity_and_sampling_on_other_architectures(name):
    target, drafter = build(name)
    config = GenerationConfig(max_new_tokens=24)
    drafted = accepted = 0
    for prompt in PROMPTS:
        expected = plain_generate(target, prompt, config).token_ids
        with torch.no_grad():  # plain decoding checked against one forward over the whole text, no cache
            logits = target(torch.tensor([prompt + expected]), use_cache=False).logits[0]
        assert logits[len(prompt) - 1 : -1].argmax(-1).tolist() == expected, prompt
        for gamma in (1, 4, 8):
            result = speculative_generate(target, ModelDrafter(drafter), prompt, config, FixedGamma(gamma))
            assert result.token_ids == expected, (prompt, gamma)
            drafted, accepted = drafted + result.stats.drafted, accepted + result.stats.accepted
    assert 0 < accepted < drafted  # rounds both kept and rolled back drafts
    sampled = speculative_generate(
        target,
        ModelDrafter(drafter),
        PROMPTS[0],
        GenerationConfig(24, SamplingConfig(temperature=1.0), seed=1),
        FixedGamma(4),
    )
    assert sampled.stats.new_tokens == 24


LONGROPE_AT = 16  # Phi-3's original_max_position_embeddings: every run below crosses it


def longrope_phi3():
    """A tiny Phi-3 with "longrope" frequencies (short below LONGROPE_AT, long from it), its
    attention sharpened so that the rotation shows in its argmax."""
    half = H // 4 // 2  # head_dim 8
    rope = {
        "rope_type": "longrope",
        "short_factor": [1.0] * half,
        "long_factor": [4.0] * half,
        "original_max_position_embeddings": LONGROPE_AT,
    }
    torch.manual_seed(0)
    config = T.Phi3Config(
        num_key_value_heads=2,
        pad_token_id=0,
        eos_token_id=None,
        original_max_position_embeddings=LONGROPE_AT,
        rope_scaling=rope,
        **DECODER,
    )
    target = T.AutoModelForCausalLM.from_config(config).eval()
    with torch.no_grad():
        for name, param in target.named_parameters():
            if "qkv_proj" in name:
                param.mul_(5.0)
            if "embed_tokens" in name:
                param.mul_(10.0)
    return target


def test_no_verify_pass_crosses_a_longrope_switch():
    """transformers picks a longrope model's frequencies from the largest position in each
    forward: a verify pass over positions on both sides of the switch would rotate its
    earlier rows unlike the one-token steps of plain decoding. The loop bounds gamma so
    that none does (core.generate.rope_boundary), and greedy output stays plain's."""
    from specbench.core.cache import cache_length
    from specbench.core.generate import rope_boundary

    target = longrope_phi3()
    assert rope_boundary(target) == LONGROPE_AT
    drafter = noisy_copy(target, 0.05, seed=7)
    spans = []  # (cache length, new tokens) of every target forward
    record = lambda _m, _a, kw: spans.append(
        (cache_length(kw.get("past_key_values", kw.get("cache"))), kw["input_ids"].shape[1])
    )
    target.register_forward_pre_hook(record, with_kwargs=True)
    config = GenerationConfig(max_new_tokens=30)
    for prompt in PROMPTS:
        expected = plain_generate(target, prompt, config).token_ids
        for gamma in (4, 8):
            spans.clear()
            result = speculative_generate(target, ModelDrafter(drafter), prompt, config, FixedGamma(gamma))
            assert result.token_ids == expected, (prompt, gamma)
            crossing = [(start, n) for start, n in spans if start < LONGROPE_AT <= start + n - 1]
            assert not crossing, (prompt, gamma, crossing)
            assert result.stats.accepted > 0


def test_a_drafter_with_a_shorter_context_stops_drafting_at_its_end():
    """A drafter that attends over fewer positions than the target (GPT-2's learned
    positions end there) drafts while its context lasts, then the loop goes on without its
    drafts, to plain decoding's output."""
    torch.manual_seed(0)
    target = T.AutoModelForCausalLM.from_config(CONFIGS["gpt2"]()).eval()
    drafter = noisy_copy(target, 0.1, seed=7)
    drafter.config.n_positions = drafter.config.max_position_embeddings = (
        20  # its position table is longer: only the limit is read
    )
    config = GenerationConfig(max_new_tokens=40)
    for prompt in PROMPTS + [list(range(1, 25))]:  # the last is longer than the drafter's context
        expected = plain_generate(target, prompt, config).token_ids
        for gamma in (1, 4, 8):
            result = speculative_generate(target, ModelDrafter(drafter), prompt, config, FixedGamma(gamma))
            assert result.token_ids == expected, (prompt, gamma)
            last_draft = max(
                (s.position + len(prompt) + len(s.draft_tokens) - 1 for s in result.steps if s.draft_tokens), default=0
            )
            assert last_draft <= 20  # draft j of a round at position p is read at len(prompt) + p + j - 1
            assert (result.stats.drafted > 0) == (len(prompt) <= 20)
