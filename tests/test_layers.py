"""The layers stay as the folders say: a table of which part of specbench may import which,
and no import cycle between any two modules.

Guards the reading order of the package: core/ (the lossless loop) can be followed without
stepping through an AVX-512 build path, speed/ (kernels and fast steps) without the drafters
or policies it serves, and so on up to the CLI. Reads the source (every import statement,
top-level or not), so a lazy import inside a function is caught too. Each test reports every
violation in one assertion message.
"""

from __future__ import annotations

import ast
from pathlib import Path

import specbench

ROOT = Path(specbench.__file__).parent

# part -> the parts it may import besides itself. A part is a folder under specbench/ or one
# of its bottom modules; "specbench" is the package's own __init__.py, which imports nothing
# (its public API loads on first use), so that the parts above core may read it (__version__).
BOTTOM = ("errors", "paths")
MAY_IMPORT: dict[str, set[str]] = {
    "errors": set(),
    "paths": set(),
    "specbench": set(),
    "core": set(),
    "speed": {"specbench", "core", "errors", "paths"},
    "drafters": {"specbench", "core", "speed", "errors"},
    "policies": {"specbench", "core", "errors"},
    "models": {"specbench", "core", "speed", "drafters", "policies", "errors", "paths"},
}
MAY_IMPORT["bench"] = {*MAY_IMPORT["models"], "models"}
MAY_IMPORT["cli"] = {*MAY_IMPORT["bench"], "bench"}


def module_name(path: Path, root: Path = ROOT) -> str:
    """specbench/core/cache.py -> specbench.core.cache; a package's __init__.py -> the package."""
    parts = [root.name, *path.relative_to(root).with_suffix("").parts]
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def is_module(name: str, root: Path = ROOT) -> bool:
    """Whether the dotted specbench name is a module or package (not a name inside one)."""
    relative = Path(*name.split(".")[1:]) if "." in name else Path()
    return (root / relative).with_suffix(".py").is_file() or (root / relative / "__init__.py").is_file()


def specbench_imports(path: Path, root: Path = ROOT) -> list[str]:
    """Every specbench module the file imports, as dotted names, in the order written.
    Relative imports are resolved from the file's package; `from package import name` is
    the module package.name where there is one, else the package."""
    me = module_name(path, root)
    package = me if path.name == "__init__.py" else me.rpartition(".")[0]
    tree = ast.parse(path.read_text(), filename=str(path))
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found += [alias.name for alias in node.names if alias.name.split(".")[0] == root.name]
        elif isinstance(node, ast.ImportFrom):
            base = package.split(".")[: len(package.split(".")) - node.level + 1] if node.level else []
            module = ".".join([*base, *([node.module] if node.module else [])])
            if module.split(".")[0] != root.name:
                continue
            inner = [f"{module}.{alias.name}" for alias in node.names]
            found += [name for name in inner if is_module(name, root)] or [module]
    return found


def part(name: str) -> str:
    """The layer a dotted specbench module belongs to: specbench.core.cache -> core."""
    pieces = name.split(".")
    return pieces[1] if len(pieces) > 1 else "specbench"


def files(root: Path = ROOT) -> list[Path]:
    return sorted(root.rglob("*.py"))


def import_graph(root: Path = ROOT) -> dict[str, set[str]]:
    """module -> the specbench modules it imports (itself left out)."""
    graph = {}
    for path in files(root):
        me = module_name(path, root)
        graph[me] = {name for name in specbench_imports(path, root) if name != me}
    return graph


def layer_violations(root: Path = ROOT) -> list[str]:
    """'module -> imported' for each import the table does not allow."""
    bad = []
    for me, imported in sorted(import_graph(root).items()):
        allowed = MAY_IMPORT.get(part(me), set()) | {part(me)}
        bad += [f"{me} -> {name}" for name in sorted(imported) if part(name) not in allowed]
    return bad


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components of more than one module (Tarjan's algorithm):
    each holds at least one cycle."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    found = []

    def visit(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        for other in sorted(graph.get(node, ())):
            if other not in index:
                visit(other)
                low[node] = min(low[node], low[other])
            elif other in stack:
                low[node] = min(low[node], index[other])
        if low[node] == index[node]:
            component = []
            while True:
                member = stack.pop()
                component.append(member)
                if member == node:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for node in sorted(graph):
        if node not in index:
            visit(node)
    return found


def test_every_part_is_in_the_table():
    parts = {part(module_name(path)) for path in files()}
    assert parts <= set(MAY_IMPORT), f"parts without a rule: {sorted(parts - set(MAY_IMPORT))}"
    assert {"core", "speed", "drafters", "policies", "models", "bench", "cli", *BOTTOM} <= parts


def test_each_layer_imports_only_what_the_table_allows():
    core = [path for path in files() if part(module_name(path)) == "core"]
    assert len(core) >= 6  # the loop, verify, sampling, cache, stats, protocols: the check reads them
    bad = layer_violations()
    assert not bad, "imports the layers do not allow:\n  " + "\n  ".join(bad)


def test_no_import_cycle_between_modules():
    found = cycles(import_graph())
    assert not found, "modules that import each other (directly or round a loop):\n  " + "\n  ".join(
        " <-> ".join(component) for component in found
    )


def test_the_check_sees_an_outside_import(tmp_path):
    """The reader itself: top-level, lazy, from-package and relative imports are all seen."""
    root = tmp_path / "specbench"
    (root / "core").mkdir(parents=True)
    (root / "speed").mkdir()
    for name in ("__init__.py", "core/__init__.py", "core/cache.py", "core/stats.py", "speed/__init__.py"):
        (root / name).write_text("")
    (root / "speed" / "native.py").write_text("")
    source = root / "core" / "loop.py"
    source.write_text(
        "from specbench.core.cache import new_cache\nfrom specbench import speed\nfrom . import stats\n"
        "from ..speed import native\nfrom .cache import x\n\n"
        "def f():\n    import specbench.speed.native\n"
    )
    assert specbench_imports(source, root) == [
        "specbench.core.cache",
        "specbench.speed",
        "specbench.core.stats",
        "specbench.speed.native",
        "specbench.core.cache",
        "specbench.speed.native",
    ]
    assert layer_violations(root) == [
        "specbench.core.loop -> specbench.speed",
        "specbench.core.loop -> specbench.speed.native",
    ]


def test_the_check_sees_a_cycle():
    graph = {"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}, "e": set()}
    assert cycles(graph) == [["a", "b", "c"]]
