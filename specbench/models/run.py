"""Setting up and running one generation on a loaded pair.

This module builds the generation settings and the gamma policy from the user's values (a
bad value is an OptionError here, so callers catch one kind of error), and runs a generation
with the right engine: speculative with the pair's drafter, or plain when it has none. It
prints nothing: tokens and rounds go to callbacks.
"""

from __future__ import annotations

from collections.abc import Callable

from specbench.core.generate import GenerationConfig, GenerationResult, plain_generate, speculative_generate
from specbench.core.sampling import SamplingConfig
from specbench.core.stats import StepRecord
from specbench.errors import OptionError, reraise_as
from specbench.models.loading import LoadedPair
from specbench.models.text import check_prompt_fits
from specbench.policies import GammaPolicy, make_policy


def generation_config(
    *, max_new_tokens: int, temperature: float = 0.0, top_k: int = 0, top_p: float = 1.0, seed: int = 0
) -> GenerationConfig:
    """core's GenerationConfig; an out-of-range value raises OptionError."""
    with reraise_as(OptionError):
        sampling = SamplingConfig(temperature=temperature, top_k=top_k, top_p=top_p)
        return GenerationConfig(max_new_tokens=max_new_tokens, sampling=sampling, seed=seed)


def gamma_policy(name: str, gamma: int, *, costs=None, **knobs) -> GammaPolicy:
    """policies.make_policy (knobs: gamma_min, gamma_max, egag_beta, threshold); a bad name or
    value raises OptionError."""
    with reraise_as(OptionError):
        return make_policy(name, gamma, costs=costs, **knobs)


# A syntactically complete costs object, so that "cost" policy options are checked before the
# models load; the real costs are measured (or read from the cache) once the pair is loaded.
_STAND_IN_COSTS = type("StandInCosts", (), {"c": 0.1, "verify_cost": {1: 1.0, 2: 1.0}})()


def check_policy(name: str, gamma: int, **knobs) -> None:
    """gamma_policy's checks without measured costs (OptionError), before anything loads."""
    gamma_policy(name, gamma, costs=_STAND_IN_COSTS if name == "cost" else None, **knobs)


def run_generation(
    pair: LoadedPair,
    prompt_ids: list[int],
    config: GenerationConfig,
    policy: GammaPolicy | None,
    *,
    on_tokens: Callable[[list[int]], None] | None = None,
    on_step: Callable[[StepRecord], None] | None = None,
) -> GenerationResult:
    """One generation: speculative with the pair's drafter, or plain when the drafter is "none".

    on_tokens gets the tokens appended to the output as they are accepted; on_step gets each
    StepRecord (speculative only). A prompt that does not fit raises PromptError.
    """
    check_prompt_fits(prompt_ids, pair.context_limit)
    decode = pair.tokenizer.decode if pair.tokenizer is not None else None
    drafter = pair.new_drafter()
    if drafter is None:
        on_token = (lambda token: on_tokens([token])) if on_tokens else None
        return plain_generate(pair.target.model, prompt_ids, config, decode=decode, on_token=on_token)

    def step(record: StepRecord) -> None:
        if on_step is not None:
            on_step(record)
        if on_tokens is not None:
            on_tokens(record.tokens)

    return speculative_generate(pair.target.model, drafter, prompt_ids, config, policy, decode=decode, on_step=step)
