"""What a user gets from `pip install specbench` (not editable) and from `import specbench`.

Guards against the prompt sets or the native kernels' C source being left out of the wheel:
a non-editable install would then have no `default` or `quick` prompt set and no kernel to
build, while every test run from the source tree still passed.
"""

from __future__ import annotations

import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import specbench
from specbench.bench import prompts

ROOT = Path(__file__).resolve().parents[1]


def build_wheel(dest: Path) -> Path:
    """Build the wheel from a copy of the source (nothing written into the checkout)."""
    src = dest / "src"
    src.mkdir()
    shutil.copy(ROOT / "pyproject.toml", src)
    shutil.copy(ROOT / "README.md", src)
    shutil.copytree(ROOT / "specbench", src / "specbench", ignore=shutil.ignore_patterns("__pycache__"))
    script = f"import setuptools.build_meta as b; print(b.build_wheel({str(dest)!r}))"
    name = (
        subprocess.run([sys.executable, "-c", script], cwd=src, check=True, capture_output=True, text=True)
        .stdout.strip()
        .splitlines()[-1]
    )
    return dest / name


def test_the_wheel_ships_the_prompt_sets_and_the_kernel_source(tmp_path):
    with zipfile.ZipFile(build_wheel(tmp_path)) as wheel:
        names = set(wheel.namelist())
    shipped_sets = {
        Path(n).stem for n in names if n.startswith("specbench/bench/prompt_sets/") and n.endswith(".jsonl")
    }
    assert shipped_sets == set(prompts.available_sets())
    assert {"default", "quick"} <= shipped_sets
    kernels = {
        f"specbench/speed/{name}" for name in ("int8_gemv.c", "int8_linear.c", "q4k_linear.c", "q4k_layer.c", "bf16.h")
    }
    assert kernels <= set(names)
    assert "specbench/core/generate.py" in names and "specbench/cli/report.py" in names


def test_prompt_sets_are_read_from_the_package():
    assert prompts.PROMPTS_DIR.is_relative_to(Path(specbench.__file__).parent)
    assert len(prompts.load_prompts("quick")) > 0


def test_the_public_api_names_resolve():
    for name in specbench.__all__:
        assert getattr(specbench, name) is not None, name
    assert callable(specbench.speculative_generate) and callable(specbench.load_pair)
    from specbench import errors

    assert issubclass(errors.PromptError, specbench.SpecbenchError)
