"""What a trace's rounds add up to: accepted drafts per round, acceptance by draft position,
and RunStats rebuilt from the records of a trace saved without its stats line.

Pure arithmetic over StepRecords, apart from the rendering in trace.py, so both the live view
and the replay summarize a run with the same numbers.
"""

from __future__ import annotations

from dataclasses import dataclass

from specbench.core.stats import FIRST, RunStats, StepRecord


def accepted_length_histogram(records: list[StepRecord]) -> list[int]:
    """counts[n] = speculative rounds that accepted exactly n drafts, for n = 0 .. largest gamma."""
    rounds = [r for r in records if r.emitted_kind != FIRST]
    top = max([r.gamma for r in rounds] + [r.accepted for r in rounds], default=0)
    counts = [0] * (top + 1)
    for r in rounds:
        counts[r.accepted] += 1
    return counts


@dataclass(frozen=True)
class PositionAcceptance:
    position: int  # 1-based draft position within a round
    drafted: int  # rounds that proposed a draft at this position
    reached: int  # ... and accepted every draft before it (so this one was checked)
    accepted: int  # rounds that accepted the draft at this position

    @property
    def rate(self) -> float:
        """accepted / drafted."""
        return self.accepted / self.drafted if self.drafted else 0.0

    @property
    def rate_if_reached(self) -> float:
        """accepted / reached: how often a draft passes once it is checked."""
        return self.accepted / self.reached if self.reached else 0.0


def acceptance_by_position(records: list[StepRecord]) -> list[PositionAcceptance]:
    rounds = [r for r in records if r.emitted_kind != FIRST]
    longest = max((len(r.draft_tokens) for r in rounds), default=0)
    table = []
    for i in range(longest):
        drafted = [r for r in rounds if len(r.draft_tokens) > i]
        reached = sum(1 for r in drafted if r.accepted >= i)
        accepted = sum(1 for r in drafted if r.accepted > i)
        table.append(PositionAcceptance(i + 1, len(drafted), reached, accepted))
    return table


def stats_from_records(records: list[StepRecord]) -> RunStats:
    """RunStats rebuilt from the records alone, for a trace saved without its stats line.

    decode_seconds is then draft + verify time, which leaves out the loop's own overhead.
    """
    stats = RunStats()
    for r in records:
        stats.new_tokens += len(r.tokens)
        stats.target_forwards += 1
        if r.emitted_kind == FIRST:
            stats.first_pass_tokens += len(r.tokens)
            stats.prefill_seconds += r.verify_seconds
            continue
        stats.rounds += 1
        stats.drafted += len(r.draft_tokens)
        stats.accepted += r.accepted
        stats.draft_seconds += r.draft_seconds
        stats.verify_seconds += r.verify_seconds
    stats.decode_seconds = stats.draft_seconds + stats.verify_seconds
    return stats
