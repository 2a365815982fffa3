"""No helper under ``tests/`` is defined twice: a module-level function, class or fixture other
than a test (``test_*``, ``Test*``) has one name in one file, so a shared helper lives in
``tests/fixtures`` (or the nearest ``conftest.py``) and two helpers that do different jobs are
told apart by their names."""

from __future__ import annotations

import ast
from collections import defaultdict
from pathlib import Path

TESTS = Path(__file__).resolve().parent


def helper_names(path: Path) -> set[str]:
    """The functions and classes (fixtures included) the top level of ``path`` defines, tests
    left out."""
    return {
        node.name
        for node in ast.parse(path.read_text(), str(path)).body
        if isinstance(node, ast.ClassDef | ast.FunctionDef | ast.AsyncFunctionDef)
        and not node.name.startswith(("test_", "Test"))
    }


def helpers_in_several_files(tests: Path) -> list[str]:
    """``"NAME: file, file"`` for each helper name more than one ``.py`` under ``tests`` defines."""
    where: dict[str, list[str]] = defaultdict(list)
    for path in sorted(tests.rglob("*.py")):
        for name in helper_names(path):
            where[name].append(path.relative_to(tests).as_posix())
    return [f"{name}: {', '.join(paths)}" for name, paths in sorted(where.items()) if len(paths) > 1]


def test_no_helper_name_is_defined_in_two_files() -> None:
    assert helpers_in_several_files(TESTS) == []


def test_a_helper_defined_twice_is_named_with_its_files(tmp_path: Path) -> None:
    modules = {
        "conftest.py": "import pytest\n\n\n@pytest.fixture\ndef server():\n    return 1\n",
        "remote/conftest.py": "import pytest\n\n\n@pytest.fixture\ndef server():\n    return 2\n",
        "loader/test_a.py": "class Counted:\n    pass\n\n\nasync def load():\n    pass\n\n\ndef test_x():\n    pass\n",
        "loader/test_b.py": "def Counted():\n    pass\n\n\nload = 1\n\n\nclass TestX:\n    pass\n\n\ndef test_x():\n    pass\n",
        "ddp.py": "def main():\n    def load():\n        pass\n",
        "scripts/run.py": "def main():\n    pass\n",
    }
    for relative, text in modules.items():
        (tmp_path / relative).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / relative).write_text(text)
    assert helpers_in_several_files(tmp_path) == [
        "Counted: loader/test_a.py, loader/test_b.py",
        "main: ddp.py, scripts/run.py",
        "server: conftest.py, remote/conftest.py",
    ]
