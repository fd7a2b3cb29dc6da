"""The layers hold: the contract, the kit and the engine plugins import nothing of the scheduler or the server
(not even for typing); a plugin's own routes reach the server through `hypnos_server.plugin_api` alone."""

from __future__ import annotations

import ast
from pathlib import Path

import hypnos

CORE = Path(hypnos.__file__).parent
REPO = CORE.parents[2]
FORBIDDEN = ("hypnos.scheduler", "hypnos_server")
PLUGIN_ROUTE_API = "hypnos_server.plugin_api"


def _imports(path: Path) -> list[str]:
    names = []
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            names += [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            names.append(node.module)
    return names


def test_contract_kit_and_plugins_import_no_scheduler() -> None:
    files = [CORE / "engine.py", CORE / "options.py", *(CORE / "kit").glob("*.py")]
    files += [*(CORE / "testing").glob("conformance*.py"), CORE / "testing" / "example_engine.py"]
    files += list((REPO / "plugins").glob("*/src/**/*.py"))
    bad = {
        f"{path.relative_to(REPO)}: {name}"
        for path in files
        for name in _imports(path)
        if name.startswith(FORBIDDEN) and name != PLUGIN_ROUTE_API
    }
    assert len(files) > 10 and bad == set()
