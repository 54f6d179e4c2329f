"""Gamma settings as the command line writes them: "4", "1..8", "1,2,4" or "1..3,8".

A pure parser with errors that say how to write it; the sweep's planner and the CLI share it.
"""

from __future__ import annotations

from specbench.errors import OptionError as GammaRangeError


def parse_gammas(text: str) -> list[int]:
    """ "4" -> [4]; "1..4" -> [1, 2, 3, 4]; "1,2,4" and "1..3,8" work too. Sorted, no repeats."""
    gammas: set[int] = set()
    for part in str(text).split(","):
        part = part.strip()
        if ".." in part:
            start, _, end = part.partition("..")
            lo, hi = _gamma_number(start, text), _gamma_number(end, text)
            if lo > hi:
                raise GammaRangeError(f"bad gamma range {part!r}: the start is above the end (write {hi}..{lo})")
            gammas.update(range(lo, hi + 1))
        else:
            gammas.add(_gamma_number(part, text))
    return sorted(gammas)


def _gamma_number(token: str, text: str) -> int:
    token = token.strip()
    if not token.isdigit():
        raise GammaRangeError(f"bad gamma {text!r}: use a number (4), a range (1..8) or a list (1,2,4)")
    value = int(token)
    if value < 1:
        raise GammaRangeError(f"bad gamma {text!r}: gamma must be >= 1, got {value}")
    return value
