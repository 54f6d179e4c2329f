"""`specbench models` and `clear-cache`: the embedded default pair and the cache folder.

Both read only the packages' and the cache's state (defaults.py, paths.py), so they start
without torch.
"""

from __future__ import annotations

from rich.table import Table

from specbench import paths
from specbench.cli import ui
from specbench.models import defaults


def models_command() -> None:
    """List the embedded default pair: its packages, whether it is cached, and the sizes."""
    table = Table(title="Default model pair", title_justify="left")
    for name in ("role", "model", "parts", "GGUF", "cached", "cache"):
        table.add_column(name, justify="right" if name in ("GGUF", "cache") else "left", no_wrap=name == "model")
    statuses = [defaults.status(model) for model in defaults.PAIR]
    for s in statuses:
        cached = "[green]yes[/]" if s.cached else "no"
        table.add_row(
            s.model.role,
            s.model.name,
            f"{s.parts_found}/{s.model.n_parts}",
            _size(s.parts_bytes),
            cached,
            _size(s.cache_bytes) if s.cache_bytes else "–",
        )
    ui.console.print(table)
    for s in statuses:
        where = f"parts in {s.parts_folder}" if s.parts_folder else "parts not installed"
        ui.console.print(
            f"{s.model.role}: {where}; cache {s.cache_path}", highlight=False, soft_wrap=True, markup=False
        )
    if not all(s.cached for s in statuses):
        ui.console.print(
            "an uncached model is built on first use (about 1-2 minutes, once)", highlight=False, soft_wrap=True
        )
    if any(s.parts_found < s.model.n_parts for s in statuses):
        ui.console.print(
            f"[yellow]missing packages:[/] install them with {defaults.INSTALL_HINT}", highlight=False, soft_wrap=True
        )
    ui.console.print(
        f"cache: {paths.models_dir()} (move it with ${paths.CACHE_ENV}; empty it with `specbench clear-cache`)",
        highlight=False,
        soft_wrap=True,
        markup=False,
    )
    ui.console.print(drafters_table())


def drafters_table() -> Table:
    """How each kind of --drafter maps to the target (pairing.drafter_mapping's words)."""
    from specbench.models.pairing import drafter_mapping, early_exit_mapping

    table = Table(title="Drafters and how they map to the target", title_justify="left")
    table.add_column("--drafter", no_wrap=True)
    table.add_column("maps to the target")
    table.add_row("default, or a model with the target's tokenizer", drafter_mapping("model"))
    table.add_row("a model with another tokenizer", drafter_mapping("model", translated=True))
    table.add_row("early-exit:N", early_exit_mapping("N"))
    table.add_row("ngram, prompt-lookup", drafter_mapping("ngram"))
    return table


def clear_cache_command() -> None:
    """Delete the cached default models, measured costs and compiled kernels (rebuilt on next use)."""
    where = paths.cache_root()
    freed = defaults.clear_cache()
    if freed:
        ui.console.print(f"removed {_size(freed)} from {where}", highlight=False, soft_wrap=True, markup=False)
    else:
        ui.console.print(f"nothing cached in {where}", highlight=False, soft_wrap=True, markup=False)


def _size(n: int) -> str:
    if n >= 1e8:
        return f"{n / 1e9:.2f} GB"
    return f"{n / 1e6:.1f} MB" if n >= 1e5 else f"{n / 1e3:.1f} kB"
