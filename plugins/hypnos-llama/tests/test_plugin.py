"""The plugin module: cheap to import, found through the entry point, hooks return the engine kind and starter."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from hypnos.config import LimitsConfig, ModelConfig
from hypnos.engine import EngineContext
from hypnos.plugins import collect_engine_kinds, make_plugin_manager
from hypnos.types import Modality


def test_plugin_import_does_not_load_llama_cpp() -> None:
    code = "import sys, hypnos_llama.plugin, hypnos_llama.engine; print('llama_cpp' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False"


def test_entry_point_registers_ggml_llama(tiny_gguf: Path) -> None:
    manager = make_plugin_manager(allow=["llama"])
    kinds = collect_engine_kinds(manager)
    kind = kinds["ggml_llama"]
    assert Modality.TEXT_GENERATION in kind.modalities and "llama" in kind.tables
    model = ModelConfig(id="t", modality="text_generation", engine="ggml_llama", weights_path=str(tiny_gguf))
    engine = kind.factory(model, EngineContext(models_dir=tiny_gguf.parent, limits=LimitsConfig()))
    assert engine.estimate().num_layers == 2


def test_a_llama_host_without_progress_is_ended_within_a_minute(tiny_gguf: Path) -> None:
    from hypnos.hosting.proxy import HostedEngine, host_factory_path

    kind = collect_engine_kinds(make_plugin_manager(allow=["llama"]))["ggml_llama"]
    model = ModelConfig(id="t", modality="text_generation", engine="ggml_llama", weights_path=str(tiny_gguf))
    context = EngineContext(models_dir=tiny_gguf.parent, limits=LimitsConfig())
    engine = HostedEngine(model, context, kind, host_factory_path(kind.factory) or "")
    assert engine.hang_secs == 60.0  # the batch loop shows progress every step: 300 s would hide a wedged host


def test_missing_library_is_a_503(monkeypatch) -> None:
    import builtins

    from hypnos.engine import EngineUnavailable
    from hypnos_llama.runtime import import_llama_cpp

    real_import = builtins.__import__

    def refuse(name, *args, **kwargs):  # type: ignore[no-untyped-def]
        if name == "llama_cpp":
            raise ImportError("no llama_cpp")
        return real_import(name, *args, **kwargs)

    monkeypatch.delitem(sys.modules, "llama_cpp", raising=False)
    monkeypatch.setattr(builtins, "__import__", refuse)
    try:
        import_llama_cpp()
    except EngineUnavailable as error:
        assert error.status == 503 and "llama-cpp-python" in error.message
    else:
        raise AssertionError("expected EngineUnavailable")


def test_bad_llama_table_stops_serve_with_one_line(tmp_path: Path, capsys) -> None:  # type: ignore[no-untyped-def]
    from hypnos_server import cli

    model = '[[models]]\nid = "q"\nmodality = "text_generation"\nengine = "ggml_llama"\n'
    for tables, needle in [("[models.llamma]\nn_batch = 4\n", "[models.llamma]"),
                           ("[models.llama]\nn_btach = 4\n", "[models.llama] key `n_btach`")]:  # fmt: skip
        path = tmp_path / "bad.toml"
        path.write_text(model + tables)
        assert cli.main(["serve", "--config", str(path)]) == 2
        err = capsys.readouterr().err
        assert err.count("\n") == 1 and str(path) in err and "`q`" in err and needle in err, err
