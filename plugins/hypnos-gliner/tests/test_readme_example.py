"""The root README's entity extraction examples (curl and Python, marked `# plugin: hypnos-gliner`) run against a
real server with the GLiNER engine (the tiny random model served as `gliner-multi`) and print labelled entities."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pytest

pytestmark = pytest.mark.model

ROOT = Path(__file__).resolve().parents[3]
PLUGIN = "hypnos-gliner"
LABELS = {"person", "city", "company", "product"}
TEXTS = ["Mario Rossi works in Milan for Ferrari.", "Tim Cook announced the iPhone 17 in Cupertino."]


@pytest.fixture(scope="module")
def served(models_dir: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[str, Path]]:
    """A keyless server serving the tiny GLiNER as the README's `gliner-multi`, and a working folder."""
    from hypnos_gliner.testing import TINY_NAME
    from hypnos_server.testing import live_server

    folder = tmp_path_factory.mktemp("readme")
    config = folder / "hypnos.toml"
    config.write_text(
        f'models_dir = "{models_dir}"\n\n[[models]]\nid = "gliner-multi"\nmodality = "entity_extraction"\n'
        f'engine = "gliner"\nweights_path = "{TINY_NAME}"\n',
        encoding="utf-8",
    )
    with live_server(config) as base:
        yield base, folder


def test_the_curl_example_finds_labelled_entities(served: tuple[str, Path]) -> None:
    from hypnos_server.testing import readme_example_output

    base, work = served
    output = readme_example_output(ROOT / "README.md", "bash", PLUGIN, base, work)
    answer = json.loads(output)
    assert answer["model"] == "gliner-multi" and [text["index"] for text in answer["data"]] == [0, 1]
    found = [(text["index"], entity) for text in answer["data"] for entity in text["entities"]]
    assert found, answer
    for index, entity in found:
        assert entity["label"] in LABELS and entity["score"] >= 0.5
        assert TEXTS[index][entity["start"] : entity["end"]] == entity["text"]


def test_the_python_example_prints_labelled_entities(served: tuple[str, Path]) -> None:
    from hypnos_server.testing import readme_example_output

    base, work = served
    output = readme_example_output(ROOT / "README.md", "python", PLUGIN, base, work)
    lines = output.splitlines()
    assert lines, "the example printed no entity"
    for line in lines:
        label, rest = line.split(" ", 1)
        text, start, end = rest.rsplit(" ", 2)
        assert label in LABELS and any(given[int(start) : int(end)] == text for given in TEXTS), line
