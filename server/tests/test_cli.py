"""The `hypnos` command: config errors in one line naming the key, --version, starter."""

from __future__ import annotations

import subprocess
import sys
import tomllib

import pytest
from hypnos.config import load_settings
from hypnos.hookspecs import hookimpl
from hypnos_server import cli
from hypnos_server.starter import render_config, write_starter_config


@pytest.mark.parametrize(
    ("text", "key"),
    [
        ('[server]\nport = "high"\n', "server.port"),
        ("[limits]\nmax_body_byte = 5\n", "limits.max_body_byte"),
        ('[[models]]\nid = "m"\nmodality = "telepathy"\nengine = "fake"\n', "models[0].modality"),
    ],
)
def test_bad_config_is_one_line_naming_file_and_key(tmp_path, capsys, text, key):
    path = tmp_path / "bad.toml"
    path.write_text(text)
    assert cli.main(["serve", "--config", str(path)]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "Traceback" not in err
    assert str(path) in err and f"`{key}`" in err


def test_bad_config_exit_code_from_the_script(tmp_path):
    path = tmp_path / "bad.toml"
    path.write_text("[server]\nport = [1]\n")
    done = subprocess.run(
        [sys.executable, "-m", "hypnos_server.cli", "serve", "--config", str(path)], capture_output=True, text=True
    )
    assert done.returncode == 2
    assert "server.port" in done.stderr and "Traceback" not in done.stderr


def test_version(capsys):
    with pytest.raises(SystemExit) as exit_info:
        cli.main(["--version"])
    assert exit_info.value.code == 0
    assert capsys.readouterr().out.startswith("hypnos ")


class StarterPlugin:
    @hookimpl
    def hypnos_starter_models(self, models_dir):
        (models_dir / "tiny.gguf").write_bytes(b"x")
        return [
            {
                "id": "tiny:q8",
                "modality": "text_generation",
                "engine": "fake",
                "weights_path": "tiny.gguf",
                "modalities": ["vision"],
                "slots": 2,
                "arch": {"layers": 4, "name": 'quote"d'},
            }
        ]


def test_starter_writes_a_loadable_config(tmp_path):
    from hypnos.plugins import make_plugin_manager

    manager = make_plugin_manager(autoload=False, plugins=[StarterPlugin()])
    out = tmp_path / "conf" / "starter.toml"
    assert write_starter_config(manager, tmp_path / "models", out) == 1
    settings = load_settings(out, environ={})
    (model,) = settings.models
    assert (model.id, model.slots, model.weights_path) == ("tiny:q8", 2, "tiny.gguf")
    assert model.arch == {"layers": 4, "name": 'quote"d'}
    assert settings.models_path == (tmp_path / "models").resolve()
    assert [p.name for p in out.parent.iterdir()] == ["starter.toml"]


def test_render_config_nested_tables():
    text = render_config("/m", [{"id": "a", "modality": "embeddings", "engine": "x", "image": {"edit": True}}])
    assert tomllib.loads(text)["models"][0]["image"] == {"edit": True}


@pytest.mark.parametrize(
    ("table", "needles"),
    [
        ("[models.fakee]\nlayers = 2\n", ["`m`", "[models.fakee]"]),
        ("[models.fake]\nlayerz = 2\n", ["`m`", "[models.fake]", "`layerz`"]),
        ('[models.fake]\nlayers = "two"\n', ["`m`", "[models.fake]", "`layers`"]),
        ("[models.image]\nedit = 1\n", ["`m`", "[models.image]", "`edit`"]),
    ],
)
def test_bad_engine_table_is_one_line_naming_file_model_table_key(tmp_path, capsys, table, needles):
    path = tmp_path / "bad.toml"
    path.write_text(f'[[models]]\nid = "m"\nmodality = "embeddings"\nengine = "fake"\n{table}')
    assert cli.main(["serve", "--config", str(path)]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "Traceback" not in err
    assert str(path) in err and all(needle in err for needle in needles), err
