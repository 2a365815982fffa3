"""The package's layers, read from its source: no import circle among ``torch_threadloader``'s
modules (counting every import: type-only and function-level too), and nothing below the
loader imports ``loader.py``: only the package face, the integrations and the user tools do."""

from __future__ import annotations

import ast
from collections.abc import Iterator
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PACKAGE = "torch_threadloader"
#: What may import ``torch_threadloader.loader``: the package face and what sits on top of the loader.
ABOVE_THE_LOADER = ("torch_threadloader", "torch_threadloader.integrations", "torch_threadloader.tools")


def _modules() -> dict[str, Path]:
    out = {}
    for path in sorted((ROOT / PACKAGE).rglob("*.py")):
        name = ".".join(path.relative_to(ROOT).with_suffix("").parts)
        out[name.removesuffix(".__init__")] = path
    return out


def _imported(module: str, path: Path, modules: dict[str, Path]) -> Iterator[str]:
    """The package's modules ``module`` imports anywhere in its source (a name imported from a
    package is its submodule when there is one)."""
    package = module if path.name == "__init__.py" else module.rpartition(".")[0]
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                parts = package.split(".")[: len(package.split(".")) - node.level + 1]
                base = ".".join([*parts, base] if base else parts)
            targets = [f"{base}.{alias.name}" if f"{base}.{alias.name}" in modules else base for alias in node.names]
        elif isinstance(node, ast.Import):
            targets = [alias.name for alias in node.names]
        else:
            continue
        for target in targets:
            while target and target not in modules:
                target = target.rpartition(".")[0]
            if target and target != module:
                yield target


def _graph() -> dict[str, set[str]]:
    modules = _modules()
    return {name: set(_imported(name, path, modules)) for name, path in modules.items()}


def _circles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components of more than one module (Tarjan, iteratively)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    circles: list[list[str]] = []
    for start in graph:
        if start in index:
            continue
        work = [(start, iter(sorted(graph[start])))]
        index[start] = low[start] = len(index)
        stack.append(start)
        on_stack.add(start)
        while work:
            node, children = work[-1]
            child = next(children, None)
            if child is not None:
                if child not in index:
                    index[child] = low[child] = len(index)
                    stack.append(child)
                    on_stack.add(child)
                    work.append((child, iter(sorted(graph.get(child, ())))))
                elif child in on_stack:
                    low[node] = min(low[node], index[child])
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[node])
            if low[node] == index[node]:
                component = []
                while True:
                    member = stack.pop()
                    on_stack.discard(member)
                    component.append(member)
                    if member == node:
                        break
                if len(component) > 1:
                    circles.append(sorted(component))
    return circles


def test_no_module_of_the_package_imports_another_that_imports_it_back() -> None:
    assert _circles(_graph()) == []


def test_the_check_finds_a_circle_made_of_type_only_and_function_level_imports(tmp_path: Path) -> None:
    graph = {"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}
    assert _circles(graph) == [["a", "b", "c"]]
    modules = {"p": ROOT, "p.x": ROOT / "x.py", "p.y": ROOT / "y.py"}
    source = (
        "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from p.y import Y\ndef f():\n    from p import x\n"
    )
    probe = tmp_path / "z.py"
    probe.write_text(source)
    assert set(_imported("p.z", probe, modules)) == {"p.y", "p.x"}


def test_nothing_below_the_loader_imports_it() -> None:
    importers = sorted(name for name, targets in _graph().items() if f"{PACKAGE}.loader" in targets)
    below = [
        name
        for name in importers
        if name != PACKAGE and not any(name == top or name.startswith(top + ".") for top in ABOVE_THE_LOADER[1:])
    ]
    assert below == []
    assert PACKAGE in importers  # the check sees the package face's import
