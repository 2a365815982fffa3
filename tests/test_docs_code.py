"""The docs' Python runs, and their links resolve.

Every ```python block of ``docs/*.md`` and ``README.md`` is run, offline: the blocks of one file
in order, in one namespace (a later block may use what an earlier one defined), in a fresh
interpreter per file whose working directory is a temporary folder. A failing block fails the
test of its file, and the traceback names the file and the line in it.

A block that cannot run here says so on the line before its fence (the nearest non-blank line):

    <!-- docs-test: skip (why: needs an S3 endpoint, a fragment, ...) -->
    <!-- docs-test: requires lightning, torchvision -->

``skip`` needs a reason in parentheses; ``requires`` skips the block (with a note) where one of
the named modules cannot be imported. The other tests here check the relative links between
the pages (files and ``#anchors``), that README links every page, and that benchmark commands
are written as ``python -m benchmarks SUITE``.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import textwrap
from dataclasses import dataclass
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
DOCS = [*sorted((ROOT / "docs").glob("*.md")), ROOT / "README.md"]

#: Files whose blocks take longer than about 20 s together on 2 shared cores.
SLOW: set[str] = set()

#: Seconds one file's blocks may take before the test fails.
FILE_TIMEOUT_S = 240

FENCE = re.compile(r"^(?P<indent>[ \t]*)```(?P<lang>[\w+-]*)\s*$")
MARKER = re.compile(r"^\s*<!--\s*docs-test:\s*(?P<kind>\w+)\s*(?P<arg>.*?)\s*-->\s*$")


@dataclass(frozen=True)
class Block:
    path: str  # relative to the repository root
    line: int  # 1-based line of the block's first code line
    code: str
    skip: str | None  # the reason, for a block marked skip
    requires: tuple[str, ...]


def blocks(path: Path, root: Path = ROOT) -> list[Block]:
    """The ```python blocks of one Markdown file, with their markers; paths relative to root."""
    name = path.relative_to(root).as_posix()
    lines = path.read_text().splitlines()
    out: list[Block] = []
    i = 0
    while i < len(lines):
        fence = FENCE.match(lines[i])
        if not fence:
            i += 1
            continue
        indent, lang = fence.group("indent"), fence.group("lang")
        end = i + 1
        while end < len(lines) and lines[end].strip() != "```":
            end += 1
        if lang == "python":
            skip, requires = marker(name, lines, i)
            body = [line[len(indent) :] if line.startswith(indent) else line for line in lines[i + 1 : end]]
            out.append(Block(name, i + 2, "\n".join(body) + "\n", skip, requires))
        i = end + 1
    return out


def marker(name: str, lines: list[str], fence_index: int) -> tuple[str | None, tuple[str, ...]]:
    j = fence_index - 1
    while j >= 0 and not lines[j].strip():
        j -= 1
    found = MARKER.match(lines[j]) if j >= 0 else None
    if not found:
        return None, ()
    kind, arg = found.group("kind"), found.group("arg")
    where = f"{name}:{j + 1}"
    if kind == "skip":
        reason = re.fullmatch(r"\((.+)\)", arg)
        if not reason or not reason.group(1).strip():
            raise ValueError(f"{where}: a docs-test skip needs a reason: <!-- docs-test: skip (why) -->")
        return reason.group(1).strip(), ()
    if kind == "requires":
        modules = tuple(m.strip() for m in arg.split(",") if m.strip())
        if not modules:
            raise ValueError(f"{where}: docs-test requires names no module")
        return None, modules
    raise ValueError(f"{where}: unknown docs-test marker {kind!r} (skip or requires)")


def rel(path: Path) -> str:
    return path.relative_to(ROOT).as_posix()


#: Runs the blocks given as JSON on stdin in one namespace, as ``__main__``; on an error prints
#: the traceback (its frames name the Markdown file and line) and exits with status 1.
RUNNER = textwrap.dedent(
    """
    import importlib, json, sys, traceback

    if __name__ == "__main__":
        namespace = {"__name__": "__main__", "__builtins__": __builtins__}
        for block in json.load(sys.stdin):
            missing = []
            for module in block["requires"]:
                try:
                    importlib.import_module(module)
                except ImportError:
                    missing.append(module)
            if missing:
                print(f"SKIPPED {block['path']}:{block['line']}: needs {', '.join(missing)}")
                continue
            # padded so that the traceback's line numbers are the Markdown file's
            source = "\\n" * (block["line"] - 1) + block["code"]
            try:
                exec(compile(source, block["path"], "exec"), namespace)
            except BaseException:
                print(f"FAILED {block['path']}:{block['line']}", file=sys.stderr)
                traceback.print_exc()
                sys.exit(1)
            print(f"RAN {block['path']}:{block['line']}")
    """
)


