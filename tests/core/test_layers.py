"""The layers stay as the folders say: core/ imports nothing from specbench outside core/.

Guards against the lossless loop growing a dependency on the speed machinery (or on drafters,
policies, models): a reader of core/ must be able to follow a draft without stepping through
an AVX-512 build path. Reads the source (every import statement, top-level or not), so a
lazy import inside a function is caught too.
"""

from __future__ import annotations

import ast
from pathlib import Path

import specbench

CORE = Path(specbench.__file__).parent / "core"


def specbench_imports(path: Path) -> list[str]:
    """Every specbench module a core/ file imports, as dotted names. A relative import is
    resolved from core/: `from . import x` stays inside, `from .. import x` leaves it."""
    tree = ast.parse(path.read_text(), filename=str(path))
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found += [alias.name for alias in node.names if alias.name.split(".")[0] == "specbench"]
        elif isinstance(node, ast.ImportFrom):
            package = "specbench.core" if node.level == 1 else "specbench" if node.level >= 2 else None
            module = ".".join(filter(None, [package, node.module])) if node.level else (node.module or "")
            if module == "specbench":
                found += [f"specbench.{alias.name}" for alias in node.names]
            elif module.split(".")[0] == "specbench":
                found.append(module)
    return found


def test_core_imports_nothing_from_specbench_outside_core():
    files = sorted(CORE.glob("*.py"))
    assert len(files) >= 6  # the loop, verify, sampling, cache, stats, protocols: the check reads them
    outside = {
        f"{f.name}: {m}"
        for f in files
        for m in specbench_imports(f)
        if not (m == "specbench.core" or m.startswith("specbench.core."))
    }
    assert not outside, f"core/ must not import these: {sorted(outside)}"


def test_the_check_sees_an_outside_import(tmp_path):
    """The reader itself: top-level, lazy, from-package and relative imports are all seen."""
    source = tmp_path / "loop.py"
    source.write_text(
        "from specbench.core.cache import new_cache\nfrom specbench import speed\nfrom . import stats\nfrom ..drafters import model\n\n"
        "def f():\n    import specbench.speed.native\n"
    )
    assert specbench_imports(source) == [
        "specbench.core.cache",
        "specbench.speed",
        "specbench.core",
        "specbench.drafters",
        "specbench.speed.native",
    ]
