"""The GGUF header reader against the gguf package's own reader."""

from __future__ import annotations

from pathlib import Path

import pytest
from hypnos_llama.gguf_meta import GgufError, read_gguf


def test_reads_metadata_and_tensor_sizes_like_gguf_reader(tiny_gguf: Path) -> None:
    import gguf

    ours = read_gguf(tiny_gguf)
    theirs = gguf.GGUFReader(str(tiny_gguf))
    assert ours.arch == "llama"
    assert ours.arch_value("block_count") == 2
    assert ours.arch_value("attention.head_count_kv") == 2
    assert "im_start" in (ours.chat_template or "")
    assert ours.array_lengths["tokenizer.ggml.tokens"] == len(theirs.fields["tokenizer.ggml.tokens"].data)
    expected = {t.name: int(t.n_bytes) for t in theirs.tensors}
    sizes = {t.name: t.nbytes for t in ours.tensors}
    # sizes come from the offsets: the last tensor's runs to the end of the file, so it may count the file's final
    # alignment padding (under 32 bytes)
    last = max(theirs.tensors, key=lambda t: int(t.data_offset)).name
    assert 0 <= sizes.pop(last) - expected.pop(last) < 32
    assert sizes == expected


def test_rejects_a_file_that_is_not_gguf(tmp_path: Path) -> None:
    path = tmp_path / "x.gguf"
    path.write_bytes(b"not a gguf at all")
    with pytest.raises(GgufError):
        read_gguf(path)


def cut(path: Path, keep: int) -> None:
    path.write_bytes(path.read_bytes()[:keep])


def test_a_file_cut_in_its_tensors_is_refused_naming_the_missing_bytes(tiny_gguf: Path, tmp_path: Path) -> None:
    whole = read_gguf(tiny_gguf)
    last = max(whole.tensors, key=lambda tensor: tensor.offset)
    for keep in (
        tiny_gguf.stat().st_size - last.nbytes // 2 - 1,
        tiny_gguf.stat().st_size - sum(tensor.nbytes for tensor in whole.tensors) // 2,
    ):
        copy = tmp_path / "cut.gguf"
        copy.write_bytes(tiny_gguf.read_bytes())
        cut(copy, keep)
        with pytest.raises(GgufError, match="truncated"):
            read_gguf(copy)


def test_the_pool_api_refuses_a_gguf_cut_in_its_tensors(tmp_path: Path) -> None:
    from hypnos.config import settings_from_mapping
    from hypnos.plugins import make_plugin_manager
    from hypnos_llama import plugin as llama_plugin
    from hypnos_llama.testing import write_tiny_llama
    from hypnos_server.app import create_app
    from litestar.testing import TestClient

    models = tmp_path / "models"
    models.mkdir()
    weights = models / "cut.gguf"
    write_tiny_llama(weights, seed=1)
    cut(weights, weights.stat().st_size - 64)
    settings = settings_from_mapping({"models_dir": "models"}, str(tmp_path / "hypnos.toml"))
    app = create_app(settings, make_plugin_manager(autoload=False, plugins=[llama_plugin]))
    block = '[[models]]\nid = "cut"\nmodality = "text_generation"\nengine = "ggml_llama"\nweights_path = "cut.gguf"\n'
    with TestClient(app) as client:
        response = client.post("/v1/models", json={"config": block})
        assert response.status_code == 400, response.text
        assert "truncated" in response.json()["error"]["message"]
        assert client.get("/v1/models/cut").status_code == 404
