"""Tiny Hugging Face model folders for tests: a random Qwen2 plus a character tokenizer.

Everything is built in the test process (no downloads): the tokenizer with the `tokenizers`
library (one token per character, ChatML-like special tokens and a chat template), the model
from a config, both written with save_pretrained so that specbench loads them exactly as it
loads a user's folder.
"""

from __future__ import annotations

from pathlib import Path

import torch
from tokenizers import Tokenizer, decoders, models, pre_tokenizers
from transformers import PreTrainedTokenizerFast

from conftest import noisy_copy, tiny_model

SPECIALS = ("<unk>", "<|im_start|>", "<|im_end|>")
CHARS = "abcdefghijklmnopqrstuvwxyz0123456789 .,:;!?'\"()[]{}=+-*/_\n#<>"
EOS = "<|im_end|>"
CHAT_TEMPLATE = (
    "{% for m in messages %}<|im_start|>{{ m['role'] }}:{{ m['content'] }}<|im_end|>{% endfor %}"
    "{% if add_generation_prompt %}<|im_start|>assistant:{% endif %}"
)


def _byte_level(char: str) -> str:
    """The GPT-2 byte-level spelling of a character (space -> 'Ġ', newline -> 'Ċ')."""
    printable = [*range(ord("!"), ord("~") + 1), *range(ord("¡"), ord("¬") + 1), *range(ord("®"), ord("ÿ") + 1)]
    table, extra = {}, 0
    for byte in range(256):
        if byte in printable:
            table[byte] = chr(byte)
        else:
            table[byte] = chr(256 + extra)
            extra += 1
    return "".join(table[b] for b in char.encode())


def char_vocab(chars: str = CHARS, swap: tuple[str, str] | None = None) -> dict[str, int]:
    """Special tokens first, then one id per character; `swap` exchanges two tokens' ids."""
    tokens = list(SPECIALS) + [_byte_level(c) for c in chars]
    if swap is not None:
        i, j = tokens.index(_byte_level(swap[0])), tokens.index(_byte_level(swap[1]))
        tokens[i], tokens[j] = tokens[j], tokens[i]
    return {token: i for i, token in enumerate(tokens)}


def char_tokenizer(vocab: dict[str, int] | None = None, chat_template: str | None = CHAT_TEMPLATE, eos: str = EOS) -> PreTrainedTokenizerFast:
    """A byte-level BPE with no merges (one token per character): the shape of Qwen2's
    tokenizer, so transformers' Qwen2Tokenizer rebuilds it faithfully from tokenizer.json."""
    vocab = vocab or char_vocab()
    backend = Tokenizer(models.BPE(vocab, [], unk_token=None))
    backend.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    backend.decoder = decoders.ByteLevel()
    backend.add_special_tokens([t for t in SPECIALS if t in vocab])
    tokenizer = PreTrainedTokenizerFast(tokenizer_object=backend, unk_token="<unk>", eos_token=eos, pad_token="<unk>")
    if chat_template:
        tokenizer.chat_template = chat_template
    return tokenizer


def save_tiny(
    folder: Path,
    *,
    seed: int = 0,
    layers: int = 2,
    hidden: int = 32,
    vocab_size: int = 64,
    max_positions: int = 256,
    like=None,
    noise: float = 0.0,
    tokenizer: PreTrainedTokenizerFast | None | bool = True,
) -> Path:
    """Write a tiny Qwen2 (a noisy copy of `like` if given) and a tokenizer into `folder`.

    tokenizer: True for the default character tokenizer, False for none, or one to save.
    """
    model = noisy_copy(like, noise, seed) if like is not None else tiny_model(seed, layers, hidden, vocab_size, max_positions)
    tok = char_tokenizer() if tokenizer is True else tokenizer or None
    eos_id = tok.convert_tokens_to_ids(EOS) if tok is not None else None
    model.config.eos_token_id = eos_id
    model.generation_config.eos_token_id = eos_id
    folder.mkdir(parents=True, exist_ok=True)
    model.save_pretrained(folder)
    if tok is not None:
        tok.save_pretrained(folder)
    return folder


def load_tiny(folder: Path):
    from transformers import AutoModelForCausalLM

    return AutoModelForCausalLM.from_pretrained(folder, dtype=torch.float32).eval()
