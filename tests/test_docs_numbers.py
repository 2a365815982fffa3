"""docs/performance.md's tables are the published run's: ``benchmarks/results/results.json``,
written by ``python -m benchmarks run`` and put into the page by ``python -m benchmarks docs``.

A rerun that changes a figure fails here until the page is rewritten from it; the page names
the commit the run measured, and that run had no change outside git.
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import pytest

from benchmarks.docs_tables import RESULTS, fill, main, tables

ROOT = Path(__file__).resolve().parent.parent
PAGE = ROOT / "docs" / "performance.md"


@pytest.fixture(scope="module")
def results() -> dict[str, Any]:
    return json.loads(RESULTS.read_text())  # type: ignore[no-any-return]


def test_the_pages_tables_are_the_published_runs(results: dict[str, Any]) -> None:
    text = PAGE.read_text()
    assert fill(text, results) == text, "docs/performance.md: run `python -m benchmarks docs docs/performance.md`"
    assert main(["--check", str(PAGE)]) == 0


def test_every_table_of_the_run_is_on_the_page(results: dict[str, Any]) -> None:
    on_page = set(re.findall(r"<!-- results: ([\w-]+) -->", PAGE.read_text()))
    assert on_page == set(tables(results))


def test_the_run_was_of_a_commit(results: dict[str, Any]) -> None:
    commit = results.get("commit", "")
    assert re.fullmatch(r"[0-9a-f]{40}", commit), f"the run's commit: {commit!r} (changes not committed?)"
    assert f"`{commit[:7]}`" in PAGE.read_text()


def test_a_changed_figure_is_seen_and_rewritten(results: dict[str, Any], tmp_path: Path) -> None:
    page = tmp_path / "page.md"
    page.write_text("intro\n\n<!-- results: targets -->\n| stale |\n<!-- /results -->\n\nend\n")
    assert main(["--check", str(page)]) == 1
    assert main([str(page)]) == 0
    text = page.read_text()
    assert "| stale |" not in text and text.startswith("intro\n\n") and text.endswith("\n\nend\n")
    first = results["workloads"][0]["targets"][0]
    assert f"| {first['label']}" in text
    assert main(["--check", str(page)]) == 0


def test_a_block_naming_no_table_is_an_error_naming_it(results: dict[str, Any]) -> None:
    with pytest.raises(KeyError, match="results: nosuch"):
        fill("<!-- results: nosuch -->\n<!-- /results -->\n", results)
