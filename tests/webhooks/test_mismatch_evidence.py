"""The fingerprint-mismatch evidence page stays fast whatever the two bodies are, and both
bodies can be downloaded whole (docs/security.md, "The evidence page")."""

import functools
import json
import random
import sys
import time

import pytest
from django.conf import settings
from django.urls import reverse

from core.admin.diff import DIFF_MAX_LINES, side_by_side_diff
from core.admin.render import pretty_body
from tests.webhooks.factories import FingerprintMismatchFactory, InboxEventFactory
from webhooks.envelopes import raw_fingerprint

pytestmark = pytest.mark.django_db

# Far above what the page needs (well under a second for the 60 KB pair), far below a hang.
HANG_GUARD_SECONDS = 5.0


def similar_lines(count: int, *, seed: int, width: int = 40) -> list[str]:
    """``count`` lines that differ from each other by a few characters: the worst case for
    a character-level diff."""
    return list(_similar_lines(count, seed, width))


@functools.cache
def _similar_lines(count: int, seed: int, width: int) -> tuple[str, ...]:
    """Drawn once per process for each set of arguments: several tests use the same full-size
    bodies. Each line's characters are drawn in one call: one by one took about a second."""
    rng = random.Random(seed)
    return tuple(
        f"sync record {n:05d} " + "".join(rng.choices("ab", k=width))
        for n in range(count)
    )


def reordered_pair(count: int, *, width: int = 30) -> tuple[list[str], list[str]]:
    """Two lists of ``count`` similar lines: the second has the first's lines reordered in
    places and all but every 300th changed by a character. Every changed line is close
    to many others: ``difflib.HtmlDiff`` compares each with each, recursively, and took
    71 s for 300 such lines."""
    lines = similar_lines(count, seed=1, width=width)
    other = list(lines)
    rng = random.Random(2)
    for start in range(0, count, 50):
        block = other[start : start + 50]
        rng.shuffle(block)
        other[start : start + 50] = block
    other = [line if n % 300 == 0 else line + "c" for n, line in enumerate(other)]
    return lines, other


def body(records: list[str], *, size: int | None = None) -> bytes:
    """A JSON object holding the records (one line each once pretty-printed), padded to
    exactly ``size`` bytes when given."""
    raw = json.dumps({"records": records, "pad": ""}).encode()
    if size is not None:
        assert len(raw) <= size
        raw = json.dumps({"records": records, "pad": "p" * (size - len(raw))}).encode()
        assert len(raw) == size
    return raw


def pair(count: int) -> tuple[bytes, bytes]:
    lines, other = reordered_pair(count)
    return body(lines), body(other)


def mismatch_of(original: bytes, conflicting: bytes):
    """A stored event of ``original`` and the evidence of ``conflicting``: bytes stored as
    they are (not research events, not always JSON), fingerprinted as bytes."""
    event = InboxEventFactory(
        raw_body=original, content_fingerprint=raw_fingerprint(original)
    )
    return FingerprintMismatchFactory(
        event=event,
        body={},  # no parsed body: the columns below come from the bytes
        raw_body=conflicting,
        conflicting_fingerprint=raw_fingerprint(conflicting),
    )


def timed_get(client, url):
    started = time.perf_counter()
    response = client.get(url)
    return response, time.perf_counter() - started


def test_sixty_kilobytes_of_similar_reordered_lines_render_well_under_a_second(
    auditor_client,
):
    original, conflicting = pair(1200)
    assert 55_000 < len(original) < 70_000
    mismatch = mismatch_of(original, conflicting)
    url = reverse("admin:webhooks_fingerprintmismatch_change", args=[mismatch.pk])

    response, elapsed = timed_get(auditor_client, url)

    print(f"60 KB pair: {elapsed:.3f} s")  # the figure, for -s
    assert response.status_code == 200
    assert elapsed < HANG_GUARD_SECONDS
    page = response.content.decode()
    assert "diff-changed" in page and "diff-same" in page
    assert "sync record 00001" in page


