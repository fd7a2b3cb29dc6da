"""`hypnos models pull` against a stand-in hub on loopback: progress, resume, size checks, gated repos, offline."""

from __future__ import annotations

import io
from pathlib import Path

import pytest
from hub_standin import Hub, stand_in_hub
from huggingface_hub import constants
from hypnos_server.catalog import Catalog
from hypnos_server.cli import main
from hypnos_server.download import DownloadError, pull

WEIGHTS = bytes(range(256)) * 4096  # 1 MiB
PROJECTOR = b"projector" * 1000

CATALOG = """
catalog_version = 1

[[models]]
id = "tiny:1b"
name = "Tiny"
engine = "ggml_llama"
modality = "text_generation"
architecture = "llama"

[[models.variants]]
quant = "Q8_0"
default = true

[[models.variants.files]]
role = "weights"
repo = "acme/tiny-GGUF"
remote = "tiny-Q8_0.gguf"
local = "tiny/tiny-Q8_0.gguf"
size = {weights}

[[models.variants.files]]
role = "aux"
repo = "{base}/assets"
remote = "mmproj.gguf"
local = "tiny/mmproj.gguf"
size = {projector}

[[models.variants]]
quant = "Q4_0"

[[models.variants.files]]
role = "weights"
repo = "acme/tiny-GGUF"
remote = "tiny-Q4_0.gguf"
local = "tiny/tiny-Q4_0.gguf"
size = 999

[[models]]
id = "whisper:tiny"
name = "Whisper"
engine = "faster_whisper"
modality = "speech_to_text"

[[models.variants]]
quant = "fp16"

[[models.variants.files]]
role = "weights"
repo = "acme/whisper"
remote = "/"
local = "whisper/"

[[models]]
id = "locked"
name = "Locked"
engine = "ggml_llama"
modality = "text_generation"

[[models.variants]]
quant = "Q8_0"

[[models.variants.files]]
role = "weights"
repo = "corp/locked"
remote = "locked.gguf"
local = "locked.gguf"
gated = true
"""


@pytest.fixture
def hub(monkeypatch: pytest.MonkeyPatch) -> Hub:
    with stand_in_hub() as hub:
        hub.files[("acme/tiny-GGUF", "tiny-Q8_0.gguf")] = WEIGHTS
        hub.files[("acme/tiny-GGUF", "tiny-Q4_0.gguf")] = b"q4" * 100
        hub.files[("assets", "mmproj.gguf")] = PROJECTOR
        hub.files[("corp/locked", "locked.gguf")] = b"secret"
        hub.files[("acme/whisper", "model.bin")] = b"weights" * 100
        hub.files[("acme/whisper", "sub/vocab.json")] = b"{}"
        hub.gated.add("corp/locked")
        monkeypatch.setenv("HF_ENDPOINT", hub.url)
        monkeypatch.setenv("HF_HUB_OFFLINE", "1")  # the loopback stand-in is the one hub a download may reach
        monkeypatch.setattr(constants, "DOWNLOAD_CHUNK_SIZE", 64 * 1024)  # chunks smaller than the test files
        yield hub


def catalog_for(hub: Hub, tmp_path: Path) -> Path:
    path = tmp_path / "models.catalog.toml"
    path.write_text(CATALOG.format(weights=len(WEIGHTS), projector=len(PROJECTOR), base=hub.url))
    return path


def test_pull_fetches_every_file_with_progress_and_is_idempotent(hub: Hub, tmp_path: Path) -> None:
    catalog = Catalog.load(catalog_for(hub, tmp_path), None)
    assert catalog is not None
    out = io.StringIO()
    report = pull(catalog, "tiny:1b", tmp_path / "models", out)
    assert report.fetched == ["tiny/tiny-Q8_0.gguf", "tiny/mmproj.gguf"] and report.outdated == []
    assert (tmp_path / "models/tiny/tiny-Q8_0.gguf").read_bytes() == WEIGHTS
    assert (tmp_path / "models/tiny/mmproj.gguf").read_bytes() == PROJECTOR
    assert "tiny/mmproj.gguf" in out.getvalue() and "100%" in out.getvalue()  # a progress bar per file
    assert not (tmp_path / "models/.hypnos-downloads").exists() or not any(
        (tmp_path / "models/.hypnos-downloads").iterdir()
    )
    again = pull(catalog, "tiny:1b", tmp_path / "models", io.StringIO())
    assert again.fetched == [] and again.present == ["tiny/tiny-Q8_0.gguf", "tiny/mmproj.gguf"]


