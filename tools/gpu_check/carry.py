"""What travels to the device machine (no network, no registry) in the ignored `.gpu/` folder, and its checks."""

from __future__ import annotations

import hashlib
import json
import re
import subprocess
import sys
import tarfile
import tempfile
from pathlib import Path
from typing import NamedTuple

ROOT = Path(__file__).resolve().parents[2]
FOLDER = ROOT / ".gpu"
WHEELS = "wheels"  # wheels and the trimmed llama-cpp-python sdist, one pip --find-links folder
MANIFEST = "manifest.json"
CAP_BYTES = 64 * 1024 * 1024  # what one device call may carry: the working tree that travels and .gpu/ together
PYTHON_VERSION = "3.12"
PLATFORMS = [
    "manylinux2014_x86_64",
    "manylinux_2_17_x86_64",
    "manylinux_2_27_x86_64",
    "manylinux_2_28_x86_64",
    "manylinux_2_34_x86_64",
    "linux_x86_64",
]
# members the CUDA build needs from the trimmed sdist (relative to its top folder)
SDIST_MEMBERS = [
    "pyproject.toml",
    "CMakeLists.txt",
    "llama_cpp/__init__.py",
    "vendor/llama.cpp/CMakeLists.txt",
    "vendor/llama.cpp/ggml/src/ggml-cuda/CMakeLists.txt",
    "vendor/llama.cpp/ggml/src/ggml-cpu/CMakeLists.txt",
    "vendor/llama.cpp/tools/mtmd/CMakeLists.txt",
]
# what the trimmed sdist leaves out: git history, docs, vocab test files and backends the device never builds
SDIST_DROP = [
    r"^\.git(/|$)",
    r"^vendor/llama\.cpp/\.(git|github|devops)(/|$)",
    r"^vendor/llama\.cpp/(docs|benches|media)(/|$)",
    r"^vendor/llama\.cpp/models/.*\.gguf$",
    r"^vendor/llama\.cpp/ggml/src/ggml-(cann|et|hexagon|metal|opencl|openvino|sycl|virtgpu|vulkan|webgpu|zdnn|zendnn)(/|$)",
]


class Group(NamedTuple):
    """Wheels one set of CUDA paths needs; `no_deps`: installed without their dependencies (pins that fight)."""

    name: str
    requirements: list[str]
    paths: list[str]  # the table rows that need it
    required: bool = False  # the check cannot run without it: a folder that lacks it fails the dry run
    no_deps: list[str] = []


def llama_pin() -> str:
    """The llama-cpp-python version the llama plugin pins."""
    text = (ROOT / "plugins/hypnos-llama/pyproject.toml").read_text(encoding="utf-8")
    match = re.search(r'"llama-cpp-python==([^"]+)"', text)
    if match is None:
        raise SystemExit("plugins/hypnos-llama/pyproject.toml pins no llama-cpp-python version")
    return match.group(1)


LLAMA_PATHS = [
    "llama full offload",
    "llama partial offload",
    "MoE expert offload",
    "tier 2 -> 1 promotion",
    "demotion",
    "KV parking on CUDA",
    "prompt cache on CUDA",
    "OOM: llama chat",
    "OOM: embeddings",
]
# In the order they are packed: a group that no longer fits under the cap is listed as not carried.
GROUPS = [
    Group(
        "base",
        [
            # nox's own dependencies but virtualenv (5.8 MB): its sessions here use the venv backend
            "argcomplete>=1.9.4",
            "attrs>=23.1",
            "colorlog>=2.6.1",
            "dependency-groups>=1.1",
            "humanize>=4",
            "packaging>=20.9",
            "msgspec>=0.18",
            "pluggy>=1.5",
            "litestar>=2.12",
            "granian>=1.6",
            "python-multipart>=0.0.9",
            "prometheus-client>=0.20",
            "ddsketch>=3.0",
            "nvidia-ml-py>=12",
            "setuptools>=68",
            "wheel",
        ],
        ["NVML vs nvidia-smi"],
        required=True,
        no_deps=["nox>=2024.4"],
    ),
    Group(
        "llama",  # llama-cpp-python's own dependencies and build backend; the sdist itself is added beside
        [
            "numpy>=1.26",
            "jinja2>=3.1",
            "gguf>=0.10",
            "safetensors>=0.4",
            "pillow>=10",
            "diskcache>=5.6.1",
            "typing-extensions>=4.5",
            "scikit-build-core[pyproject]>=0.9.2",
        ],
        LLAMA_PATHS,
        required=True,
    ),
    Group(
        "diffusion",
        ["diffusers>=0.30", "transformers>=4.40,<5.17", "huggingface_hub>=0.24", "tokenizers>=0.15"],
        ["diffusers group offload", "OOM: diffusers"],
    ),
    Group(
        "gliner",  # gliner itself without its onnxruntime dependency (the torch runtime runs on CUDA)
        ["transformers>=4.40,<5.17", "huggingface_hub>=0.24", "tokenizers>=0.15", "sentencepiece>=0.2"],
        ["GLiNER on torch CUDA"],
        no_deps=["gliner>=0.2.16"],
    ),
    Group("onnxruntime", ["onnxruntime-gpu>=1.18"], ["ONNX Runtime CUDA provider"]),
    Group("ctranslate2", ["ctranslate2>=4.4"], ["CTranslate2 (whisper) on CUDA"]),
]


