"""docs/architecture.md's map of files is exact: every file it names exists, and every module of
the two packages, every test module and every benchmark script is named."""

from __future__ import annotations

import fnmatch
import re
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
MAP = (ROOT / "docs" / "architecture.md").read_text().split("## Map of files", 1)[1]


def sections() -> dict[str, list[str]]:
    """Names in backticks in the first column of the map's rows, under each **folder/** row."""
    out: dict[str, list[str]] = {"": []}
    current = ""
    for line in MAP.splitlines():
        if not line.startswith("| "):
            continue
        first = line.split("|")[1].strip()
        folder = re.fullmatch(r"\*\*(.+/)\*\*", first)
        if folder:
            current = folder.group(1)
            out[current] = []
            continue
        out[current].extend(re.findall(r"`([^`]+)`", first))
    return out


def named(folder: str) -> list[str]:
    return sections()[folder]


def matches(name: str, patterns: list[str]) -> bool:
    return any(fnmatch.fnmatch(name, p) for p in patterns)


def test_every_module_of_both_packages_is_mapped_and_every_mapped_module_exists() -> None:
    for package in ("datapipes", "torch_threadloader"):
        on_disk = {p.name for p in (ROOT / package).glob("*.py")}
        mapped = set(named(f"{package}/"))
        assert on_disk == mapped, (package, sorted(on_disk - mapped), sorted(mapped - on_disk))


def test_every_test_module_is_mapped() -> None:
    patterns = named("tests/")
    on_disk = sorted(p.relative_to(ROOT / "tests").as_posix() for p in (ROOT / "tests").rglob("test_*.py"))
    assert on_disk, "no tests found"
    unmapped = [name for name in on_disk if not matches(name, patterns)]
    assert unmapped == []
    for pattern in patterns:
        assert any(fnmatch.fnmatch(name, pattern) for name in on_disk), f"{pattern} names no test module"


def test_every_benchmark_script_is_mapped_or_covered() -> None:
    names = named("benchmarks/")
    for name in names:
        if "*" in name or name.endswith("/"):
            continue
        assert (ROOT / "benchmarks" / name).exists(), name


def test_top_level_files_exist() -> None:
    for name in named(""):
        for part in re.split(r",\s*", name):
            if part.endswith((".toml", ".sh", ".yaml")) or part == ".ci/run":
                assert (ROOT / part).exists(), part


def test_the_docs_stay_short_enough_to_read() -> None:
    """The map at most 2,500 words; the docs and the README together at most 20,000."""
    words = {p.name: len(p.read_text().split()) for p in [*sorted((ROOT / "docs").glob("*.md")), ROOT / "README.md"]}
    assert words["architecture.md"] <= 2500, words["architecture.md"]
    assert sum(words.values()) <= 20000, words
