"""torch_threadloader's public surface: ``__all__`` sorted, complete and documented; the
dependency points one way (datapipes never imports torch_threadloader)."""

from __future__ import annotations

import ast
import importlib
import inspect
import types
from pathlib import Path

import torch_threadloader

ROOT = Path(__file__).resolve().parent.parent
MODULES = [
    "torch_threadloader",
    "torch_threadloader.loader",
    "torch_threadloader.worker_info",
    "torch_threadloader.fetch",
    "torch_threadloader.collate",
    "torch_threadloader.tools.cli",
    "torch_threadloader.tune",
    "torch_threadloader.resume",
    "torch_threadloader.stats",
    "torch_threadloader.skip",
    "torch_threadloader.budget",
    "torch_threadloader.concurrency",
    "torch_threadloader.over_budget",
    "torch_threadloader.kinds.by_cost",
]


def test_package_all_is_sorted_complete_and_documented():
    assert torch_threadloader.__all__ == sorted(torch_threadloader.__all__)
    public = {
        name
        for name, value in vars(torch_threadloader).items()
        if not name.startswith("_") and not isinstance(value, types.ModuleType) and name != "annotations"
    }
    assert public == set(torch_threadloader.__all__)
    for name in torch_threadloader.__all__:
        assert inspect.getdoc(getattr(torch_threadloader, name)), name


def test_module_alls_name_documented_objects():
    for module_name in MODULES:
        module = importlib.import_module(module_name)
        assert module.__all__ == sorted(module.__all__), module_name
        for name in module.__all__:
            assert inspect.getdoc(getattr(module, name)), f"{module_name}.{name}"


def test_datapipes_never_imports_torch_threadloader():
    for path in (ROOT / "datapipes").glob("*.py"):
        tree = ast.parse(path.read_text())
        for node in ast.walk(tree):
            names = []
            if isinstance(node, ast.Import):
                names = [alias.name for alias in node.names]
            elif isinstance(node, ast.ImportFrom) and node.module:
                names = [node.module]
            assert not any(n.split(".")[0] == "torch_threadloader" for n in names), path.name
