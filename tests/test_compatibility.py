"""The compatibility table of docs/architecture.md ("Compatibility paths and upgrades") is the
one place a path kept for an earlier release names the release that may remove it: no path
outlives its promise (a row whose release has come fails until the path goes), and no other
page or comment names a removal release of its own."""

from __future__ import annotations

import re
import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
ARCHITECTURE = ROOT / "docs" / "architecture.md"
RELEASE = re.compile(r"\b(\d+)\.(\d+)\.(\d+)\b")


def version() -> tuple[int, ...]:
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    return tuple(int(part) for part in project["version"].split("."))


def compatibility_rows() -> list[tuple[str, str]]:
    """Each row of the table: its path and its "may be removed in" cell."""
    text = ARCHITECTURE.read_text()
    section = text.split("## Compatibility paths and upgrades", 1)[1].split("\n## ", 1)[
        0
    ]
    rows = []
    for line in section.splitlines():
        cells = [cell.strip() for cell in line.strip().strip("|").split("|")]
        if len(cells) == 3 and cells[0] not in ("path", "---"):
            rows.append((cells[0], cells[2]))
    return rows


def test_the_table_lists_paths_each_with_its_release_or_never():
    rows = compatibility_rows()
    assert rows
    for path, removed_in in rows:
        assert RELEASE.search(removed_in) or removed_in.startswith("never"), path


def test_no_path_outlives_the_release_that_may_remove_it():
    """A row whose release has come names a path that should be gone: remove it (and its
    row, into the release's list of removals), or give it a later release, saying why."""
    now = version()
    for path, removed_in in compatibility_rows():
        for release in RELEASE.findall(removed_in):
            assert tuple(map(int, release)) > now, (path, removed_in)


def test_the_retired_hmac_chain_has_its_release_in_the_table_only():
    (row,) = [
        removed_in for path, removed_in in compatibility_rows() if "HMAC chain" in path
    ]
    assert RELEASE.search(row)
    elsewhere = [
        str(file.relative_to(ROOT))
        for file in [*ROOT.glob("docs/**/*.md"), *ROOT.glob("audit/**/*.py")]
        if file != ARCHITECTURE
        and re.search(r"(?i)removed in \d+\.\d+", file.read_text())
        and "HMAC" in file.read_text()
    ]
    assert elsewhere == []
