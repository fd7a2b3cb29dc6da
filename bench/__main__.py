"""`python -m bench` lists the benches; `python -m bench NAME [ARGS]` runs one (`llama` or `llama_bench`)."""

from __future__ import annotations

import ast
import runpy
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent


def benches() -> dict[str, str]:
    """Every bench module in this folder with the first line of its docstring."""
    found: dict[str, str] = {}
    for path in sorted(HERE.glob("*_bench.py")):
        doc = ast.get_docstring(ast.parse(path.read_text(encoding="utf-8"))) or ""
        found[path.stem] = doc.splitlines()[0] if doc else ""
    return found


def main(argv: list[str]) -> int:
    """List the benches, or run the one named with the rest of the arguments."""
    found = benches()
    if not argv or argv[0] in ("-h", "--help", "list"):
        width = max(len(name) for name in found)
        sys.stdout.write("Benches (run one: `nox -s bench -- NAME [ARGS]` or `python -m bench NAME [ARGS]`):\n")
        for name, line in found.items():
            sys.stdout.write(f"  {name:<{width}}  {line}\n")
        sys.stdout.write("Targets and last figures: bench/README.md\n")
        return 0
    name = argv[0] if argv[0].endswith("_bench") else f"{argv[0]}_bench"
    if name not in found:
        sys.stderr.write(f"no bench {argv[0]!r}; `python -m bench` lists them\n")
        return 2
    sys.argv = [f"bench.{name}", *argv[1:]]
    runpy.run_module(f"bench.{name}", run_name="__main__", alter_sys=True)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
