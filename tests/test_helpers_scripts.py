"""The fixtures package, ``tests/fixtures/``: each name in it is defined once, no other test
module defines a class or function of the same name, and no helper name is defined in two files
under ``tests/``; the scripts' hang detector
(``tests/fixtures/scripts.py``) counts from the READY line, so a slow import is not a hang, and
a hang fails with every thread's stack; a file gate holds an item until the test opens it, and a
thread waiting in a call is told from one still running."""

from __future__ import annotations

import ast
import hashlib
import threading
import time
from collections import defaultdict
from pathlib import Path

import pytest

from tests.fixtures.datasets import FileGate, WaitsForFileAt
from tests.fixtures.scripts import run_timed
from tests.fixtures.threads import wait_until_blocked

TESTS = Path(__file__).resolve().parent


def top_level_names(path: Path, *, values: bool = True) -> set[str]:
    """The names the top level of the module at ``path`` defines: its classes and functions,
    and (``values``) the names it assigns; dunders left out."""
    names: set[str] = set()
    for node in ast.parse(path.read_text(), str(path)).body:
        if isinstance(node, ast.ClassDef | ast.FunctionDef | ast.AsyncFunctionDef):
            names.add(node.name)
        elif values and isinstance(node, ast.Assign):
            names.update(target.id for target in node.targets if isinstance(target, ast.Name))
        elif values and isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name):
            names.add(node.target.id)
    return {name for name in names if not (name.startswith("__") and name.endswith("__"))}


def defined_twice(tests: Path) -> list[str]:
    """``"NAME: where, where"`` for each name two modules of ``tests/fixtures/`` define, and for
    each class or function another module under ``tests`` defines at its top level with a name
    the fixtures define (a script's ``main`` is its own; a test's constants are its own)."""
    fixtures = tests / "fixtures"
    where: dict[str, list[str]] = defaultdict(list)
    for path in sorted(fixtures.glob("*.py")):
        for name in top_level_names(path):
            where[name].append(path.relative_to(tests).as_posix())
    twice = [f"{name}: {', '.join(paths)}" for name, paths in sorted(where.items()) if len(paths) > 1]
    for path in sorted(tests.rglob("*.py")):
        if fixtures in path.parents:
            continue
        for name in sorted(top_level_names(path, values=False) - {"main"}):
            if name in where:
                twice.append(f"{name}: {', '.join(where[name])}, {path.relative_to(tests).as_posix()}")
    return twice


def helpers_in_several_files(tests: Path) -> list[str]:
    """``"NAME: file, file"`` for each helper (a top-level class or function, fixtures included;
    tests, ``test_*`` and ``Test*``, left out) more than one ``.py`` under ``tests`` defines: a
    shared helper lives in ``tests/fixtures`` or the nearest ``conftest.py``, and two helpers
    that do different jobs are told apart by their names."""
    where: dict[str, list[str]] = defaultdict(list)
    for path in sorted(tests.rglob("*.py")):
        for name in top_level_names(path, values=False):
            if not name.startswith(("test_", "Test")):
                where[name].append(path.relative_to(tests).as_posix())
    return [f"{name}: {', '.join(paths)}" for name, paths in sorted(where.items()) if len(paths) > 1]


def test_each_fixture_is_defined_once() -> None:
    assert defined_twice(TESTS) == []


def test_no_helper_name_is_defined_in_two_files() -> None:
    assert helpers_in_several_files(TESTS) == []


def test_a_name_defined_twice_is_named_with_its_modules(tmp_path: Path) -> None:
    modules = {
        "fixtures/__init__.py": '"""The package."""\n',
        "fixtures/datasets.py": "class Items:\n    pass\n\n\nN = 23\n\n\ndef main() -> None:\n    pass\n",
        "fixtures/resume.py": "from tests.fixtures.datasets import Items\n\n\ndef N() -> int:\n    return 23\n",
        "loader/test_one.py": "N = 24\n\n\nclass Items:\n    pass\n\n\ndef main() -> None:\n    pass\n",
        "loader/test_two.py": "def test_items() -> None:\n    class Items:  # a test's own, inside it\n        pass\n",
    }
    for relative, text in modules.items():
        (tmp_path / relative).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / relative).write_text(text)
    assert defined_twice(tmp_path) == [
        "N: fixtures/datasets.py, fixtures/resume.py",
        "Items: fixtures/datasets.py, loader/test_one.py",
    ]


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


def test_the_budget_counts_from_the_ready_line_not_the_imports() -> None:
    # 4 s before the READY line, a budget of 3.5 s: it fails the script only if it counted
    # them. The budget leaves the exit after READY seconds of room on a loaded machine.
    result = run_timed('import time; time.sleep(4); print("READY", flush=True); print("done")', 3.5)
    assert result.returncode == 0 and result.lines == ["done"], result


def test_a_script_that_outlives_its_budget_fails_with_its_threads_stacks() -> None:
    code = """
    import threading, time
    print("READY", flush=True)
    def parked():
        time.sleep(60)
    threading.Thread(target=parked, name="parked").start()
    time.sleep(60)
    """
    with pytest.raises(pytest.fail.Exception, match="still running 1s after its imports") as failed:
        run_timed(code, 1)
    assert "in parked" in str(failed.value), str(failed.value)  # faulthandler's dump of that thread


def test_a_script_that_ends_before_its_ready_line_is_returned_as_it_ended() -> None:
    result = run_timed("raise SystemExit(3)", 1)
    assert result.returncode == 3


def test_a_file_gate_holds_its_item_until_opened_and_marks_it_stuck(tmp_path: Path) -> None:
    gate = FileGate(tmp_path)
    ds = WaitsForFileAt(4, 2, gate.release, gate.started)
    got: list[int] = []
    reader = threading.Thread(target=lambda: got.extend(ds[i] for i in range(4)))
    reader.start()
    try:
        assert gate.wait_stuck(30)
        assert got == [0, 1]  # held at item 2
    finally:
        gate.open()
        reader.join(30)
    assert got == [0, 1, 2, 3]


def test_wait_until_blocked_tells_a_waiting_thread_from_a_running_one() -> None:
    stop = threading.Event()
    ids: dict[str, int] = {}

    def wait() -> None:
        ids["waits"] = threading.get_native_id()
        stop.wait(30)

    def spin() -> None:
        ids["spins"] = threading.get_native_id()
        data = bytes(1 << 20)
        while not stop.is_set():  # hashing a MiB runs without the GIL where there is one
            hashlib.sha256(data).digest()

    threads = [threading.Thread(target=wait), threading.Thread(target=spin)]
    for thread in threads:
        thread.start()
    try:
        while len(ids) < 2:
            time.sleep(0.01)
        assert wait_until_blocked(ids["waits"], timeout=30)
        assert not wait_until_blocked(ids["spins"], timeout=0.5)
    finally:
        stop.set()
        for thread in threads:
            thread.join()
