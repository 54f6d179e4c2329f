"""Shards: a sweep split by prompt, so that a scheduler (Slurm job arrays, Ray, Kubernetes jobs)
can run its parts on several machines, and `specbench merge` joins them.

Which prompt goes where: the k-th prompt of the sweep's selection (0-based, in the prompt set's
own order, after --category and the other filters) belongs to shard k mod N + 1 of N. The
selection is the same on every machine, so every prompt lands in exactly one shard, and the
shards are as even as the selection allows. The plan is made over the whole selection and
then cut (plan.py), so whatever depends on all prompts (the first N of each category that
--measure-per-category times) is the same with or without shards.

Not shardable: --measure best. It times each drafter x policy at its best predicted gamma
over all prompts, and no shard sees all prompts; a sharded sweep names its gammas
(--measure all, or a list) and the merged results carry every prediction.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from specbench.errors import SweepError


@dataclass(frozen=True)
class Shard:
    index: int  # 1..count
    count: int

    def __str__(self) -> str:
        return f"{self.index}/{self.count}"

    def takes(self, position: int) -> bool:
        """Whether the prompt at `position` (0-based, in the selection's order) is this shard's."""
        return position % self.count == self.index - 1


def parse_shard(text: str) -> Shard:
    """ "I/N" (1 <= I <= N) as a Shard; anything else fails in one line."""
    match = re.fullmatch(r"\s*(\d+)\s*/\s*(\d+)\s*", text)
    if match is None:
        raise SweepError(f"bad --shard {text!r}: give I/N, such as 2/4 (the second of four shards)")
    index, count = int(match[1]), int(match[2])
    if count < 1 or not 1 <= index <= count:
        raise SweepError(f"bad --shard {text!r}: I must be between 1 and N")
    return Shard(index, count)


def shard_prompt_ids(prompt_ids: list[str], shard: Shard | None) -> list[str]:
    """The ids of the prompts that `shard` runs (all of them without a shard)."""
    if shard is None:
        return list(prompt_ids)
    return [pid for position, pid in enumerate(prompt_ids) if shard.takes(position)]


def check_shardable(shard: Shard | None, measure: str) -> None:
    """A sharded sweep must name the gammas it times (module docstring)."""
    if shard is not None and shard.count > 1 and measure == "best":
        raise SweepError(
            "--shard needs --measure all or a list of gammas (such as --measure 2,4): the best gamma is"
            " picked over all prompts, and no shard sees them all"
        )
