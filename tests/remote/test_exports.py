"""torch_threadloader.remote's public surface: every module's ``__all__`` sorted, complete and
documented; the package needs nothing from the loader's internals."""

from __future__ import annotations

import importlib
import inspect
import pkgutil
import types

import torch_threadloader.remote as remote

MODULES = ["torch_threadloader.remote"] + [
    f"torch_threadloader.remote.{m.name}" for m in pkgutil.iter_modules(remote.__path__)
]


def test_every_module_has_a_sorted_documented_all():
    for name in MODULES:
        module = importlib.import_module(name)
        assert inspect.getdoc(module), name
        assert module.__all__ == sorted(module.__all__), name
        for attr in module.__all__:
            value = getattr(module, attr)
            if inspect.isclass(value) or inspect.isfunction(value):
                assert value.__doc__, f"{name}.{attr}"


def test_the_package_all_is_complete():
    public = {
        name
        for name, value in vars(remote).items()
        if not name.startswith("_") and not isinstance(value, types.ModuleType) and name != "annotations"
    }
    assert public == set(remote.__all__)
