"""A trigram language model behind the Hugging Face causal-LM call signature.

Its next-token logits depend on the last TWO tokens, and it keeps the earlier one in a real
DynamicCache (as a fake key), so a cache that is not rolled back correctly changes what it
predicts. Exact sequence distributions are cheap to compute, which makes it the model for
the statistical losslessness tests. A forward costs microseconds, not milliseconds.
"""

from __future__ import annotations

from types import SimpleNamespace

import torch
from transformers import PretrainedConfig

BOS = 0  # the "previous token" before the first one


class TrigramLM(torch.nn.Module):
    def __init__(self, table: torch.Tensor, max_positions: int = 1024):
        super().__init__()
        vocab = table.shape[-1]
        assert table.shape == (vocab, vocab, vocab)
        self.table = torch.nn.Parameter(table.float(), requires_grad=False)  # [prev, cur] -> logits
        self.config = PretrainedConfig(max_position_embeddings=max_positions, vocab_size=vocab, num_hidden_layers=1)

    def forward(self, input_ids, past_key_values, use_cache=True, logits_to_keep=0, **kwargs):
        ids = input_ids[0]  # [s]
        if past_key_values.get_seq_length():
            before = past_key_values.layers[0].keys[0, 0, -1:, 0].long()
        else:
            before = torch.tensor([BOS])
        fake_kv = ids.float().view(1, 1, -1, 1)
        past_key_values.update(fake_kv, fake_kv, 0)
        prev = torch.cat([before, ids[:-1]])  # [s]
        logits = self.table[prev, ids]  # [s, vocab]
        if logits_to_keep:
            logits = logits[-logits_to_keep:]
        return SimpleNamespace(logits=logits.unsqueeze(0))

    def next_logits(self, prev: int, cur: int) -> torch.Tensor:
        return self.table[prev, cur]


def random_trigram(vocab: int, seed: int, sharpness: float = 2.0) -> TrigramLM:
    gen = torch.Generator().manual_seed(seed)
    return TrigramLM(torch.randn(vocab, vocab, vocab, generator=gen) * sharpness)


def noisy_trigram(model: TrigramLM, scale: float, seed: int) -> TrigramLM:
    """A drafter that mostly agrees with `model`: its table plus Gaussian noise."""
    gen = torch.Generator().manual_seed(seed)
    table = model.table.detach()
    return TrigramLM(table + torch.randn(table.shape, generator=gen) * scale)


class ScriptedLM(torch.nn.Module):
    """A drafter that knows the text to come, for tests of drafters that translate text.

    After the text that its cache plus its input decode to, it predicts (one-hot logits) the
    tokenizer's first id of the rest of `script`; at every `wrong_every`-th character
    position it predicts another id on purpose (a rejection to recover from). Once its text
    has left the script, which is what a drafter cache that failed to realign would hold, it
    predicts `off_script` forever, so acceptance collapses. Ids live in a DynamicCache (as
    fake keys), so cropping that cache is what realigns it.
    """

    def __init__(self, tokenizer, script: str, vocab: int, wrong_every: int = 5, off_script: int = 0):
        super().__init__()
        self.anchor = torch.nn.Parameter(torch.zeros(1), requires_grad=False)  # a device to report
        self.tokenizer, self.script, self.vocab = tokenizer, script, vocab
        self.wrong_every, self.off_script = wrong_every, off_script
        self.config = PretrainedConfig(max_position_embeddings=4096, vocab_size=vocab, num_hidden_layers=1)

    def forward(self, input_ids, past_key_values, use_cache=True, logits_to_keep=0, **kwargs):
        ids = input_ids[0]
        fake_kv = ids.float().view(1, 1, -1, 1)
        past_key_values.update(fake_kv, fake_kv, 0)
        seq = past_key_values.layers[0].keys[0, 0, :, 0].long().tolist()
        first = len(seq) - ids.shape[0]
        logits = torch.stack([self._row(seq[: j + 1]) for j in range(first, len(seq))])  # [s, vocab]
        if logits_to_keep:
            logits = logits[-logits_to_keep:]
        return SimpleNamespace(logits=logits.unsqueeze(0))

    def _row(self, prefix: list[int]) -> torch.Tensor:
        text = self.tokenizer.decode(prefix, skip_special_tokens=False, clean_up_tokenization_spaces=False)
        token = self.off_script
        if self.script.startswith(text) and len(text) < len(self.script):
            token = self.tokenizer.encode(self.script[len(text) :], add_special_tokens=False)[0]
            if len(text) % self.wrong_every == self.wrong_every - 1:
                token = (token + 1) % self.vocab
        row = torch.full((self.vocab,), -10.0)
        row[token] = 10.0
        return row
