"""POST /v1/models, PUT /v1/models/{id}: a hostile block is a 400 naming its key, never a 500, and is not persisted."""

from __future__ import annotations

from pathlib import Path

import pytest
from hypnos.config import settings_from_mapping
from hypnos.config_checks import MAX_BLOCK_CHARS
from hypnos.plugins import make_plugin_manager
from hypnos.testing import fake_plugin
from hypnos_server.app import create_app
from litestar.testing import TestClient
from server_kit import error_of, wait_ready

HEAD = '[[models]]\nid = "{id}"\nmodality = "text_generation"\nengine = "fake"\n'


def block(model_id: str = "added", **lines: str) -> str:
    return HEAD.format(id=model_id) + "".join(f"{key} = {value}\n" for key, value in lines.items())


# (the config text, a fragment the 400's message must carry)
HOSTILE = [
    (block(weights_path='"w\\u0000.gguf"'), "`models[0].weights_path`"),
    (block(tokenizer_path='"tok\\nenizer"'), "`models[0].tokenizer_path`"),
    (block(slots="100000000"), "`models[0].slots`"),
    (block(slots="0"), "`models[0].slots`"),
    (block(context_len="100000000"), "`models[0].context_len`"),
    (block() + "[models.arch]\nnum_layers = -5\n", "`models[0].arch.num_layers`"),
    (block() + "[models.arch]\nvram_bytes = 1e300\n", "`models[0].arch.vram_bytes`"),
    (block() + "[models.fake]\ndeep = " + "[" * 3000 + "]" * 3000 + "\n", "nested too deeply"),
    (block() + "[models.fake]\ndeep = " + "[" * 20 + "]" * 20 + "\n", "nest more than"),
    (block() + "[models.arch]\n" + "".join(f"k{i} = {i}\n" for i in range(300)), "`models[0].arch`"),
    (block() + "[models.arch]\n" + "".join(f"k{i} = 1\n" for i in range(MAX_BLOCK_CHARS // 6)), "at most 65536"),
    (block("a/b"), "`models[0].id`"),
    (block("line\\nbreak"), "`models[0].id`"),
    (block("<b>html</b>"), "`models[0].id`"),
    (block("-leading"), "`models[0].id`"),
    (block("x" * 200), "`models[0].id`"),
]


@pytest.fixture
def pool(tmp_path: Path):
    raw = {"models_dir": "models", "models": [{"id": "base", "modality": "text_generation", "engine": "fake"}]}
    (tmp_path / "models").mkdir()
    settings = settings_from_mapping(raw, str(tmp_path / "hypnos.toml"))
    app = create_app(settings, make_plugin_manager(autoload=False, plugins=[fake_plugin]))
    with TestClient(app) as client:
        wait_ready(client)
        yield client


@pytest.mark.parametrize(("text", "named"), HOSTILE, ids=range(len(HOSTILE)))
def test_a_hostile_block_is_a_400_naming_the_key(pool: TestClient, tmp_path: Path, text: str, named: str) -> None:
    for response in (
        pool.post("/v1/models", json={"config": text}),
        pool.put("/v1/models/base", json={"config": text}),
    ):
        if "`models[0].id`" in named and response.request.method == "PUT":
            assert response.status_code == 200  # PUT keeps the route's id: the block's own is ignored
            continue
        assert response.status_code == 400, response.text
        error = error_of(response)
        assert error["type"] == "invalid_request_error"
        assert named in error["message"]
    assert (
        not (tmp_path / "hypnos.models.toml").exists() or "added" not in (tmp_path / "hypnos.models.toml").read_text()
    )


def test_the_id_alphabet_is_served_and_addressable(pool: TestClient) -> None:
    model_id = "Org.model_v2-q4:latest"
    assert pool.post("/v1/models", json={"config": block(model_id)}).status_code == 201
    assert pool.get(f"/v1/models/{model_id}").json()["id"] == model_id
    assert pool.put(f"/v1/models/{model_id}", json={"config": block("x", slots="2")}).status_code == 200
    assert pool.delete(f"/v1/models/{model_id}").json()["action"] == "removed"


def test_an_id_with_a_slash_could_never_be_removed_so_it_is_refused(pool: TestClient) -> None:
    assert pool.post("/v1/models", json={"config": block("a/b")}).status_code == 400
    assert pool.delete("/v1/models/a/b").status_code == 404  # one path segment only
    assert pool.delete("/v1/models/a%2Fb").status_code == 404  # an encoded separator is never routed


@pytest.mark.parametrize("name", ["LD_PRELOAD", "PYTHONPATH", "LD_LIBRARY_PATH", "PATH"])
def test_process_env_from_the_pool_api_is_limited_to_an_allow_list(pool: TestClient, name: str) -> None:
    hostile = block() + f'[models.process]\nenv = {{ {name} = "/tmp/evil", OMP_NUM_THREADS = "2" }}\n'
    for response in (
        pool.post("/v1/models", json={"config": hostile}),
        pool.put("/v1/models/base", json={"config": hostile}),
    ):
        assert response.status_code == 400, response.text
        assert f"`{name}`" in error_of(response)["message"] and "process.env" in error_of(response)["message"]
    assert pool.get("/v1/models/added").status_code == 404
    allowed = block() + '[models.process]\nenv = { CUDA_VISIBLE_DEVICES = "", OMP_NUM_THREADS = "2" }\n'
    assert pool.post("/v1/models", json={"config": allowed}).status_code == 201
