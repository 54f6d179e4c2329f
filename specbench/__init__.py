"""specbench: speculative decoding you can watch and measure.

The public API, imported on first use (so that `import specbench` and `specbench --help` stay
fast; torch and transformers load only when a name that needs them is touched):

    from specbench import load_pair, PairConfig, GenerationConfig, speculative_generate
    pair = load_pair(PairConfig())                      # the embedded default pair
    ids = encode_prompt(pair.tokenizer, "Write a haiku about caches")
    result = speculative_generate(pair.target.model, pair.new_drafter(), ids,
                                  GenerationConfig(max_new_tokens=64), make_policy("fixed", 4))

    load_pair, PairConfig       models/loading.py: load a target and a drafter, check the pair
    encode_prompt               models/text.py: a prompt (or chat messages) to ids, chat template included
    speculative_generate        core/generate.py: the lossless loop
    plain_generate              core/generate.py: the baseline, one target forward per token
    GenerationConfig            core/generate.py; SamplingConfig: core/sampling.py
    make_drafter, make_policy   drafters/, policies/: by name, as the CLI builds them
    SpecbenchError              errors.py: every user error
"""

from __future__ import annotations

import importlib

__version__ = "0.1.0"

_API = {
    "load_pair": "specbench.models.loading",
    "PairConfig": "specbench.models.loading",
    "encode_prompt": "specbench.models.text",
    "speculative_generate": "specbench.core.generate",
    "plain_generate": "specbench.core.generate",
    "GenerationConfig": "specbench.core.generate",
    "SamplingConfig": "specbench.core.sampling",
    "make_drafter": "specbench.drafters",
    "make_policy": "specbench.policies",
    "SpecbenchError": "specbench.errors",
}

__all__ = ["__version__", *_API]


def __getattr__(name: str):
    if name in _API:
        return getattr(importlib.import_module(_API[name]), name)
    raise AttributeError(f"module 'specbench' has no attribute {name!r}")
