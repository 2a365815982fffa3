"""The public surface: ``datapipes.__all__`` is sorted and complete, every public module's
``__all__`` is re-exported, and what is exported is documented and typed."""

from __future__ import annotations

import importlib
import inspect
import pkgutil
import types
from pathlib import Path

import torch.utils.data

import datapipes

PUBLIC_MODULES = sorted(
    name
    for _, name, _ in pkgutil.iter_modules(datapipes.__path__, prefix="datapipes.")
    if not name.rsplit(".", 1)[1].startswith("_")
)

NODES = [
    "AsyncFetcher",
    "Batcher",
    "Collator",
    "Filter",
    "Header",
    "IterableWrapper",
    "Prefetcher",
    "Reorderer",
    "Sampler",
    "Shuffler",
    "ThreadMapper",
    "Unbatcher",
]


def test_all_is_sorted_and_without_duplicates() -> None:
    assert datapipes.__all__ == sorted(datapipes.__all__)
    assert len(set(datapipes.__all__)) == len(datapipes.__all__)


def test_every_name_in_all_exists() -> None:
    for name in datapipes.__all__:
        assert hasattr(datapipes, name), name


def test_every_public_attribute_of_the_package_is_in_all() -> None:
    public = {
        name
        for name, value in vars(datapipes).items()
        if not name.startswith("_") and not isinstance(value, types.ModuleType) and name != "annotations"
    }
    assert public == set(datapipes.__all__)


def test_every_public_module_has_a_sorted_all_that_the_package_re_exports() -> None:
    assert PUBLIC_MODULES  # the package was found
    for module_name in PUBLIC_MODULES:
        module = importlib.import_module(module_name)
        assert hasattr(module, "__all__"), module_name
        assert module.__all__ == sorted(module.__all__), module_name
        for name in module.__all__:
            assert name in datapipes.__all__, f"{module_name}.{name} is not re-exported"
            assert getattr(datapipes, name) is getattr(module, name)


def test_every_public_class_and_function_of_a_module_is_in_its_all() -> None:
    for module_name in PUBLIC_MODULES:
        module = importlib.import_module(module_name)
        defined_here = {
            name
            for name, value in vars(module).items()
            if not name.startswith("_")
            and (inspect.isclass(value) or inspect.isfunction(value))
            and value.__module__ == module_name
        }
        assert defined_here <= set(module.__all__), (module_name, defined_here - set(module.__all__))


def test_the_issue_nodes_are_exported_as_iterable_datasets() -> None:
    for name in NODES:
        cls = getattr(datapipes, name)
        assert issubclass(cls, datapipes.Node), name
        assert issubclass(cls, torch.utils.data.IterableDataset), name


def test_exports_are_documented() -> None:
    for name in datapipes.__all__:
        value = getattr(datapipes, name)
        if inspect.isclass(value) or inspect.isfunction(value):
            assert inspect.getdoc(value), f"{name} has no docstring"


def test_the_package_is_typed() -> None:
    assert (Path(datapipes.__file__).parent / "py.typed").is_file()
