"""Two texts side by side, line against line, bounded in work and output whatever the texts
(docs/security.md, "The evidence page cannot hang"): the fingerprint mismatch's page.
"""

from __future__ import annotations

from django.utils.html import format_html, format_html_join
from rapidfuzz.distance import Indel

DIFF_MAX_LINES = 2000


def lines_align(left_ids: list[int], right_ids: list[int]):
    """The opcodes of a longest common subsequence of two sequences of line ids (RapidFuzz's
    bit-parallel LCS, compiled: about ``len(left) / 64 * len(right)`` word operations)."""
    return Indel.opcodes(left_ids, right_ids)


def _diff_blocks(
    left: list[str], right: list[str], *, max_rows: int
) -> tuple[list[tuple[str, int, int, int, int]], bool]:
    """``(blocks, complete)``: ``(tag, i1, i2, j1, j2)`` blocks (``equal`` or ``changed``)
    that cover at least the first ``max_rows`` rows of the side-by-side diff of ``left`` and
    ``right``; ``complete`` when they cover all of it.

    The work is linear in the lines plus one alignment of at most ``max_rows`` lines of each
    side: the common head and tail are found by comparing lines in order, and of the middle
    only what a page can show is aligned (every row shows at least one line of one side, so
    the first ``max_rows`` rows never need the lines past them)."""
    n, m = len(left), len(right)
    head = 0
    while head < min(n, m) and left[head] == right[head]:
        head += 1
    tail = 0
    while tail < min(n, m) - head and left[n - 1 - tail] == right[m - 1 - tail]:
        tail += 1
    blocks = [("equal", 0, head, 0, head)] if head else []
    room = max_rows - head
    if room <= 0:
        return blocks, head == n == m
    middle_left, middle_right = left[head : n - tail], right[head : m - tail]
    complete = len(middle_left) <= room and len(middle_right) <= room
    middle_left, middle_right = middle_left[:room], middle_right[:room]
    if middle_left and middle_right:
        ids: dict[str, int] = {}
        opcodes = lines_align(
            [ids.setdefault(line, len(ids)) for line in middle_left],
            [ids.setdefault(line, len(ids)) for line in middle_right],
        )
        for tag, i1, i2, j1, j2 in opcodes:
            tag = "equal" if tag == "equal" else "changed"
            if tag == "changed" and blocks and blocks[-1][0] == "changed":
                # A deletion next to an insertion: one changed block, side by side.
                _, i1, _, j1, _ = blocks.pop()
                i1, j1 = i1 - head, j1 - head
            blocks.append((tag, i1 + head, i2 + head, j1 + head, j2 + head))
    elif middle_left or middle_right:
        blocks.append(
            ("changed", head, head + len(middle_left), head, head + len(middle_right))
        )
    if complete and tail:
        blocks.append(("equal", n - tail, n, m - tail, m))
    return blocks, complete


def side_by_side_diff(
    left: str, right: str, *, max_lines: int = DIFF_MAX_LINES
) -> tuple[str, bool]:
    """Two texts side by side, line against line, changed lines marked; ``(html, truncated)``.

    Bounded whatever the texts, in work and in output: whole lines are compared (no
    character-level pass), the work is linear in the lines plus one alignment of at most
    ``max_lines`` lines of each text (``_diff_blocks``), and at most ``max_lines`` rows are
    rendered. ``difflib.SequenceMatcher`` over all lines, which this replaced, was quadratic
    on a body that interleaves a new line after every original one. Every text is escaped."""
    left_lines, right_lines = left.splitlines(), right.splitlines()
    blocks, complete = _diff_blocks(left_lines, right_lines, max_rows=max_lines)
    rows: list[tuple[str, str, str, str, str]] = []
    full = False
    for tag, i1, i2, j1, j2 in blocks:
        css = "diff-same" if tag == "equal" else "diff-changed"
        for k in range(max(i2 - i1, j2 - j1)):
            if len(rows) >= max_lines:
                full = True
                break
            i, j = i1 + k, j1 + k
            rows.append(
                (
                    css,
                    str(i + 1) if i < i2 else "",
                    left_lines[i] if i < i2 else "",
                    str(j + 1) if j < j2 else "",
                    right_lines[j] if j < j2 else "",
                )
            )
        if full:
            break
    truncated = full or not complete
    body = format_html_join(
        "\n",
        '<tr class="{}"><td class="diff-no">{}</td><td><pre>{}</pre></td>'
        '<td class="diff-no">{}</td><td><pre>{}</pre></td></tr>',
        rows,
    )
    table = format_html(
        '<table class="side-by-side-diff as-recorded">'
        "<thead><tr><th></th><th>original</th><th></th><th>conflicting</th></tr></thead>"
        "<tbody>{}</tbody></table>",
        body,
    )
    return table, truncated
