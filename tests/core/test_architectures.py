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
DECODER = dict(vocab_size=V, hidden_size=H, intermediate_size=2 * H, num_hidden_layers=2, num_attention_heads=4, max_position_embeddings=256)
WINDOW = 6  # shorter than every prompt plus its output: the window fills in each run

CONFIGS = {
    "gpt2": lambda: T.GPT2Config(vocab_size=V, n_positions=256, n_embd=H, n_layer=2, n_head=4),
    "mistral-window": lambda: T.MistralConfig(num_key_value_heads=2, sliding_window=WINDOW, **DECODER),
    "qwen2-mixed-window": lambda: T.Qwen2Config(
        num_key_value_heads=2, use_sliding_window=True, sliding_window=WINDOW, layer_types=["sliding_attention", "full_attention"], **DECODER
    ),
    "gemma2-window": lambda: T.Gemma2Config(num_key_value_heads=2, head_dim=8, sliding_window=WINDOW, **DECODER),
    "gemma3-window": lambda: T.Gemma3TextConfig(num_key_value_heads=2, head_dim=8, sliding_window=WINDOW, **DECODER),
    "qwen3": lambda: T.Qwen3Config(num_key_value_heads=2, head_dim=8, **DECODER),
    "phi3": lambda: T.Phi3Config(num_key_value_heads=2, pad_token_id=0, **DECODER),
    "gpt_neox": lambda: T.GPTNeoXConfig(**DECODER),
    "opt": lambda: T.OPTConfig(vocab_size=V, hidden_size=H, ffn_dim=2 * H, num_hidden_layers=2, num_attention_heads=4, word_embed_proj_dim=H),
    "falcon": lambda: T.FalconConfig(vocab_size=V, hidden_size=H, num_hidden_layers=2, num_attention_heads=4, tie_word_embeddings=False),  # tied, it repeats its input
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
    sampled = speculative_generate(target, ModelDrafter(drafter), PROMPTS[0], GenerationConfig(24, SamplingConfig(temperature=1.0), seed=1), FixedGamma(4))
    assert sampled.stats.new_tokens == 24
