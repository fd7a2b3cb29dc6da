"""The lint step's import-circle check: lazy, TYPE_CHECKING and relative imports all close a circle."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
SPEC = importlib.util.spec_from_file_location("import_cycles", ROOT / "tools" / "import_cycles.py")
assert SPEC is not None and SPEC.loader is not None
import_cycles = importlib.util.module_from_spec(SPEC)
SPEC.loader.exec_module(import_cycles)


def _tree(root: Path, files: dict[str, str]) -> Path:
    for name, text in files.items():
        path = root / "core" / "src" / "hypnos" / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    (root / "plugins").mkdir(exist_ok=True)
    return root


def test_the_repository_has_no_import_circle(capsys: pytest.CaptureFixture[str]) -> None:
    assert import_cycles.main(["import_cycles", str(ROOT)]) == 0
    assert "no import circles" in capsys.readouterr().out


def test_a_lazy_and_a_type_checking_import_make_a_circle(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    _tree(
        tmp_path,
        {
            "__init__.py": "",
            "sub/__init__.py": "",
            "sub/a.py": "def f():\n    from hypnos.sub import b\n",
            "sub/b.py": "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from . import a\n",
            "c.py": "from hypnos.sub.a import f\n",
        },
    )
    assert import_cycles.main(["import_cycles", str(tmp_path)]) == 1
    out = capsys.readouterr().out
    assert "import circle: hypnos.sub.a, hypnos.sub.b" in out
    assert "hypnos.c" not in out  # importing into a circle is not being in it


def test_a_module_importing_itself_is_a_circle(tmp_path: Path) -> None:
    _tree(tmp_path, {"__init__.py": "", "x.py": "import hypnos.x\n"})
    assert import_cycles.main(["import_cycles", str(tmp_path)]) == 1
