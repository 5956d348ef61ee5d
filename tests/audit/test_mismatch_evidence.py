"""The fingerprint-mismatch evidence page stays fast whatever the two bodies are, and both
bodies can be downloaded whole (docs/security.md, "The evidence page")."""

import json
import random
import time

import pytest
from django.conf import settings
from django.urls import reverse

from core.admin_base import DIFF_MAX_LINES
from tests.webhooks.factories import FingerprintMismatchFactory, InboxEventFactory
from webhooks.envelopes import raw_fingerprint

pytestmark = pytest.mark.django_db

# Far above what the page needs (well under a second for the 60 KB pair), far below a hang.
HANG_GUARD_SECONDS = 5.0


def similar_lines(count: int, *, seed: int, width: int = 40) -> list[str]:
    """``count`` lines that differ from each other by a few characters: the worst case for
    a character-level diff."""
    rng = random.Random(seed)
    return [
        f"sync record {n:05d} " + "".join(rng.choice("ab") for _ in range(width))
        for n in range(count)
    ]


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
