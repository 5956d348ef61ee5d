"""One wording, one badge (docs/console.md), on every page of the console: every list, the
page of rows of every kind, the dashboard and the bulk replay job's pages, rendered for an
operator on a console with a row of every kind (``populated_console``). The visible text has
no raw status, outcome or action code (``dead_lettered``, ``pause_source``) and none of
Django's title-cased labels for them ("Dead Lettered", "Pause Source"), no float with more
than three decimals, no name capitalised that was typed lower-case; statuses are badges and
durations carry their unit.

What a page shows as it was recorded (a raw body, stored headers, an operator action's
details as stored) is marked ``as-recorded`` and read apart: it is evidence, byte for byte."""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from html.parser import HTMLParser

import pytest
from django.contrib import admin
from django.test import Client
from django.urls import NoReverseMatch, reverse

from core.admin.status import STATUS_WORDS
from deployments.models import DeployTargetTest, TriggerAttempt, TriggerPhase
from tests.audit.populated_console import RESUMED_SOURCE, TARGET_NAME, populated_console
from trail.models import OperatorAction
from webhooks.models import BulkReplayJob, InboxAttempt

pytestmark = pytest.mark.django_db(transaction=True)

# Every code a status, outcome, state or action is stored as.
CODES = {
    *STATUS_WORDS,
    *OperatorAction.Action.values,
    *InboxAttempt.Outcome.values,
    *TriggerAttempt.Outcome.values,
    *BulkReplayJob.State.values,
    *(value for value in DeployTargetTest.State.values),
    *(value for value in DeployTargetTest.Outcome.values if value),
}
# Of those and of the trigger phases (whose labels are words already: "triggered"), the
# ones no sentence would write: with an underscore.
RAW_CODES = sorted(code for code in CODES | set(TriggerPhase.values) if "_" in code)
# Django's labels for choices declared without one: "Dead Lettered", "Pause Source".
TITLE_CASED = sorted({code.replace("_", " ").title() for code in RAW_CODES})
RAW_CODE = re.compile(
    r"(?<![\w./:-])(" + "|".join(map(re.escape, RAW_CODES)) + r")(?![\w-])"
)
TITLE_CASE = re.compile(r"\b(" + "|".join(map(re.escape, TITLE_CASED)) + r")\b")
# A float with more than three decimals; a time's seconds (":02.345678") are not one.
LONG_FLOAT = re.compile(r"(?<![\d:.])\d+\.\d{4,}(?![\d.])")
# The cells that show a status, outcome or state (a column or a page's field, by its
# name): each is a badge. An HTTP status is a number, a time of a status a time, and a
# drain's progress the words under its source's state badge.
BADGE_FIELD = re.compile(r"(status|outcome|state)(_badge|_reported|_resulting)?$")
NOT_BADGES = {"status_code", "response_status", "http_status", "drain_state"}


def _badge_field(name: str) -> bool:
    return name not in NOT_BADGES and bool(BADGE_FIELD.search(name))


DURATION = re.compile(r"^(-|-?\d+(\.\d{1,3})? (ms|s)|\d+ (min|h|d) \d+ (s|min|h))$")
NAMES = [TARGET_NAME, RESUMED_SOURCE]

SKIPPED = {"script", "style", "template", "noscript"}
VOID = {
    "area",
    "base",
    "br",
    "col",
    "embed",
    "hr",
    "img",
    "input",
    "link",
    "meta",
    "source",
    "track",
    "wbr",
}


@dataclass
class _Cell:
    name: str
    text: list[str] = field(default_factory=list)
    badge: bool = False
    control: bool = False  # a form's input: what it offers is checked as text


class VisibleText(HTMLParser):
    """The text a reader sees (no scripts, styles or attributes), apart from what is marked
    ``as-recorded``; and the status and duration cells, with whether each holds a badge."""

    def __init__(self) -> None:
        super().__init__(convert_charrefs=True)
        self.text: list[str] = []
        self.cells: list[_Cell] = []
        # Text that is a code and nothing else: a cell or a line that shows "running".
        self.bare_codes: list[str] = []
        self._stack: list[tuple[str, bool, _Cell | None]] = []

    def _hidden(self) -> bool:
        return any(hidden for _, hidden, _ in self._stack)

    def handle_starttag(self, tag, attrs):
        classes = (dict(attrs).get("class") or "").split()
        hidden = tag in SKIPPED or "as-recorded" in classes
        cell = None
        for name in classes:
            if name.startswith("field-"):
                cell = _Cell(name.removeprefix("field-"))
                self.cells.append(cell)
        for _, _, open_cell in self._stack:
            if open_cell is not None:
                open_cell.badge |= "badge" in classes
                open_cell.control |= tag in ("input", "select", "textarea")
        if tag not in VOID:
            self._stack.append((tag, hidden, cell))

    def handle_endtag(self, tag):
        for i in range(len(self._stack) - 1, -1, -1):
            if self._stack[i][0] == tag:
                del self._stack[i:]
                break

    def handle_data(self, data):
        if self._hidden() or not data.strip():
            return
        self.text.append(data)
        if data.strip() in CODES:
            self.bare_codes.append(data.strip())
        for _, _, cell in self._stack:
            if cell is not None:
                cell.text.append(data)


