"""The vocabulary of a sweep's rows: the sources a row comes from, the method, drafter and
policy names the other modules test for, and the labels built from them.

A drafter's label is its name, or "model@NAME" in a sweep that compares several drafter
models; a configuration's label ("specbench / model / cost", ", γ=12" with its gamma) is
how tables and charts name it. These are pure string functions, kept apart from the files
and the aggregation so that the planner, the sweep and the charts spell them one way.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import pandas as pd

MEASURED, PREDICTED, PROFILE = "measured", "predicted", "profile"
ORACLE_POLICY = "oracle"  # profile.py's label for the bound of every policy over a drafter
BASELINE_METHOD = "plain"
MODEL_DRAFTER = "model"  # the drafter that drafts with the drafter model (drafters/)
MODEL_SEPARATOR = "@"  # "model@NAME": a drafter label naming its drafter model, in a sweep with several
FIXED_POLICY = "fixed"  # the fixed-gamma policy (policies/), the setting of the theory


def drafter_label(drafter: str, model_name: str = "") -> str:
    """A drafter's label in the rows: the drafter's name, with "@model_name" when the sweep
    compares several drafter models (model_name "" when it has one: labels stay bare)."""
    return f"{drafter}{MODEL_SEPARATOR}{model_name}" if model_name else drafter


def drafter_model_name(name: str) -> str:
    """A drafter model's name in labels (model@NAME), from its display name: without
    ".gguf", and "-" for the separator and commas (which lists of labels use)."""
    name = name.removesuffix(".gguf").strip()
    return name.replace(MODEL_SEPARATOR, "-").replace(",", "-") or "drafter"


def label_parts(label: str) -> tuple[str, str]:
    """(drafter name, drafter model name) of a label; the model name is "" when the label
    names none."""
    drafter, _, model_name = label.partition(MODEL_SEPARATOR)
    return drafter, model_name


def config_label(method: str, drafter: str, policy: str, gamma: int | None = None) -> str:
    """How charts name a configuration: "specbench / model / cost", ", γ=12" when gamma is given."""
    label = " / ".join(p for p in (method, drafter, policy) if p)
    return label if gamma is None else f"{label}, γ={gamma}"


def labels(frame: pd.DataFrame, with_gamma: bool = False) -> list[str]:
    """config_label of each row of a runs or summary table (", γ=4" too when with_gamma)."""
    gammas = frame["gamma"] if with_gamma else [None] * len(frame)
    return [
        config_label(m, d, p, whole_gamma(g))
        for m, d, p, g in zip(frame["method"], frame["drafter"], frame["policy"], gammas)
    ]


def whole_gamma(value) -> int | None:
    """A gamma cell as an int; None for blank (None or NaN)."""
    return None if value is None or value != value else int(value)