def groups_digest() -> str:
    """A digest of what the groups ask for (a folder made for other groups is stale)."""
    spec = [[g.name, g.requirements, g.no_deps] for g in GROUPS] + [llama_pin()]
    return hashlib.sha256(json.dumps(spec).encode()).hexdigest()[:16]


def pip_platform_args() -> list[str]:
    """pip's options for wheels of the device's Python on manylinux x86-64."""
    args = ["--python-version", PYTHON_VERSION, "--only-binary=:all:"]
    for platform in PLATFORMS:
        args += ["--platform", platform]
    return args


def folder_bytes(folder: Path) -> int:
    """Every file's size under the folder."""
    return sum(p.stat().st_size for p in folder.rglob("*") if p.is_file())


def tree_bytes(root: Path = ROOT) -> int:
    """The working tree that travels with every device call beside .gpu/: tracked and untracked-not-ignored files
    (0 where git cannot tell)."""
    command = ["git", "-C", str(root), "ls-files", "-z", "--cached", "--others", "--exclude-standard"]
    done = subprocess.run(command, capture_output=True, check=False)
    if done.returncode != 0:
        return 0
    names = {name for name in done.stdout.decode(errors="replace").split("\0") if name}
    return sum((root / name).stat().st_size for name in names if (root / name).is_file())


def read_manifest(folder: Path) -> dict | None:
    """The manifest gpu-prepare wrote, or None."""
    try:
        return json.loads((folder / MANIFEST).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None


def sdist_missing(path: Path) -> list[str]:
    """Members of SDIST_MEMBERS the tarball lacks (all of them when it cannot be read)."""
    try:
        with tarfile.open(path) as tar:
            names = {name.split("/", 1)[1] for name in tar.getnames() if "/" in name}
    except (OSError, tarfile.TarError):
        return list(SDIST_MEMBERS)
    return [member for member in SDIST_MEMBERS if member not in names]


def offline_resolve(wheels: Path, requirements: list[str], *, no_deps: bool = False) -> str | None:
    """Resolve the requirements from the folder alone, as the device would (None when it works, else pip's reason)."""
    if not requirements:
        return None
    with tempfile.TemporaryDirectory() as target:
        # pip download honours --python-version for Requires-Python (install --dry-run --target judges by this one)
        command = [sys.executable, "-m", "pip", "download", "--quiet", "--dest", target]
        command += ["--no-index", "--find-links", str(wheels), *pip_platform_args()]
        command += ["--no-deps"] if no_deps else []
        done = subprocess.run([*command, *requirements], capture_output=True, text=True, check=False)
    if done.returncode == 0:
        return None
    lines = [line for line in done.stderr.splitlines() if "ERROR" in line] or done.stderr.splitlines()[-2:]
    return " ".join(lines)[:300]


def check_folder(folder: Path, *, resolve: bool = True) -> tuple[list[str], list[str]]:
    """(problems, not carried): what is wrong with the folder for the device run, and the groups that do not travel
    (with why). A folder is right when gpu-prepare made it for these groups, every file it lists is there at its
    size, it fits CAP_BYTES, the required groups travel, the sdist holds what the CUDA build needs, and every
    carried group's requirements resolve from the folder alone."""
    manifest = read_manifest(folder)
    if manifest is None:
        return [f"{folder}/{MANIFEST} is missing: run `nox -s gpu-prepare`"], []
    problems: list[str] = []
    if manifest.get("digest") != groups_digest():
        problems.append("the folder was made for other wheel groups: run `nox -s gpu-prepare` again")
    for name, size in manifest.get("files", {}).items():
        path = folder / name
        if not path.is_file():
            problems.append(f"{name} is missing")
        elif path.stat().st_size != size:
            problems.append(f"{name} is {path.stat().st_size} bytes, the manifest says {size}")
    folder_size, tree = folder_bytes(folder), tree_bytes()
    if folder_size + tree > CAP_BYTES:
        problems.append(
            f"the folder ({folder_size / 2**20:.1f} MiB) and the working tree ({tree / 2**20:.1f} MiB) come to "
            f"{(folder_size + tree) / 2**20:.1f} MiB, over the {CAP_BYTES / 2**20:.0f} MiB a device call carries"
        )
    carried = manifest.get("carried", {})
    skipped = [f"{name}: {why}" for name, why in manifest.get("not_carried", {}).items()]
    for group in GROUPS:
        if group.required and group.name not in carried:
            problems.append(f"the {group.name} group does not travel; the check needs it")
    sdist = manifest.get("sdist")
    if not sdist:
        problems.append("no llama-cpp-python sdist")
    elif missing := sdist_missing(folder / sdist):
        problems.append(f"{sdist} lacks {', '.join(missing)}")
    if resolve and not problems:
        wheels = folder / WHEELS
        for group in GROUPS:
            if group.name not in carried:
                continue
            for reqs, no_deps in ((group.requirements, False), (group.no_deps, True)):
                if reason := offline_resolve(wheels, reqs, no_deps=no_deps):
                    problems.append(f"the {group.name} group does not resolve offline: {reason}")
    return problems, skipped
