"""torch_threadloader.images' public surface: ``__all__`` sorted, complete and documented, in the
package and each module."""

from __future__ import annotations

import importlib
import inspect
import types

import torch_threadloader.images as images

MODULES = ["decode", "folder", "augment", "buffers"]


def test_package_all_is_sorted_complete_and_documented():
    assert images.__all__ == sorted(images.__all__)
    public = {
        name
        for name, value in vars(images).items()
        if not name.startswith("_") and not isinstance(value, types.ModuleType) and name != "annotations"
    }
    assert public == set(images.__all__)
    exported = set()
    for module_name in MODULES:
        module = importlib.import_module(f"torch_threadloader.images.{module_name}")
        assert module.__all__ == sorted(module.__all__), module_name
        exported |= set(module.__all__)
    assert exported == set(images.__all__)
    for name in images.__all__:
        value = getattr(images, name)
        if isinstance(value, int | frozenset) or name == "ImageMode":
            continue  # constants and a type alias: documented in their module and docs/images.md
        assert inspect.getdoc(value), name
