"""Import-circle check: every package's intra-package import graph must be acyclic (a lint step; stdlib only).

Every import counts, wherever it sits: module level, under `if TYPE_CHECKING:`, inside a function (a lazy import that
only dodges a circle is still a circle). Relative imports are resolved, and `from pkg import name` is an edge to the
module `pkg.name` when there is one, else to `pkg`. Importing a submodule is not counted as importing its parent
packages. Prints each strongly connected component of more than one module (or a module importing itself) with the
imports that make it, and exits 1 if there is any.

Usage: python tools/import_cycles.py [ROOT]   (ROOT: the repository, default the folder above this file)
"""

from __future__ import annotations

import ast
import sys
from collections.abc import Iterator
from pathlib import Path

# Circles accepted for now, each a set of module names with the reason it stays. Keep it empty.
ALLOWED: dict[frozenset[str], str] = {}


def package_dirs(root: Path) -> Iterator[Path]:
    """The import packages of the monorepo: hypnos, hypnos_server and each plugin's hypnos_* package."""
    yield root / "core" / "src" / "hypnos"
    yield root / "server" / "src" / "hypnos_server"
    yield from sorted(p for p in (root / "plugins").glob("*/src/hypnos_*") if (p / "__init__.py").is_file())


def module_files(package: Path) -> dict[str, Path]:
    """Dotted module name -> file, for every module under the package folder."""
    modules: dict[str, Path] = {}
    for path in sorted(package.rglob("*.py")):
        parts = list(path.relative_to(package.parent).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts.pop()
        modules[".".join(parts)] = path
    return modules


def imported_modules(name: str, path: Path, modules: dict[str, Path]) -> Iterator[tuple[str, int]]:
    """(module of this package, line) for every import in the module `name`."""
    is_package = path.name == "__init__.py"
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"), filename=str(path))):
        if isinstance(node, ast.Import):
            for alias in node.names:
                target = _deepest_known(alias.name, modules)
                if target is not None:
                    yield target, node.lineno
        elif isinstance(node, ast.ImportFrom):
            base = _resolve_from(name, is_package, node.module, node.level)
            if base is None:
                continue
            for alias in node.names:
                child = f"{base}.{alias.name}"
                if child in modules:
                    yield child, node.lineno
                elif base in modules:
                    yield base, node.lineno


def _deepest_known(dotted: str, modules: dict[str, Path]) -> str | None:
    parts = dotted.split(".")
    for end in range(len(parts), 0, -1):
        candidate = ".".join(parts[:end])
        if candidate in modules:
            return candidate
    return None


def _resolve_from(name: str, is_package: bool, module: str | None, level: int) -> str | None:
    if level == 0:
        return module
    parts = name.split(".") if is_package else name.split(".")[:-1]
    if level > 1:
        parts = parts[: len(parts) - (level - 1)]
    if not parts:
        return None
    return ".".join([*parts, module] if module else parts)


def strongly_connected(graph: dict[str, set[str]]) -> list[list[str]]:
    """Tarjan's algorithm, iterative: the strongly connected components of the graph."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    components: list[list[str]] = []
    for start in sorted(graph):
        if start in index:
            continue
        work = [(start, iter(sorted(graph[start])))]
        index[start] = low[start] = len(index)
        stack.append(start)
        on_stack.add(start)
        while work:
            node, children = work[-1]
            for child in children:
                if child not in index:
                    index[child] = low[child] = len(index)
                    stack.append(child)
                    on_stack.add(child)
                    work.append((child, iter(sorted(graph[child]))))
                    break
                if child in on_stack:
                    low[node] = min(low[node], index[child])
            else:
                work.pop()
                if work:
                    parent = work[-1][0]
                    low[parent] = min(low[parent], low[node])
                if low[node] == index[node]:
                    component = []
                    while True:
                        member = stack.pop()
                        on_stack.discard(member)
                        component.append(member)
                        if member == node:
                            break
                    components.append(sorted(component))
    return components


def circles(root: Path) -> list[tuple[list[str], list[str]]]:
    """Each circle not allowed: its modules and the imports (module:line -> module) that close it."""
    found: list[tuple[list[str], list[str]]] = []
    for package in package_dirs(root):
        modules = module_files(package)
        graph: dict[str, set[str]] = {m: set() for m in modules}
        lines: dict[tuple[str, str], int] = {}
        for name, path in modules.items():
            for target, line in imported_modules(name, path, modules):
                graph[name].add(target)
                lines.setdefault((name, target), line)
        for component in strongly_connected(graph):
            members = set(component)
            if len(component) == 1 and component[0] not in graph[component[0]]:
                continue
            if frozenset(component) in ALLOWED:
                continue
            edges = [
                f"{source}:{lines[source, target]} -> {target}"
                for source in component
                for target in sorted(graph[source] & members)
            ]
            found.append((component, edges))
    return found


def main(argv: list[str]) -> int:
    """Print every circle; 1 if there is any."""
    root = Path(argv[1]) if len(argv) > 1 else Path(__file__).resolve().parent.parent
    found = circles(root)
    for component, edges in found:
        print(f"import circle: {', '.join(component)}")
        for edge in edges:
            print(f"    {edge}")
    if found:
        print(f"{len(found)} import circle(s)")
        return 1
    print("no import circles")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
