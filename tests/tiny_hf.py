"""Tiny Hugging Face model folders for tests: a random Qwen2 plus a character tokenizer.

Everything is built in the test process (no downloads): the tokenizer with the `tokenizers`
library (one token per character, ChatML-like special tokens and a chat template), the model
from a config, both written with save_pretrained so that specbench loads them exactly as it
loads a user's folder.
"""

from __future__ import annotations

from contextlib import contextmanager
from pathlib import Path

import torch
from conftest import noisy_copy, tiny_model
from tokenizers import Tokenizer, decoders, models, pre_tokenizers
from transformers import PreTrainedTokenizerFast

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


def char_tokenizer(
    vocab: dict[str, int] | None = None, chat_template: str | None = CHAT_TEMPLATE, eos: str = EOS
) -> PreTrainedTokenizerFast:
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


@contextmanager
def one_thread():
    """Run tiny models on one thread: their matmuls are too small to share, and on a busy
    2-core machine two spinning OpenMP threads made these tests ~15x slower."""
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        yield
    finally:
        torch.set_num_threads(before)


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
    model = (
        noisy_copy(like, noise, seed)
        if like is not None
        else tiny_model(seed, layers, hidden, vocab_size, max_positions)
    )
    tok = char_tokenizer() if tokenizer is True else tokenizer or None
    eos_id = tok.eos_token_id if tok is not None else char_vocab()[EOS]
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


def write_tiny_gguf(
    path: Path, model=None, vocab: dict[str, int] | None = None, raw: dict | None = None, skip: tuple[str, ...] = ()
) -> Path:
    """Write `model` (default: tiny_model(0)) and the character vocabulary as a float32 GGUF;
    `raw`: GGUF tensor name -> (its ggml type, Q4_K or Q6_K, and its bytes) written for that
    tensor instead; `skip`: GGUF tensor names left out ("output.weight": a tied head, as
    llama.cpp writes one).

    The same layout llama.cpp gives Qwen2 (architecture "qwen2", a byte-level "gpt2"
    tokenizer), so transformers loads it through the very path the embedded pair takes.
    Qwen2Tokenizer adds an "<|endoftext|>" token of its own on load.
    """
    import gguf

    model = model if model is not None else tiny_model(0)
    vocab = vocab or char_vocab()
    config = model.config
    tokens = sorted(vocab, key=vocab.get)
    writer = gguf.GGUFWriter(str(path), "qwen2")
    writer.add_name("tiny")
    writer.add_block_count(config.num_hidden_layers)
    writer.add_context_length(config.max_position_embeddings)
    writer.add_embedding_length(config.hidden_size)
    writer.add_feed_forward_length(config.intermediate_size)
    writer.add_head_count(config.num_attention_heads)
    writer.add_head_count_kv(config.num_key_value_heads)
    writer.add_rope_freq_base(float(config.rope_parameters["rope_theta"]))
    writer.add_layer_norm_rms_eps(config.rms_norm_eps)
    writer.add_file_type(gguf.LlamaFileType.ALL_F32)
    writer.add_tokenizer_model("gpt2")
    writer.add_tokenizer_pre("qwen2")
    writer.add_token_list(tokens)
    writer.add_token_types([gguf.TokenType.CONTROL if t in SPECIALS else gguf.TokenType.NORMAL for t in tokens])
    writer.add_token_merges([])
    writer.add_token_scores([0.0] * len(tokens))  # with no merges, transformers wants scores
    writer.add_eos_token_id(vocab[EOS])
    writer.add_bos_token_id(vocab["<|im_start|>"])
    writer.add_pad_token_id(vocab["<unk>"])
    writer.add_add_bos_token(False)
    writer.add_chat_template(CHAT_TEMPLATE)
    names = gguf.get_tensor_name_map(gguf.MODEL_ARCH.QWEN2, config.num_hidden_layers)
    for name, tensor in model.state_dict().items():
        base, suffix = name.rsplit(".", 1)
        gguf_name = f"{names.get_name(base)}.{suffix}"
        if gguf_name in skip:
            continue
        if raw is not None and gguf_name in raw:
            kind, data = raw[gguf_name]
            writer.add_tensor(gguf_name, data, raw_dtype=kind)
        else:
            writer.add_tensor(gguf_name, tensor.float().numpy())
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    return path


# pieces of a tokenizer with multi-character merges (byte-level spelling: "Ġ" is a space)
MERGES = (
    ("t", "h"),
    ("th", "e"),
    ("Ġ", "the"),
    ("Ġ", "t"),
    ("Ġ", "a"),
    ("a", "n"),
    ("an", "d"),
    ("Ġ", "an"),
    ("e", "r"),
    ("i", "n"),
    ("in", "g"),
    ("o", "n"),
    ("r", "e"),
    ("Ġ", "s"),
    ("e", "s"),
    ("o", "r"),
    ("a", "t"),
    ("Ġ", "c"),
    ("Ġ", "o"),
    ("Ġ", "f"),
    ("Ġ", "w"),
    ("e", "n"),
    ("a", "r"),
    ("Ġ", "i"),
    ("l", "l"),
    ("s", "t"),
)


def merge_tokenizer(chars: str = CHARS, merges=MERGES, *, reverse: bool = False) -> PreTrainedTokenizerFast:
    """A byte-level BPE whose merges join characters into multi-character pieces ("the",
    " the", "ing", "and"...), so it splits words differently from char_tokenizer; the
    characters' ids come in reverse order with `reverse`, so no id means what it means there."""
    tokens = list(SPECIALS) + [_byte_level(c) for c in (reversed(chars) if reverse else chars)]
    tokens += [a + b for a, b in merges]
    vocab = {token: i for i, token in enumerate(tokens)}
    backend = Tokenizer(models.BPE(vocab, list(merges), unk_token=None))
    backend.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    backend.decoder = decoders.ByteLevel()
    backend.add_special_tokens(list(SPECIALS))
    tokenizer = PreTrainedTokenizerFast(tokenizer_object=backend, unk_token="<unk>", eos_token=EOS, pad_token="<unk>")
    tokenizer.chat_template = CHAT_TEMPLATE
    return tokenizer
