"""The cost policy's costs for a loaded pair: read from the cache folder, or measured once.

`generate --gamma-policy cost` needs c and v(k) before its first round; measuring them takes
seconds, so they are kept in the cache folder under a key that names everything a forward's
cost depends on: both models (a local file by where it is and what it holds, not by its name
alone), their dtypes, the draft vocabulary, the device, the kernels, torch's thread count, the
sampling settings, the versions of the step's Python (kernels.VERSION) and of the costs method,
and a digest of the native kernels' C text (an edit that leaves every bit as it was can still
change a forward's cost). The CLI only shows the result.
"""

from __future__ import annotations

import torch

from specbench import paths
from specbench.bench.costs import METHOD, Costs, costs_for, for_drafter, shared_limit, timing_context
from specbench.models.pairing import timing_ids
from specbench.speed import native
from specbench.speed.kernels import VERSION
from specbench.speed.twins import twins_label


def model_key(loaded) -> str:
    """A model's part of a cache key: its name, and for a local folder or file also where
    it is and what it holds (ModelSpec.identity): two files of one name are two models."""
    identity = loaded.spec.identity()
    return loaded.name if identity is None else f"{loaded.name}@{identity}"


def cost_key(pair, pair_config, kernels: str, sampling) -> str:
    """The cache key of a pair's costs under these settings."""
    drafter = model_key(pair.drafter_model) if pair.drafter_model is not None else pair.drafter_name
    twins = twins_label(pair.drafter_model.model) if pair.drafter_model is not None else ""
    return "|".join(
        (
            model_key(pair.target),
            pair_config.dtype,
            drafter,
            pair_config.draft_dtype + (f"+{twins}" if twins else ""),  # long forwards cost otherwise
            f"march={native.march()}",
            f"vocab={pair.draft_vocab}",
            pair_config.device,
            f"{kernels}.v{VERSION}.c{native.sources_digest()}",
            f"threads={torch.get_num_threads()}",
            f"t={sampling.temperature:g},k={sampling.top_k},p={sampling.top_p:g}",
            f"costs.v{METHOD}",
        )
    )


def pair_costs(
    pair, pair_config, kernels: str, prompt_ids: list[int], max_new_tokens: int, sampling
) -> tuple[Costs, bool]:
    """c and v(k) for the cost policy with the run's sampling settings (costs.py times the
    work on the logits too), timed on the run's own context, and whether they came from the
    cache. A drafter model's c is then the one it prices with; early exit keeps its measured c."""
    drafting_model = pair.drafting_model
    context = timing_ids(
        timing_context(prompt_ids, max_new_tokens, shared_limit(pair.target.model, drafting_model)),
        pair.target.model,
        drafting_model,
    )
    costs, cached = costs_for(
        pair.target.model,
        drafting_model,
        cost_key(pair, pair_config, kernels, sampling),
        context,
        paths.costs_dir(),
        draft_vocab=pair.draft_vocab,
        sampling=sampling,
    )
    if pair.drafter_model is not None or drafting_model is None:
        costs = for_drafter(costs, pair.drafter_name)
    return costs, cached