def test_an_interrupted_download_resumes(hub: Hub, tmp_path: Path) -> None:
    catalog = Catalog.load(catalog_for(hub, tmp_path), None)
    assert catalog is not None
    hub.cut_once.update({"tiny-Q8_0.gguf", "mmproj.gguf"})
    with pytest.raises(DownloadError, match="run it again to resume"):
        pull(catalog, "tiny:1b:Q8_0", tmp_path / "models", io.StringIO())
    # huggingface_hub resumed the weights itself; the projector's connection was cut: it waits for the next run
    assert (tmp_path / "models/tiny/tiny-Q8_0.gguf").read_bytes() == WEIGHTS
    assert not (tmp_path / "models/tiny/mmproj.gguf").exists()
    report = pull(catalog, "tiny:1b:Q8_0", tmp_path / "models", io.StringIO())
    assert report.fetched == ["tiny/mmproj.gguf"] and report.present == ["tiny/tiny-Q8_0.gguf"]
    assert (tmp_path / "models/tiny/mmproj.gguf").read_bytes() == PROJECTOR
    ranges = [r for method, path, r in hub.requests if method == "GET" and r and not r.startswith("bytes=0-")]
    assert ranges == [f"bytes={len(WEIGHTS) // 2}-", f"bytes={len(PROJECTOR) // 2}-"]  # only what was missing


def test_a_size_mismatch_is_reported_as_outdated(hub: Hub, tmp_path: Path) -> None:
    catalog = Catalog.load(catalog_for(hub, tmp_path), None)
    assert catalog is not None
    out = io.StringIO()
    report = pull(catalog, "tiny:1b:Q4_0", tmp_path / "models", out)
    assert report.outdated == ["tiny/tiny-Q4_0.gguf"]
    assert "outdated, 200 bytes where the catalog lists 999" in out.getvalue()


def test_a_folder_comes_whole(hub: Hub, tmp_path: Path) -> None:
    catalog = Catalog.load(catalog_for(hub, tmp_path), None)
    assert catalog is not None
    report = pull(catalog, "whisper:tiny", tmp_path / "models", io.StringIO())
    assert report.fetched == ["whisper/"]
    assert (tmp_path / "models/whisper/model.bin").read_bytes() == b"weights" * 100
    assert (tmp_path / "models/whisper/sub/vocab.json").read_bytes() == b"{}"
    assert not (tmp_path / "models/whisper/.cache").exists()
    assert pull(catalog, "whisper:tiny", tmp_path / "models", io.StringIO()).present == ["whisper/"]


def test_gated_files_are_explained(hub: Hub, tmp_path: Path) -> None:
    catalog = Catalog.load(catalog_for(hub, tmp_path), None)
    assert catalog is not None
    with pytest.raises(DownloadError, match=r"gated repository corp/locked.*accept the model's license.*HF_TOKEN"):
        pull(catalog, "locked", tmp_path / "models", io.StringIO())


def test_offline_refuses_any_hub_but_the_loopback_stand_in(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setenv("HF_ENDPOINT", "https://huggingface.co")
    catalog = Catalog.load(catalog_for(Hub(url="https://example.org"), tmp_path), None)
    assert catalog is not None
    with pytest.raises(DownloadError, match="HF_HUB_OFFLINE is set, so nothing is downloaded from https://huggingface"):
        pull(catalog, "tiny:1b", tmp_path / "models", io.StringIO())


def test_the_cli_pulls_and_prints_catalog_blocks(hub: Hub, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    catalog = catalog_for(hub, tmp_path)
    config = tmp_path / "hypnos.toml"
    config.write_text('models_dir = "models"\n')
    assert main(["models", "pull", "tiny:1b", "--config", str(config), "--catalog", str(catalog)]) == 0
    assert (tmp_path / "models/tiny/tiny-Q8_0.gguf").stat().st_size == len(WEIGHTS)
    other = tmp_path / "elsewhere"
    assert main(["models", "pull", "tiny:1b", "--models-dir", str(other), "--catalog", str(catalog)]) == 0
    assert (other / "tiny/mmproj.gguf").read_bytes() == PROJECTOR
    assert main(["models", "pull", "locked", "--config", str(config), "--catalog", str(catalog)]) == 1
    assert "gated" in capsys.readouterr().err
    assert main(["--catalog-block", "tiny:1b:Q8_0", "--catalog", str(catalog)]) == 0
    printed = capsys.readouterr().out
    assert printed.startswith("# Tiny (Q8_0)") and 'weights_path = "tiny/tiny-Q8_0.gguf"' in printed
    assert 'aux_path = "tiny/mmproj.gguf"' in printed


def test_hypnos_pull_downloads_with_progress_when_no_server_runs(hub: Hub, tmp_path: Path, capsys) -> None:
    from hypnos_server import cli
    from hypnos_server.testing import free_port

    catalog = catalog_for(hub, tmp_path)
    nowhere = f"http://127.0.0.1:{free_port()}"
    argv = ["--catalog", str(catalog), "pull", "tiny:1b", "--models-dir", str(tmp_path / "models"), "--url", nowhere]
    assert cli.main(argv) == 0
    assert (tmp_path / "models" / "tiny" / "tiny-Q8_0.gguf").read_bytes() == WEIGHTS
    captured = capsys.readouterr()
    assert "2 fetched, 0 already present" in captured.out and "100%" in captured.err  # a progress bar
    assert cli.main(argv) == 0
    assert "0 fetched, 2 already present" in capsys.readouterr().out
