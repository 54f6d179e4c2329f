"""The errors a user can cause, under one base class that the command line catches once.

A SpecbenchError's message is one line that says what is wrong and what to do; the CLI prints
it on stderr and exits 2, never with a traceback. Anything else that escapes is a bug.
Subclasses name the layer that raised, so library callers can catch narrowly; those that
replace a ValueError of the standard library keep ValueError as a base.

The lossless core (specbench/core), the drafters and the policies raise plain ValueErrors and
know nothing of this module: the layer that calls them (models/, bench.sweep) turns them into
a subclass here, with `reraise_as`.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager


class SpecbenchError(Exception):
    """A user error: the message is one line for the terminal."""


class OptionError(SpecbenchError, ValueError):
    """A command-line option or a config value outside what it accepts (a --gamma that is not
    a number, a range or a list of them; an unknown drafter or policy name)."""


class PromptError(SpecbenchError, ValueError):
    """A prompt or prompt file that cannot be used: missing, malformed, empty, longer than the
    model's context, or a category filter that leaves nothing."""


class ModelError(SpecbenchError):
    """A model cannot be found, loaded or paired."""


class VocabMismatch(ModelError):
    """Drafter and target do not share a vocabulary, so draft ids mean nothing to the target."""


class DefaultModelError(ModelError, RuntimeError):
    """The embedded pair cannot be used: a package is missing or the assembled file is wrong."""


class ChecksumError(DefaultModelError):
    """The assembled GGUF does not have the sha256 it must have."""


class SweepError(SpecbenchError, ValueError):
    """A sweep that cannot start as asked (bad names, an existing results directory...)."""


class ResultsError(SpecbenchError, ValueError):
    """A results directory or one of its files is missing or malformed."""


class CalibrationError(SpecbenchError, ValueError):
    """A cost-policy calibration file that belongs to another model pair or settings."""


class TraceFileError(SpecbenchError, ValueError):
    """A trace file that is missing or not what `specbench trace` can read."""


@contextmanager
def reraise_as(error: type[SpecbenchError]) -> Iterator[None]:
    """Within the block, a plain ValueError (a lower layer's check of a value the user gave)
    is raised again as `error` with the same message; SpecbenchErrors pass unchanged."""
    try:
        yield
    except SpecbenchError:
        raise
    except ValueError as exc:
        raise error(str(exc)) from exc
