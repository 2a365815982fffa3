"""The library's signatures say what a loader is ("``Any`` only where a value really is
anything"): no parameter named ``loader`` is annotated ``Any`` in ``datapipes`` or
``torch_threadloader``; it is a ``ThreadLoader``, its public settings (``plan.Settings``), or
what an epoch reads of it (``inputs.EpochInputs``)."""

from __future__ import annotations

import ast
from pathlib import Path

from torch_threadloader import ThreadLoader
from torch_threadloader.inputs import EpochInputs
from torch_threadloader.plan import LoaderPlan, Settings
from torch_threadloader.processes.inputs import ChildInputs

ROOT = Path(__file__).resolve().parent.parent
PACKAGES = ("datapipes", "torch_threadloader")

#: ``loader: Any`` still allowed, as (file, function): none.
ALLOWED: set[tuple[str, str]] = set()


def _is_any(annotation: ast.expr | None) -> bool:
    """``Any``, ``typing.Any`` or ``"Any"`` (a string annotation)."""
    if annotation is None:
        return False
    if isinstance(annotation, ast.Constant) and isinstance(annotation.value, str):
        try:
            annotation = ast.parse(annotation.value, mode="eval").body
        except SyntaxError:
            return False
    if isinstance(annotation, ast.Name):
        return annotation.id == "Any"
    return isinstance(annotation, ast.Attribute) and annotation.attr == "Any"


def _loader_any(tree: ast.Module) -> list[str]:
    """The qualified names of functions with a ``loader: Any`` parameter, and of classes with a
    ``loader: Any`` field (a dataclass's is a parameter of its ``__init__``)."""
    found: list[str] = []

    def visit(node: ast.AST, prefix: str) -> None:
        for child in ast.iter_child_nodes(node):
            if isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef)):
                name = prefix + child.name
                a = child.args
                params = [*a.posonlyargs, *a.args, *a.kwonlyargs, *filter(None, (a.vararg, a.kwarg))]
                if any(p.arg == "loader" and _is_any(p.annotation) for p in params):
                    found.append(name)
                visit(child, name + ".")
            elif isinstance(child, ast.ClassDef):
                name = prefix + child.name
                for item in child.body:
                    if (
                        isinstance(item, ast.AnnAssign)
                        and isinstance(item.target, ast.Name)
                        and item.target.id == "loader"
                        and _is_any(item.annotation)
                    ):
                        found.append(name)
                visit(child, name + ".")

    visit(tree, "")
    return found


def test_no_library_signature_takes_loader_any() -> None:
    offenders = []
    for package in PACKAGES:
        for path in sorted((ROOT / package).rglob("*.py")):
            rel = path.relative_to(ROOT).as_posix()
            tree = ast.parse(path.read_text(), filename=rel)
            offenders += [(rel, name) for name in _loader_any(tree) if (rel, name) not in ALLOWED]
    assert offenders == [], "annotate the loader as ThreadLoader (under TYPE_CHECKING), LoaderPlan or a Protocol"


def test_the_check_sees_each_spelling() -> None:
    source = (
        "import typing\n"
        "def a(loader: Any): ...\n"
        "def b(x, *, loader: typing.Any = None): ...\n"
        "def c(loader: 'Any'): ...\n"
        "class D:\n"
        "    loader: Any = None\n"
        "    def e(self, loader: Any): ...\n"
        "def f(loader: ThreadLoader[Any], other: Any): ...\n"
        "def g(loader): ...\n"
    )
    assert _loader_any(ast.parse(source)) == ["a", "b", "c", "D", "D.e"]


def test_a_loader_is_read_once_into_epoch_inputs_and_a_worker_process_gets_a_plan() -> None:
    loader = ThreadLoader(list(range(8)), batch_size=2, worker_processes=1)
    try:
        settings: Settings = loader  # mypy checks that a ThreadLoader is the plan's Settings
        inputs = loader._inputs()
        assert isinstance(inputs, EpochInputs) and inputs.plan is loader._plan and inputs.dataset is loader.dataset
        assert inputs.index_sampler is loader._index_sampler and settings.batch_size == 2
        plan = ChildInputs.of(inputs).graph_plan()  # no fake loader in the child: the plan itself
        assert isinstance(plan, LoaderPlan) and plan.worker_processes == 0
    finally:
        loader.close()
