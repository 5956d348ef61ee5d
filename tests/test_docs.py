"""The docs a newcomer reads hold together: the README stays short enough to read in ten
minutes (under 250 lines, no prose paragraph over 8 lines, no sentence over 60 words), every
relative link of the README and of docs/ leads to a file that exists and, when it names one,
to a heading of it, and every section the code's comments name (``docs/security.md,
"Secrets"``) is still there (docs/development.md, "The docs")."""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import unquote

ROOT = Path(__file__).resolve().parent.parent
README = ROOT / "README.md"

README_MAX_LINES = 250
PARAGRAPH_MAX_LINES = 8
SENTENCE_MAX_WORDS = 60

FENCE = re.compile(r"^\s*(```|~~~)")
LIST_ITEM = re.compile(r"^\s*(?:[-*+]|\d+\.)\s")
# A sentence ends at . ! or ? (after a closing quote, parenthesis or backtick too) followed
# by a space and what may open the next one.
SENTENCE_END = re.compile(r"(?<=[.!?])[\"')`]*\s+(?=[A-Z0-9`\"'(\[*_])")
LINK = re.compile(r"!?\[(?:[^\[\]]|\[[^\]]*\])*\]\(([^()\s]+)(?:\s+\"[^\"]*\")?\)")
HTML_ANCHOR = re.compile(r"<a\s+(?:name|id)=\"([^\"]+)\"")
BOLD_LEAD = re.compile(r"^\*\*(.+?)\*\*")


def docs() -> list[Path]:
    return [README, *sorted((ROOT / "docs").rglob("*.md"))]


def outside_code(text: str) -> list[tuple[int, str]]:
    """The lines of a markdown text outside fenced code blocks, with their numbers."""
    lines = []
    fenced = False
    for number, line in enumerate(text.splitlines(), 1):
        if FENCE.match(line):
            fenced = not fenced
            continue
        if not fenced:
            lines.append((number, line))
    return lines


@dataclass
class Paragraph:
    line: int
    lines: list[str]

    @property
    def text(self) -> str:
        return " ".join(line.strip() for line in self.lines)


def prose_paragraphs(text: str) -> list[Paragraph]:
    """Prose as a reader meets it: runs of lines outside code blocks, tables, headings,
    images and HTML, separated by blank lines; each item of a list is a paragraph of its
    own, with its continuation lines."""
    paragraphs: list[Paragraph] = []
    current: Paragraph | None = None
    previous = 0
    for number, line in outside_code(text):
        stripped = line.strip()
        skipped = (
            not stripped
            or stripped.startswith(("#", "|", "![", "<"))
            or number != previous + 1  # a code block in between
        )
        previous = number
        if skipped or LIST_ITEM.match(line):
            if current:
                paragraphs.append(current)
            current = None
            if skipped:
                continue
        if current is None:
            current = Paragraph(number, [])
        current.lines.append(line)
    if current:
        paragraphs.append(current)
    return paragraphs


def sentences(paragraph: str) -> list[str]:
    return [s for s in SENTENCE_END.split(paragraph) if s.strip()]


def slug(heading: str) -> str:
    """GitHub's anchor of a heading: its text as shown, lower-cased, without punctuation
    other than hyphens and underscores, spaces made hyphens."""
    shown = re.sub(r"\[([^\]]*)\]\([^)]*\)", r"\1", heading)
    shown = re.sub(r"<[^>]+>", "", shown)
    return re.sub(r"[^\w\- ]", "", shown.strip().lower()).replace(" ", "-")


def headings(path: Path) -> list[str]:
    return [
        re.sub(r"\s+#+\s*$", "", match.group(1)).strip()
        for _, line in outside_code(path.read_text())
        if (match := re.match(r"^#{1,6}\s+(.*)$", line))
    ]


def anchors(path: Path) -> set[str]:
    """Every anchor of a file: its headings' (a repeated one numbered as GitHub numbers
    it) and its explicit ``<a name>``/``<a id>``."""
    seen: dict[str, int] = {}
    found = set()
    for heading in headings(path):
        base = slug(heading)
        count = seen.get(base, 0)
        seen[base] = count + 1
        found.add(base if count == 0 else f"{base}-{count}")
    found.update(HTML_ANCHOR.findall(path.read_text()))
    return found


def relative_links(path: Path) -> list[tuple[int, str]]:
    """The relative links of a markdown file with their line numbers; a link's text may run
    over several lines."""
    kept = dict(outside_code(path.read_text()))
    lines = [kept.get(number, "") for number in range(1, max(kept, default=0) + 1)]
    # Inline code is not a link; what it spans is blanked, its line breaks kept.
    text = re.sub(r"`[^`]*`", lambda code: "\n" * code[0].count("\n"), "\n".join(lines))
    links = []
    for match in LINK.finditer(text):
        target = match.group(1)
        if re.match(r"^[a-z][a-z0-9+.-]*:", target):  # https:, mailto:
            continue
        links.append((text.count("\n", 0, match.start()) + 1, target))
    return links


def link_fault(source: Path, target: str) -> str | None:
    """What is wrong with a relative link, or None."""
    path_part, _, anchor = target.partition("#")
    resolved = (source.parent / unquote(path_part)).resolve() if path_part else source
    if not resolved.exists():
        return f"{resolved.relative_to(ROOT)} does not exist"
    if anchor:
        if resolved.suffix != ".md":
            return f"an anchor into {resolved.name}, which is not markdown"
        if unquote(anchor) not in anchors(resolved):
            return f"{resolved.relative_to(ROOT)} has no heading #{anchor}"
    return None