def test_two_bodies_of_the_full_size_limit_render_with_a_truncation_note(
    auditor_client,
):
    limit = settings.WEBHOOK_MAX_BODY_BYTES
    lines, other = reordered_pair(limit // 55)  # ~52 bytes a record
    original, conflicting = body(lines, size=limit), body(other, size=limit)
    mismatch = mismatch_of(original, conflicting)
    url = reverse("admin:webhooks_fingerprintmismatch_change", args=[mismatch.pk])

    response, elapsed = timed_get(auditor_client, url)

    print(f"full-size pair: {elapsed:.3f} s")
    assert response.status_code == 200
    assert elapsed < HANG_GUARD_SECONDS
    page = response.content.decode()
    assert "download both bodies to compare them whole" in page
    assert page.count('<tr class="diff-') <= DIFF_MAX_LINES


def test_two_full_size_bodies_of_one_line_each_render(auditor_client):
    """Not JSON: shown (and compared) as text, one very long line each."""
    limit = settings.WEBHOOK_MAX_BODY_BYTES
    lines, other = reordered_pair(limit // 55)
    original = " ".join(lines).encode()[:limit]
    conflicting = " ".join(other).encode()[:limit]
    mismatch = mismatch_of(original, conflicting)
    url = reverse("admin:webhooks_fingerprintmismatch_change", args=[mismatch.pk])

    response, elapsed = timed_get(auditor_client, url)

    print(f"full-size one-line pair: {elapsed:.3f} s")
    assert response.status_code == 200
    assert elapsed < HANG_GUARD_SECONDS


def test_both_bodies_download_byte_for_byte(auditor_client):
    original, conflicting = pair(1200)
    # Bytes a pretty-printer would change: the download must not.
    original = original.replace(b", ", b",\t", 3) + b"\n"
    mismatch = mismatch_of(original, conflicting)
    page = auditor_client.get(
        reverse("admin:webhooks_fingerprintmismatch_change", args=[mismatch.pk])
    ).content.decode()

    for which, expected in (("original", original), ("conflicting", conflicting)):
        url = reverse(
            "admin:webhooks_fingerprintmismatch_body", args=[mismatch.pk, which]
        )
        assert url in page  # linked from the evidence page
        response = auditor_client.get(url)
        assert response.status_code == 200
        assert response.content == expected
        assert response["Content-Type"] == "application/octet-stream"
        assert "attachment" in response["Content-Disposition"]


def test_anonymous_cannot_download_either_body(client):
    mismatch = mismatch_of(b'{"a": 1}', b'{"a": 2}')
    for which in ("original", "conflicting"):
        url = reverse(
            "admin:webhooks_fingerprintmismatch_body", args=[mismatch.pk, which]
        )
        response = client.get(url)
        assert response.status_code == 302
        assert response["Location"].startswith(reverse("admin:login"))
        assert b'"a"' not in response.content


def test_staff_without_the_view_permission_cannot_download(client, db):
    from django.contrib.auth import get_user_model

    staff = get_user_model().objects.create_user("nobody", is_staff=True)
    client.force_login(staff)
    mismatch = mismatch_of(b'{"a": 1}', b'{"a": 2}')
    url = reverse(
        "admin:webhooks_fingerprintmismatch_body", args=[mismatch.pk, "original"]
    )
    assert client.get(url).status_code in (403, 404)


def test_an_unknown_body_name_is_404(auditor_client):
    mismatch = mismatch_of(b'{"a": 1}', b'{"a": 2}')
    url = reverse(
        "admin:webhooks_fingerprintmismatch_body", args=[mismatch.pk, "other"]
    )
    assert auditor_client.get(url).status_code == 404


# --- The work is bounded, not only the output ------------------------------------------------


def interleaved_pair(size: int) -> tuple[bytes, bytes]:
    """A producer's change that interleaves a new line after every original one
    (``authors: ["a0", "f0", "a1", "f1", ...]``), the conflicting body about ``size`` bytes:
    every line matches, one at a time, which made the line matcher quadratic (142 KB took
    12 s)."""
    count = size // 12
    original = json.dumps({"authors": [f"a{n}" for n in range(count)]}).encode()
    conflicting = json.dumps(
        {"authors": [name for n in range(count) for name in (f"a{n}", f"f{n}")]}
    ).encode()[:size]
    return original, conflicting.rsplit(b",", 1)[0] + b"]}"


def repeated_pair(size: int) -> tuple[bytes, bytes]:
    """Few distinct lines, each repeated many times, shuffled differently on each side."""
    rng = random.Random(3)
    values = [f"v{rng.randrange(150)}" for _ in range(size // 10)]
    other = list(values)
    rng.shuffle(other)
    return json.dumps(values).encode(), json.dumps(other).encode()


def full_size(make) -> tuple[bytes, bytes]:
    return make(settings.WEBHOOK_MAX_BODY_BYTES)


SHAPES = {
    "interleaved_142k": lambda: interleaved_pair(142_000),
    "interleaved_298k": lambda: interleaved_pair(298_000),
    "interleaved_full": lambda: full_size(interleaved_pair),
    "reordered_similar_full": lambda: tuple(
        body(lines, size=settings.WEBHOOK_MAX_BODY_BYTES)
        for lines in reordered_pair(settings.WEBHOOK_MAX_BODY_BYTES // 55)
    ),
    "repeated_shuffled_full": lambda: full_size(repeated_pair),
    "unrelated_full": lambda: (
        body(similar_lines(settings.WEBHOOK_MAX_BODY_BYTES // 65, seed=5)),
        body(similar_lines(settings.WEBHOOK_MAX_BODY_BYTES // 65, seed=6)),
    ),
    "identical_full": lambda: (
        (body(similar_lines(settings.WEBHOOK_MAX_BODY_BYTES // 65, seed=7)),) * 2
    ),
}


class WorkExceeded(Exception):
    pass


def python_lines_run(function, *args, budget: int):
    """Runs ``function`` counting the Python lines it executes (every frame, the standard
    library's ``difflib`` included): a count of the work that does not depend on the
    machine's speed or load. Raises ``WorkExceeded`` once it passes ``budget``."""
    count = 0

    def local(frame, event, arg):
        nonlocal count
        if event == "line":
            count += 1
            if count > budget:
                raise WorkExceeded(f"more than {budget} lines executed")
        return local

    def global_(frame, event, arg):
        return local

    sys.settrace(global_)
    try:
        result = function(*args)
    finally:
        sys.settrace(None)
    return result, count


@pytest.mark.parametrize("shape", SHAPES)
def test_the_diff_does_work_linear_in_the_lines_whatever_the_bodies(shape):
    original, conflicting = SHAPES[shape]()
    assert len(original) <= settings.WEBHOOK_MAX_BODY_BYTES
    assert len(conflicting) <= settings.WEBHOOK_MAX_BODY_BYTES
    left, right = pretty_body(original), pretty_body(conflicting)
    lines = left.count("\n") + right.count("\n") + 2
    # A few Python lines per line of text (comparing the common ends, numbering at most a
    # page of lines), about 150 per row rendered (Django's escaping and formatting):
    # nothing that grows with lines times lines. Measured: about 300,000 for every shape.
    budget = 10 * lines + 200 * DIFF_MAX_LINES

    (table, truncated), executed = python_lines_run(
        side_by_side_diff, left, right, budget=budget
    )

    print(f"{shape}: {lines} lines, {executed} Python lines executed")
    assert table.count('<tr class="diff-') == DIFF_MAX_LINES
    assert truncated  # every shape has more lines than a page
    if shape != "identical_full":
        assert 'class="diff-changed"' in table


def test_the_line_alignment_sees_at_most_a_page_of_lines_of_each_side(monkeypatch):
    """The one part the count above cannot see, the alignment in compiled code, is given at
    most ``DIFF_MAX_LINES`` lines of each body: its cost is bounded by the page, not by the
    bodies."""
    from core.admin import diff

    seen = []
    real = diff.lines_align

    def recording(left_ids, right_ids):
        seen.append((len(left_ids), len(right_ids)))
        return real(left_ids, right_ids)

    monkeypatch.setattr(diff, "lines_align", recording)
    for make in SHAPES.values():
        original, conflicting = make()
        side_by_side_diff(pretty_body(original), pretty_body(conflicting))
    assert seen
    assert all(
        left <= DIFF_MAX_LINES and right <= DIFF_MAX_LINES for left, right in seen
    ), seen


def test_the_diff_shows_the_interleaved_lines_as_inserted():
    original, conflicting = interleaved_pair(2_000)
    table, truncated = side_by_side_diff(
        pretty_body(original), pretty_body(conflicting)
    )
    assert not truncated
    rows = table.split("<tr ")[1:]  # the header row is a plain <tr>
    # "a0" same on both sides, "f0" new on the right only, "a1" same, ...
    assert "&quot;a0&quot;" in rows[2] and "diff-same" in rows[2]
    assert "&quot;f0&quot;" in rows[3] and "diff-changed" in rows[3]
    assert "&quot;a1&quot;" in rows[4] and "diff-same" in rows[4]


def test_common_ends_are_shown_as_same_and_the_changed_middle_aligned():
    left = "\n".join(["head"] * 3 + ["x", "keep", "y"] + ["tail"] * 3)
    right = "\n".join(["head"] * 3 + ["keep", "z"] + ["tail"] * 3)
    table, truncated = side_by_side_diff(left, right)
    assert not truncated
    rows = table.split("<tr ")[1:]  # the header row is a plain <tr>
    classes = [row.split('"')[1] for row in rows]
    assert (
        classes
        == ["diff-same"] * 3
        + ["diff-changed", "diff-same"]
        + ["diff-changed"]
        + ["diff-same"] * 3
    )
    assert ">keep<" in rows[4]


def test_the_interleaved_full_size_page_renders(auditor_client):
    original, conflicting = full_size(interleaved_pair)
    mismatch = mismatch_of(original, conflicting)
    url = reverse("admin:webhooks_fingerprintmismatch_change", args=[mismatch.pk])

    response, elapsed = timed_get(auditor_client, url)

    print(f"interleaved full-size pair: {elapsed:.3f} s")
    assert response.status_code == 200
    assert elapsed < HANG_GUARD_SECONDS
    page = response.content.decode()
    assert "download both bodies to compare them whole" in page
    assert page.count('<tr class="diff-') <= DIFF_MAX_LINES
