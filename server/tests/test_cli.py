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


class _Point:
    """An installed entry point of group `hypnos` (what importlib.metadata lists), loading `target`."""

    dist = None

    def __init__(self, name, target):  # type: ignore[no-untyped-def]
        self.name, self._target = name, target

    def load(self):  # type: ignore[no-untyped-def]
        if isinstance(self._target, Exception):
            raise self._target
        return self._target


class _Typo:
    @hookimpl
    def hypnos_engine_kind(self):  # the hook is hypnos_engine_kinds
        return []


class _Routes:
    @hookimpl
    def hypnos_routes(self):
        from litestar import get

        @get("/v1/hello", sync_to_thread=False)
        def hello() -> str:
            return "hi"

        return [hello]

    @hookimpl
    def hypnos_speech_detectors(self):
        from hypnos_server.plugin_api import SpeechDetectorKind
        from hypnos_server.realtime.vad import EnergyDetector

        return [SpeechDetectorKind("hum", EnergyDetector, "a level gate under another name", blocking=False)]


def _installed(monkeypatch, *points):  # type: ignore[no-untyped-def]
    from hypnos import plugins
    from hypnos.testing import fake_plugin

    listed = [_Point("fake", fake_plugin), *points]
    monkeypatch.setattr(plugins, "entry_points", lambda group: listed if group == "hypnos" else [])
    monkeypatch.delenv("HYPNOS_CONFIG", raising=False)
    monkeypatch.delenv("HYPNOS_PLUGINS", raising=False)


def _free_port() -> int:
    import socket

    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def test_serve_stops_with_exit_2_and_one_line_naming_a_misspelled_plugin(tmp_path, monkeypatch, capsys):
    _installed(monkeypatch, _Point("typo", _Typo()))
    path = tmp_path / "hypnos.toml"
    path.write_text(f"[server]\nport = {_free_port()}\n")
    assert cli.main(["serve", "--config", str(path)]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "Traceback" not in err
    assert "`typo`" in err and "`hypnos_engine_kind`" in err and 'plugin_errors = "warn"' in err


def test_serve_stops_on_a_plugin_that_fails_to_import(tmp_path, monkeypatch, capsys):
    _installed(monkeypatch, _Point("broken", ImportError("No module named 'torch'")))
    path = tmp_path / "hypnos.toml"
    path.write_text(f"[server]\nport = {_free_port()}\n")
    assert cli.main(["serve", "--config", str(path)]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "`broken`" in err and "No module named 'torch'" in err


def test_plugin_errors_warn_starts_anyway(tmp_path, monkeypatch, capsys):
    import granian

    served = []

    class FakeGranian:
        def __init__(self, *args, **kwargs):  # type: ignore[no-untyped-def]
            pass

        def serve(self) -> None:
            served.append(True)

    monkeypatch.setattr(granian, "Granian", FakeGranian)
    _installed(monkeypatch, _Point("broken", ImportError("No module named 'torch'")))
    path = tmp_path / "hypnos.toml"
    path.write_text(f'[server]\nport = {_free_port()}\nplugin_errors = "warn"\n')
    assert cli.main(["serve", "--config", str(path)]) == 0
    assert served == [True]
    err = capsys.readouterr().err
    assert "warning" in err and "`broken`" in err


def test_plugins_lists_kinds_tables_routes_and_failures(monkeypatch, capsys):
    _installed(monkeypatch, _Point("routes", _Routes()), _Point("broken", ImportError("No module named 'torch'")))
    assert cli.main(["plugins"]) == 1  # something failed to load
    out = capsys.readouterr().out
    assert "engine kind fake:" in out and "[models.fake] layers," in out and "[models.image] edit" in out
    assert "route GET /v1/hello" in out
    assert "speech detector hum: a level gate under another name" in out
    assert "failed:" in out and "`broken`" in out and "No module named 'torch'" in out
    assert "`routes`" not in out.split("failed:")[1]  # hypnos_routes is the server's hook: known here


def test_serve_stops_on_a_speech_detector_nobody_offers(tmp_path, monkeypatch, capsys):
    _installed(monkeypatch, _Point("routes", _Routes()))
    path = tmp_path / "hypnos.toml"
    path.write_text(f'[server]\nport = {_free_port()}\nrealtime_vad = "silero"\n')
    assert cli.main(["serve", "--config", str(path)]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "realtime_vad" in err and "silero" in err and "hum" in err


def test_plugins_json(monkeypatch, capsys):
    import json

    _installed(monkeypatch, _Point("typo", _Typo()))
    assert cli.main(["plugins", "--json"]) == 1
    report = json.loads(capsys.readouterr().out)
    fake = next(p for p in report["plugins"] if p["name"] == "fake")
    (kind,) = fake["engine_kinds"]
    assert kind["name"] == "fake" and "layers" in kind["options"]["fake"] and "text_generation" in kind["modalities"]
    assert [p["plugin"] for p in report["failed"]] == ["typo"]
    assert "hypnos_engine_kind" in report["failed"][0]["error"]


def test_plugins_with_nothing_wrong_exits_0(monkeypatch, capsys):
    _installed(monkeypatch)
    assert cli.main(["plugins"]) == 0
    out = capsys.readouterr().out
    assert out.startswith("fake") and "failed" not in out
