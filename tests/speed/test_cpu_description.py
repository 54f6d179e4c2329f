"""native.cpu_description: the CPU a number ran on, on every CPU (test_native.py skips where the
kernel cannot run; this must not)."""

from __future__ import annotations

from specbench.speed import native


def test_cpu_description_names_the_speed_flags_this_cpu_has(tmp_path, monkeypatch):
    """Every results record says which instruction sets its numbers ran with."""
    described = native.cpu_description()
    assert isinstance(described["model"], str)
    assert set(described["flags"]) <= set(native.SPEED_FLAGS)
    fake = tmp_path / "cpuinfo"
    fake.write_text(
        "processor\t: 0\nmodel name\t: Some CPU\nflags\t\t: fpu sse avx2 fma avx512f avx512_vnni\n\nprocessor\t: 1\n"
    )
    real_path = native.Path
    monkeypatch.setattr(native, "Path", lambda p: fake if p == "/proc/cpuinfo" else real_path(p))
    monkeypatch.delenv(native.MARCH_ENV, raising=False)
    assert native.cpu_description() == {
        "model": "Some CPU",
        "flags": ["avx2", "fma", "avx512f", "avx512_vnni"],
        "kernels_march": "native",
    }
    monkeypatch.setenv(native.MARCH_ENV, "x86-64-v3")  # the kernels built for AVX2 alone: the record says so
    assert native.cpu_description()["kernels_march"] == "x86-64-v3"