def test_the_readme_is_read_in_ten_minutes():
    text = README.read_text()
    faults = []
    lines = len(text.splitlines())
    if lines >= README_MAX_LINES:
        faults.append(f"{lines} lines (fewer than {README_MAX_LINES})")
    for paragraph in prose_paragraphs(text):
        if len(paragraph.lines) > PARAGRAPH_MAX_LINES:
            faults.append(
                f"line {paragraph.line}: a paragraph of {len(paragraph.lines)} lines"
            )
        for sentence in sentences(paragraph.text):
            words = len(sentence.split())
            if words > SENTENCE_MAX_WORDS:
                faults.append(
                    f"line {paragraph.line}: a sentence of {words} words: "
                    f"{sentence[:80]}..."
                )
    assert not faults, "README.md:\n" + "\n".join(faults)


def test_the_limits_read_paragraphs_and_sentences_as_a_reader_does():
    text = "\n".join(
        [
            "# A heading line that is not prose",
            "",
            "One. Two words here? Yes! The `config.settings.local` module (e.g.",
            "  its defaults) stays one sentence.",
            "- an item",
            "  that goes on",
            "- another item",
            "",
            "```sh",
            "a command",
            "```",
            "| a | table |",
            "After the table.",
        ]
    )
    paragraphs = prose_paragraphs(text)
    assert [(p.line, len(p.lines)) for p in paragraphs] == [
        (3, 2),
        (5, 2),
        (7, 1),
        (13, 1),
    ]
    assert sentences(paragraphs[0].text) == [
        "One.",
        "Two words here?",
        "Yes!",
        "The `config.settings.local` module (e.g. its defaults) stays one sentence.",
    ]


def test_headings_are_anchored_as_github_anchors_them(tmp_path):
    page = tmp_path / "page.md"
    page.write_text(
        "# The inbox's modules\n## `make run`\n## What audit_verify names\n"
        "## Operations: alerts, dashboard, runbook\n## Twice\n## Twice\n"
        "```\n# not a heading\n```\n"
    )
    assert anchors(page) == {
        "the-inboxs-modules",
        "make-run",
        "what-audit_verify-names",
        "operations-alerts-dashboard-runbook",
        "twice",
        "twice-1",
    }


def test_links_are_read_across_lines_and_never_in_code(tmp_path):
    page = tmp_path / "page.md"
    page.write_text(
        "A [link whose text\nruns over](other.md#there), `[code](not.md)` and\n"
        "[an address](https://example.org/).\n```\n[a block](not-either.md)\n```\n"
        "[Last](#here)\n"
    )
    assert relative_links(page) == [(1, "other.md#there"), (7, "#here")]


def test_every_relative_link_of_the_docs_resolves():
    faults = [
        f"{doc.relative_to(ROOT)}:{number}: ({target}): {fault}"
        for doc in docs()
        for number, target in relative_links(doc)
        if (fault := link_fault(doc, target))
    ]
    assert not faults, "\n".join(faults)


# A section named in the code: ``docs/security.md, "Secrets", "Nothing sent is kept"`` (the
# quoted names may run over a comment's next line), or ``docs/http-api.md#executors``.
CODE_REFERENCE = re.compile(
    r"((?:docs/[\w/-]+|README)\.md)"
    r"(#[\w-]+)?"
    r"((?:[,;]?\s*(?:#\s*)?(?:and\s+)?\"[^\"\n]+(?:\n\s*#?\s*[^\"\n]+)?\")*)"
)


def section_names(path: Path) -> set[str]:
    """The headings of a file, and the titles its paragraphs and list items open with in
    bold (a decision's name: ``**Slow clients.** ...``)."""
    names = {normal(heading) for heading in headings(path)}
    for paragraph in prose_paragraphs(path.read_text()):
        opening = LIST_ITEM.sub("", paragraph.lines[0]).strip()
        if match := BOLD_LEAD.match(opening):
            names.add(normal(match.group(1)))
    return names


def normal(name: str) -> str:
    name = re.sub(r"\s+#?\s*", " ", name.replace("`", ""))
    return name.strip().rstrip(".:").strip()


def names_a_section(name: str, sections: set[str]) -> bool:
    wanted = normal(name)
    return any(
        section == wanted or re.match(re.escape(wanted) + r"\b", section)
        for section in sections
    )


# What the repository holds besides its docs: not the virtualenv, caches or run files.
SKIPPED_DIRS = {"var", "staticfiles", "node_modules", "__pycache__"}
SKIPPED_SUFFIXES = {".md", ".png", ".json", ".pyc", ".sqlite3"}


def code_files() -> list[Path]:
    files = []
    for path in ROOT.rglob("*"):
        parts = path.relative_to(ROOT).parts
        if any(part.startswith(".") or part in SKIPPED_DIRS for part in parts):
            continue
        if path.is_file() and path.suffix not in SKIPPED_SUFFIXES:
            files.append(path)
    return sorted(files)


def test_every_section_the_code_names_exists():
    faults = []
    for path in code_files():
        try:
            text = path.read_text()
        except UnicodeDecodeError:
            continue
        for match in CODE_REFERENCE.finditer(text):
            doc = ROOT / match.group(1)
            where = (
                f"{path.relative_to(ROOT)}:{text.count(chr(10), 0, match.start()) + 1}"
            )
            if not doc.exists():
                faults.append(f"{where}: {match.group(1)} does not exist")
                continue
            if match.group(2) and match.group(2)[1:] not in anchors(doc):
                faults.append(
                    f"{where}: {match.group(1)} has no heading {match.group(2)}"
                )
            sections = section_names(doc)
            for name in re.findall(r"\"([^\"]+)\"", match.group(3)):
                if not names_a_section(name, sections):
                    faults.append(f'{where}: {match.group(1)} has no section "{name}"')
    assert not faults, "\n".join(faults)
