"""prebuild.py: llama.cpp is built for the instruction sets this CPU has, and each build keeps its own wheel folder."""

from __future__ import annotations

import importlib.util
import zipfile
from pathlib import Path
from typing import Any

import pytest

PREBUILD = Path(__file__).resolve().parents[1] / "prebuild.py"
AVX2_CPU = {"sse4_2", "avx", "avx2", "fma", "f16c", "bmi2"}
AVX512_CPU = AVX2_CPU | {"avx512f", "avx512cd", "avx512vl", "avx512dq", "avx512bw", "avx512_vnni", "avx512_bf16"}


@pytest.fixture(scope="module")
def prebuild() -> Any:
    spec = importlib.util.spec_from_file_location("hypnos_llama_prebuild", PREBUILD)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _options(args: str) -> dict[str, str]:
    return dict(part.removeprefix("-D").split("=", 1) for part in args.split() if part.startswith("-DGGML_"))


def test_an_avx512_cpu_gets_the_avx512_kernels(prebuild: Any) -> None:
    options = _options(prebuild.cmake_args("", AVX512_CPU, "x86_64", portable=False))
    assert options["GGML_NATIVE"] == "off"  # explicit options: the folder name says exactly what was compiled
    assert options["GGML_AVX512"] == options["GGML_AVX512_VNNI"] == options["GGML_AVX512_BF16"] == "on"
    assert options["GGML_AVX512_VBMI"] == options["GGML_AVX_VNNI"] == "off"  # not in this CPU's flags


def test_avx512_needs_all_five_base_extensions(prebuild: Any) -> None:
    options = _options(prebuild.cmake_args("", AVX512_CPU - {"avx512bw"}, "x86_64", portable=False))
    assert options["GGML_AVX512"] == "off"
    assert options["GGML_AVX2"] == "on"


def test_portable_other_machines_and_the_users_own_choice(prebuild: Any) -> None:
    assert prebuild.cmake_args("", AVX512_CPU, "x86_64", portable=True) == "-DGGML_NATIVE=off"
    assert prebuild.cmake_args("", {"asimd"}, "aarch64", portable=False) == "-DGGML_NATIVE=off"
    assert prebuild.cmake_args("-DGGML_NATIVE=on", AVX512_CPU, "x86_64", portable=False) == "-DGGML_NATIVE=on"
    cuda = prebuild.cmake_args("-DGGML_CUDA=on", AVX2_CPU, "x86_64", portable=False)
    assert cuda.startswith("-DGGML_CUDA=on ") and _options(cuda)["GGML_AVX2"] == "on"


def test_each_build_has_its_own_wheel_folder(prebuild: Any, monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    avx2 = prebuild.wheel_dir("0.3.36", prebuild.cmake_args("", AVX2_CPU, "x86_64", portable=False))
    avx512 = prebuild.wheel_dir("0.3.36", prebuild.cmake_args("", AVX512_CPU, "x86_64", portable=False))
    assert avx2 != avx512 and avx2.parent == avx512.parent == tmp_path / "hypnos" / "wheels"
    assert prebuild.wheel_dir("0.3.37", "-DGGML_NATIVE=off") != prebuild.wheel_dir("0.3.36", "-DGGML_NATIVE=off")


def test_the_wheel_library_digest_reads_the_cpu_backend(prebuild: Any, tmp_path: Path) -> None:
    wheel = tmp_path / "llama_cpp_python-0.3.36-py3-none-linux_x86_64.whl"
    with zipfile.ZipFile(wheel, "w") as archive:
        archive.writestr("llama_cpp/lib/libggml-cpu.so", b"avx512 kernels")
        archive.writestr("llama_cpp/lib/libggml-cpu.so.0", b"avx512 kernels")
        archive.writestr("llama_cpp/lib/libggml-base.so", b"other")
    other = tmp_path / "other.whl"
    with zipfile.ZipFile(other, "w") as archive:
        archive.writestr("llama_cpp/lib/libggml-cpu.so", b"avx2 kernels")
    assert prebuild.wheel_library_digest(wheel) != prebuild.wheel_library_digest(other)
