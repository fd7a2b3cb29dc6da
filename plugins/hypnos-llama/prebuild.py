"""Builds llama-cpp-python once for this CPU's instruction sets and installs that build into the running Python.

Run by ./run.sh and the nox session before the plugin is installed: `python plugins/hypnos-llama/prebuild.py`.
llama.cpp's CPU kernels are compiled for the instruction sets named at build time; a portable build (AVX2) leaves
AVX-512, VNNI and BF16 unused (about 1.4x slower prompt processing and embeddings on a CPU that has them). pip keys
the wheels it builds by the source alone, so a wheel built for one CPU would be reused on another; this keeps each
build in its own folder, named by the exact CMake arguments, under ~/.cache/hypnos/wheels, and installs it
(again only when the installed CPU library differs from the one in that wheel).

Set HYPNOS_LLAMA_PORTABLE=1 for the portable build, CMAKE_ARGS for your own (e.g. -DGGML_CUDA=on: the CPU
instruction sets are added unless CMAKE_ARGS names GGML_NATIVE or a GGML_AVX*/SSE option itself).
"""

from __future__ import annotations

import hashlib
import importlib.util
import os
import platform
import re
import shutil
import subprocess
import sys
import tempfile
import zipfile
from pathlib import Path

HERE = Path(__file__).resolve().parent
PACKAGE = "llama-cpp-python"

# /proc/cpuinfo flag(s) -> the ggml CMake option it enables (ggml/src/ggml-cpu/CMakeLists.txt, non-native x86).
X86_OPTIONS: list[tuple[tuple[str, ...], str]] = [
    (("sse4_2",), "GGML_SSE42"),
    (("avx",), "GGML_AVX"),
    (("avx2",), "GGML_AVX2"),
    (("fma",), "GGML_FMA"),
    (("f16c",), "GGML_F16C"),
    (("bmi2",), "GGML_BMI2"),
    (("avx_vnni",), "GGML_AVX_VNNI"),
    (("avx512f", "avx512cd", "avx512vl", "avx512dq", "avx512bw"), "GGML_AVX512"),
    (("avx512vbmi",), "GGML_AVX512_VBMI"),
    (("avx512_vnni",), "GGML_AVX512_VNNI"),
    (("avx512_bf16",), "GGML_AVX512_BF16"),
]


def pinned_version() -> str:
    """The llama-cpp-python version the plugin pins in its pyproject.toml."""
    text = (HERE / "pyproject.toml").read_text(encoding="utf-8")
    match = re.search(r'"llama-cpp-python==([^"]+)"', text)
    if match is None:
        raise SystemExit("prebuild: plugins/hypnos-llama/pyproject.toml does not pin llama-cpp-python==VERSION")
    return match.group(1)


def cpu_flags() -> set[str]:
    """The instruction-set flags the kernel reports for this CPU (empty where /proc/cpuinfo is missing)."""
    try:
        text = Path("/proc/cpuinfo").read_text(encoding="utf-8", errors="replace")
    except OSError:
        return set()
    for line in text.splitlines():
        if line.startswith("flags"):
            return set(line.split(":", 1)[1].split())
    return set()


def cmake_args(user_args: str, flags: set[str], machine: str, portable: bool) -> str:
    """CMAKE_ARGS for this CPU: explicit ggml instruction-set options on x86, the portable build elsewhere."""
    if re.search(r"GGML_(NATIVE|AVX|SSE|FMA|F16C|BMI2)", user_args):
        return user_args  # the user chose the instruction sets
    if portable or machine not in ("x86_64", "amd64") or not flags:
        chosen = ["-DGGML_NATIVE=off"]
    else:
        chosen = ["-DGGML_NATIVE=off"]
        chosen += [f"-D{option}={'on' if set(need) <= flags else 'off'}" for need, option in X86_OPTIONS]
    return " ".join(filter(None, [user_args.strip(), *chosen]))


def wheel_dir(version: str, args: str) -> Path:
    """The folder holding the wheel built with exactly these arguments."""
    cache = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "hypnos" / "wheels"
    digest = hashlib.sha256(f"{version}\n{args}".encode()).hexdigest()[:12]
    return cache / f"{PACKAGE}-{version}-{digest}"


def build(version: str, args: str, target: Path) -> None:
    """pip wheel the sdist with CMAKE_ARGS into a temporary folder, then rename it into place."""
    target.parent.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(prefix=target.name + ".", dir=target.parent))
    env = {**os.environ, "CMAKE_ARGS": args}
    command = [
        sys.executable,
        "-m",
        "pip",
        "wheel",
        "--no-deps",
        "--no-cache-dir",
        "--no-binary",
        PACKAGE,
        "-w",
        str(staging),
        f"{PACKAGE}=={version}",
    ]
    print(
        f"prebuild: building {PACKAGE} {version} with CMAKE_ARGS='{args}' (several minutes, once per CPU)",
        file=sys.stderr,
    )
    try:
        subprocess.run(command, check=True, env=env, stdout=sys.stderr)
        (staging / "cmake-args.txt").write_text(args + "\n", encoding="utf-8")
        try:
            os.replace(staging, target)
        except OSError:
            if not any(target.glob("*.whl")):  # not a concurrent build that finished first
                raise
    finally:
        shutil.rmtree(staging, ignore_errors=True)


def _cpu_library(names: list[str]) -> str | None:
    """The path of ggml's CPU backend library among a wheel's or a package's file names."""
    found = [name for name in names if Path(name).name.startswith("libggml-cpu.")]
    return min(found, key=len) if found else None


def wheel_library_digest(wheel: Path) -> str:
    """sha256 of the ggml CPU library inside a wheel."""
    with zipfile.ZipFile(wheel) as archive:
        name = _cpu_library(archive.namelist())
        if name is None:
            raise SystemExit(f"prebuild: {wheel} holds no libggml-cpu library")
        return hashlib.sha256(archive.read(name)).hexdigest()


def installed_library_digest() -> str | None:
    """sha256 of the installed llama_cpp's ggml CPU library (None when llama_cpp is not installed)."""
    spec = importlib.util.find_spec("llama_cpp")  # finds the package without importing (loading) it
    if spec is None or not spec.submodule_search_locations:
        return None
    lib = Path(next(iter(spec.submodule_search_locations))) / "lib"
    name = _cpu_library([str(path) for path in lib.glob("libggml-cpu.*")]) if lib.is_dir() else None
    return hashlib.sha256(Path(name).read_bytes()).hexdigest() if name else None


def main() -> int:
    """Build the wheel for this CPU when missing, and install it when the installed build is another one."""
    version = pinned_version()
    portable = os.environ.get("HYPNOS_LLAMA_PORTABLE", "") not in ("", "0")
    args = cmake_args(os.environ.get("CMAKE_ARGS", ""), cpu_flags(), platform.machine().lower(), portable)
    target = wheel_dir(version, args)
    if not any(target.glob("*.whl")):
        build(version, args, target)
    wheel = next(target.glob("*.whl"))
    if installed_library_digest() != wheel_library_digest(wheel):
        print(f"prebuild: installing {wheel.name} built with CMAKE_ARGS='{args}'", file=sys.stderr)
        command = [sys.executable, "-m", "pip", "install", "--no-deps", "--force-reinstall", str(wheel)]
        subprocess.run(command, check=True, stdout=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
