"""The real shapes of the Qwen2.5 models the maintainer scripts build with random weights:
one table for the scale benchmark (scale_models.py) and the GPU check (gpu_check.py)."""

from __future__ import annotations

from dataclasses import asdict, dataclass


@dataclass(frozen=True)
class Shape:
    """What a Qwen2 GGUF's metadata and tensor shapes say of a model (config.json's names)."""

    name: str  # size label, e.g. "7b"
    hidden_size: int
    intermediate_size: int
    num_hidden_layers: int
    num_attention_heads: int
    num_key_value_heads: int
    tie_word_embeddings: bool
    rope_theta: float = 1_000_000.0
    rms_norm_eps: float = 1e-6
    max_position_embeddings: int = 32768

    @property
    def kv_width(self) -> int:
        return self.hidden_size // self.num_attention_heads * self.num_key_value_heads

    def config(self) -> dict:
        """The shape's config.json fields (the vocabulary apart)."""
        return {k: v for k, v in asdict(self).items() if k != "name"}


# Qwen2.5-{0.5B,1.5B,3B,7B,14B}(-Instruct)'s config.json (vocabulary apart)
SHAPES = {
    s.name: s
    for s in (
        Shape("0.5b", 896, 4864, 24, 14, 2, tie_word_embeddings=True),
        Shape("1.5b", 1536, 8960, 28, 12, 2, tie_word_embeddings=True),
        Shape("3b", 2048, 11008, 36, 16, 2, tie_word_embeddings=True),
        Shape("7b", 3584, 18944, 28, 28, 4, tie_word_embeddings=False),
        Shape("14b", 5120, 13824, 48, 40, 8, tie_word_embeddings=False),
        Shape("tiny", 256, 512, 2, 4, 2, tie_word_embeddings=False),  # for dry runs of dev/scale.py
    )
}
