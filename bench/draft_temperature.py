"""How often a model drafter's drafts survive, as a function of the temperature it drafts at.

Rejection sampling is lossless for any q the draft was really drawn from, so the drafter may
sample at its own temperature Td while the target samples at T. A draft at a position then
survives with probability alpha = sum_x min(p(x), q(x)) = 1 - TV(p, q), where p is the target's
row at T and q the drafter's at Td (same top-k / top-p). A small drafter is often flatter
than its target; drafting cooler may bring q closer to p.

No timing, so no noise from the machine:
  1. per prompt, sample a reply from the target at --temperature (plain decoding, seed 0);
  2. feed prompt + reply once through each model (teacher forcing) and keep the logits at
     the reply's positions;
  3. for each Td, alpha at every position, and the expected tokens per round of a fixed
     gamma when drafting starts at that position: sum_{j=0..gamma} prod_{i<j} alpha_(t+i)
     (Leviathan et al.'s E[tokens] with the position's own alphas instead of one mean).
The drafter scores the ids it scores in specbench: below --draft-vocab, plus the prompt's,
the reply's and EOS (the subset the drafter's head has gained by then; 0: every id).

    python bench/draft_temperature.py [--prompts quick] [--temperature 0.7] [--draft-temps 0.4,0.5,0.6,0.7,0.8]
"""

from __future__ import annotations

import argparse
from collections import defaultdict

import torch

from specbench import models
from specbench.bench import encode_prompt
from specbench.decode import GenerationConfig, plain_generate
from specbench.kernels import use_kernels
from specbench.prompts import load_prompts
from specbench.sampling import SamplingConfig, logits_to_probs


def teacher_forced_logits(model, ids: list[int], n_reply: int) -> torch.Tensor:
    """Logits predicting each reply token, one forward over prompt + reply -> [n_reply, vocab]."""
    with torch.inference_mode():
        out = model(input_ids=torch.tensor([ids]), use_cache=False, logits_to_keep=n_reply + 1)
    return out.logits[0, :n_reply].float()


def restrict(logits: torch.Tensor, limit: int, keep: list[int]) -> torch.Tensor:
    """-inf outside ids below limit and keep (limit 0: unchanged)."""
    if not limit:
        return logits
    mask = torch.ones(logits.shape[-1], dtype=torch.bool)
    mask[:limit] = False
    mask[torch.tensor(sorted(set(keep)))] = False
    return logits.masked_fill(mask, float("-inf"))


def acceptance(p: torch.Tensor, q: torch.Tensor) -> torch.Tensor:
    """sum_x min(p, q) per row: [n, vocab] x2 -> [n]."""
    return torch.minimum(p, q).sum(dim=-1)


def expected_tokens(alpha: torch.Tensor, gamma: int) -> torch.Tensor:
    """Per start position t (with gamma positions after it): sum_{j<=gamma} prod_{i<j} alpha_(t+i)."""
    n = alpha.shape[0] - gamma + 1
    out = torch.ones(max(n, 0))
    survive = torch.ones(max(n, 0))
    for j in range(gamma):
        survive = survive * alpha[j : j + n]
        out = out + survive
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--prompts", default="quick")
    parser.add_argument("--max-new-tokens", type=int, default=96)
    parser.add_argument("--temperature", type=float, default=0.7)
    parser.add_argument("--top-k", type=int, default=0)
    parser.add_argument("--top-p", type=float, default=1.0)
    parser.add_argument("--draft-temps", default="0.4,0.5,0.6,0.7,0.8")
    parser.add_argument("--draft-vocab", type=int, default=65536)
    parser.add_argument("--gamma", type=int, default=5)
    args = parser.parse_args()
    temps = [float(x) for x in args.draft_temps.split(",")]
    models.quiet_transformers()
    pair = models.load_pair(models.PairConfig())
    target, drafter = pair.target.model, pair.drafter_model.model
    use_kernels(target, "auto")
    target_sampling = SamplingConfig(args.temperature, args.top_k, args.top_p)
    config = GenerationConfig(max_new_tokens=args.max_new_tokens, eos_token_ids=pair.eos_token_ids, sampling=target_sampling)
    alphas: dict[float, dict[str, list[torch.Tensor]]] = {t: defaultdict(list) for t in temps}
    rounds: dict[float, dict[str, list[torch.Tensor]]] = {t: defaultdict(list) for t in temps}
    print(f"| prompt | tokens | {' | '.join(f'Td {t}' for t in temps)} |")
    print("|---|---|" + "---|" * len(temps))
    for prompt in load_prompts(args.prompts):
        prompt_ids = encode_prompt(pair.tokenizer, prompt)
        reply = plain_generate(target, prompt_ids, config).token_ids
        ids, n = prompt_ids + reply, len(reply)
        p = logits_to_probs(teacher_forced_logits(target, ids, n), target_sampling)
        draft_logits = restrict(teacher_forced_logits(drafter, ids, n), args.draft_vocab, [*ids, *pair.eos_token_ids])
        cells = []
        for t in temps:
            q = logits_to_probs(draft_logits, SamplingConfig(t, args.top_k, args.top_p))
            alpha = acceptance(p, q)
            alphas[t][prompt.category].append(alpha)
            rounds[t][prompt.category].append(expected_tokens(alpha, args.gamma))
            cells.append(f"{alpha.mean():.3f}")
        print(f"| {prompt.id} | {n} | {' | '.join(cells)} |", flush=True)
    print(f"\nmean alpha per draft, and E[tokens per round] at fixed gamma {args.gamma} (target T={args.temperature})")
    print(f"| category | {' | '.join(f'Td {t}' for t in temps)} |")
    print("|---|" + "---|" * len(temps))
    for category in alphas[temps[0]]:
        cells = [f"{torch.cat(alphas[t][category]).mean():.3f} / {torch.cat(rounds[t][category]).mean():.2f}" for t in temps]
        print(f"| {category} | {' | '.join(cells)} |")
    overall = [f"{torch.cat([a for v in alphas[t].values() for a in v]).mean():.3f} / {torch.cat([r for v in rounds[t].values() for r in v]).mean():.2f}" for t in temps]
    print(f"| all | {' | '.join(overall)} |")


if __name__ == "__main__":
    main()