def run_blocks(to_run: list[Block], cwd: Path) -> subprocess.CompletedProcess[str]:
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(ROOT), env.get("PYTHONPATH")]))
    env.setdefault("PYTHONWARNINGS", "default")
    payload = json.dumps([{"path": b.path, "line": b.line, "code": b.code, "requires": b.requires} for b in to_run])
    return subprocess.run(
        [sys.executable, "-c", RUNNER],
        input=payload,
        capture_output=True,
        text=True,
        cwd=cwd,
        env=env,
        timeout=FILE_TIMEOUT_S,
    )


def files_with_code() -> list[object]:
    params: list[object] = []
    for path in DOCS:
        if any(b.skip is None for b in blocks(path)):
            marks = [pytest.mark.slow] if rel(path) in SLOW else []
            params.append(pytest.param(path, id=rel(path), marks=marks))
    return params


@pytest.mark.parametrize("path", files_with_code())
def test_python_blocks_run(path: Path, tmp_path: Path) -> None:
    to_run = [b for b in blocks(path) if b.skip is None]
    result = run_blocks(to_run, tmp_path)
    assert result.returncode == 0, f"a block of {rel(path)} failed:\n{result.stdout[-3000:]}\n{result.stderr[-6000:]}"
    ran = sum(line.startswith("RAN ") for line in result.stdout.splitlines())
    skipped = sum(line.startswith("SKIPPED ") for line in result.stdout.splitlines())
    assert ran + skipped == len(to_run), result.stdout


def test_every_skip_marker_has_a_reason_and_every_page_has_its_markers_parsed() -> None:
    # blocks() raises on a marker without a reason or of an unknown kind
    counted = {rel(path): len(blocks(path)) for path in DOCS}
    assert sum(counted.values()) > 0


def test_a_broken_block_fails_and_names_its_line(tmp_path: Path) -> None:
    doc = tmp_path / "broken.md"
    doc.write_text("# x\n\n```python\nvalue = 1\n```\n\n```python\nassert value == 2, 'wrong'\n```\n")
    found = blocks(doc, tmp_path)
    assert [b.line for b in found] == [4, 8]
    result = run_blocks(found, tmp_path)
    assert result.returncode == 1
    assert "FAILED broken.md:8" in result.stderr
    assert 'File "broken.md", line 8' in result.stderr


def test_a_skip_without_a_reason_is_refused(tmp_path: Path) -> None:
    doc = tmp_path / "unmarked.md"
    doc.write_text("<!-- docs-test: skip -->\n```python\nraise SystemExit(1)\n```\n")
    with pytest.raises(ValueError, match="needs a reason"):
        blocks(doc, tmp_path)


# -- links --------------------------------------------------------------------------------

LINK = re.compile(r"\[[^\]]*\]\(([^)\s]+)\)")


def slug(heading: str) -> str:
    """GitHub's anchor for a heading: lower case, punctuation dropped, spaces to hyphens."""
    text = re.sub(r"[`*]", "", heading.strip().lower())
    text = re.sub(r"[^\w\- ]", "", text)
    return text.replace(" ", "-")


def anchors(path: Path) -> set[str]:
    seen: dict[str, int] = {}
    out: set[str] = set()
    in_fence = False
    for line in path.read_text().splitlines():
        if line.lstrip().startswith("```"):
            in_fence = not in_fence
            continue
        heading = re.match(r"^#{1,6}\s+(.*)$", line)
        if in_fence or not heading:
            continue
        base = slug(heading.group(1))
        count = seen.get(base, 0)
        seen[base] = count + 1
        out.add(base if count == 0 else f"{base}-{count}")
    return out


#: Pages whose links are checked: the docs and the benchmarks' own page.
LINKED = [*DOCS, ROOT / "benchmarks" / "README.md"]


@pytest.mark.parametrize("path", LINKED, ids=[rel(p) for p in LINKED])
def test_relative_links_resolve(path: Path) -> None:
    broken = []
    for target in LINK.findall(path.read_text()):
        if re.match(r"^[a-z]+:", target):
            continue  # http(s):, mailto:
        file_part, _, anchor = target.partition("#")
        dest = (path.parent / file_part).resolve() if file_part else path
        if not dest.exists():
            broken.append(f"{target}: no such file")
        elif anchor and dest.suffix == ".md" and anchor not in anchors(dest):
            broken.append(f"{target}: no heading with that anchor in {rel(dest)}")
    assert broken == []


def test_readme_links_every_page() -> None:
    readme = (ROOT / "README.md").read_text()
    missing = [rel(p) for p in DOCS if p.name != "README.md" and f"({rel(p)}" not in readme]
    assert missing == []


def test_benchmark_commands_use_the_one_command() -> None:
    old = []
    for path in DOCS:
        for number, line in enumerate(path.read_text().splitlines(), 1):
            if re.search(r"python -m\s+benchmarks\.\w", line):
                old.append(f"{rel(path)}:{number}: {line.strip()}")
    assert old == [], "write `python -m benchmarks SUITE`, not `python -m benchmarks.SUITE`"