def _problems(html: str) -> list[str]:
    parser = VisibleText()
    # A break opportunity is no space: "dead_<wbr>lettered" reads dead_lettered.
    parser.feed(html.replace("<wbr>", ""))
    text = " ".join(" ".join(parser.text).split())
    found = [f"raw code {m.group(1)!r}" for m in RAW_CODE.finditer(text)]
    found += [
        f"raw code {code!r}" for code in parser.bare_codes if code not in RAW_CODES
    ]
    found += [f"title-cased code {m.group(1)!r}" for m in TITLE_CASE.finditer(text)]
    found += [f"long float {m.group(0)!r}" for m in LONG_FLOAT.finditer(text)]
    found += [
        f"name capitalised: {name.capitalize()!r}"
        for name in NAMES
        if name.capitalize() in text
    ]
    for cell in parser.cells:
        words = " ".join(" ".join(cell.text).split())
        label_only = words.rstrip(":") in ("", cell.name.replace("_", " "))
        badge_field = _badge_field(cell.name)
        if badge_field and not (cell.badge or cell.control) and words not in ("", "-"):
            # A detail page's row: its label, then the value; a list's cell: the value.
            value = words.split(":", 1)[-1].strip() if ":" in words else words
            if value not in ("", "-") and not label_only:
                found.append(f"{cell.name} not a badge: {words!r}")
        if "duration" in cell.name or "latency" in cell.name:
            value = words.split(":", 1)[-1].strip() if ":" in words else words
            if value and not label_only and not DURATION.match(value):
                found.append(f"{cell.name} without its unit: {words!r}")
    return found


def _pages(client: Client) -> list[str]:
    """Every page an operator reaches from the index: each list, the add page it may use,
    the pages of (up to 40) rows of each list, and the inbox's days."""
    index = client.get(reverse("admin:index"))
    assert index.status_code == 200
    # The index's own links that no list is: the inbox's days.
    urls = [reverse("admin:index"), reverse("admin:webhooks_inboxevent_partitions")]
    for app in index.context["app_list"]:
        for entry in app["models"]:
            model = entry["model"]
            urls.append(entry["admin_url"])
            if entry.get("add_url"):
                urls.append(entry["add_url"])
            opts = model._meta
            model_admin = admin.site._registry[model]
            rows = model_admin.get_queryset(
                client.get(entry["admin_url"]).wsgi_request
            ).order_by("-pk")[:40]
            for pk in rows.values_list("pk", flat=True):
                try:
                    urls.append(
                        reverse(
                            f"admin:{opts.app_label}_{opts.model_name}_change",
                            args=[pk],
                        )
                    )
                except NoReverseMatch:
                    continue
    return urls


@pytest.mark.slow
def test_every_page_speaks_one_vocabulary(settings, operator):
    console = populated_console(settings, operator)
    client = Client()
    client.force_login(operator)
    urls = _pages(client)
    assert len(urls) > 120, urls  # every kind of row, each list and page
    problems: dict[str, list[str]] = {}
    for url in urls:
        response = client.get(url)
        assert response.status_code == 200, (url, response.status_code)
        found = _problems(response.content.decode())
        if found:
            problems[url] = sorted(set(found))
    assert problems == {}, "\n".join(
        f"{url}: {problem}" for url, found in problems.items() for problem in found
    )
    # A message that starts with a name keeps the name as typed.
    answer = client.post(
        reverse("admin:deployments_deploytarget_changelist"),
        {"action": "send_test_trigger", "_selected_action": [console.target.pk]},
        follow=True,
    )
    page = answer.content.decode()
    assert f'class="success">{TARGET_NAME}: ' in page, page
    assert _problems(page) == []


def test_the_checker_finds_what_it_looks_for():
    """The checks fail on the faults they name."""
    assert _problems("<td>dead_lettered</td>") == ["raw code 'dead_lettered'"]
    assert _problems("<td>Dead Lettered</td>") == ["title-cased code 'Dead Lettered'"]
    assert _problems("<p>pause_source by op</p>") == ["raw code 'pause_source'"]
    assert _problems("<td>dead_<wbr>lettered</td>") == ["raw code 'dead_lettered'"]
    assert _problems("<td>running</td>") == ["raw code 'running'"]
    assert _problems("<td>0.04496838000000025</td>") == [
        "long float '0.04496838000000025'"
    ]
    assert _problems("<td>2026-12-01 15:41:02.345678 UTC</td>") == []
    assert _problems('<pre class="as-recorded">{"s": "dead_lettered"}</pre>') == []
    assert _problems(f"<h1>{TARGET_NAME.capitalize()}</h1>") == [
        f"name capitalised: {TARGET_NAME.capitalize()!r}"
    ]
    assert _problems('<td class="field-status">Running</td>') == [
        "status not a badge: 'Running'"
    ]
    assert (
        _problems(
            '<td class="field-status"><span class="badge">Running</span></td>'
            '<div class="form-row field-status"><label>status:</label>'
            '<div class="readonly"><span class="badge">Running</span></div></div>'
        )
        == []
    )
    assert _problems(
        '<div class="form-row field-status"><label>status:</label>'
        '<div class="readonly">Running</div></div>'
    ) == ["status not a badge: 'status: Running'"]
    assert _problems('<td class="field-duration_seconds">0.045</td>') == [
        "duration_seconds without its unit: '0.045'"
    ]
    assert _problems('<td class="field-duration_seconds">0.045 s</td>') == []
