"""clip_middle: text within the limit is untouched; longer text fits the limit, keeps its head and
tail, and its marker counts exactly the characters that are gone."""

from __future__ import annotations

import re

import pytest

from recreate.text import clip_middle

MARKER = re.compile(r"[ \n]…\[(\d+) chars cut\]…[ \n]")


def cut_apart(clipped: str) -> tuple[str, int, str]:
    """(head, the marker's count, tail) of a clipped text."""
    (match,) = MARKER.finditer(clipped)
    return clipped[: match.start()], int(match.group(1)), clipped[match.end() :]


@pytest.mark.parametrize("text", ["", "short", "x" * 100])
def test_text_within_the_limit_is_unchanged(text: str) -> None:
    assert clip_middle(text, 100) is text


@pytest.mark.parametrize("length", [101, 150, 1_000, 99_999, 1_000_000])
@pytest.mark.parametrize("limit", [50, 100, 999, 1_000, 10_000])
def test_long_text_fits_keeps_head_and_tail_and_counts_the_cut(length: int, limit: int) -> None:
    text = "".join(chr(ord("a") + i % 26) for i in range(length))
    clipped = clip_middle(text, limit)
    if length <= limit:
        assert clipped == text
        return
    assert len(clipped) == limit  # the marker's own digits are paid for, nothing is wasted
    head, count, tail = cut_apart(clipped)
    assert text.startswith(head) and text.endswith(tail) and tail
    assert len(head) - len(tail) in (0, 1)
    assert count == length - len(head) - len(tail)


def test_the_marker_sits_on_its_own_line_in_multi_line_text() -> None:
    text = "\n".join(f"line {i}" for i in range(1_000))
    clipped = clip_middle(text, 200)
    assert len(clipped) == 200 and clipped.startswith("line 0\nline 1\n") and clipped.endswith("line 999")
    assert re.search(r"\n…\[\d+ chars cut\]…\n", clipped)


def test_one_line_text_stays_one_line() -> None:
    clipped = clip_middle("word " * 500, 120)
    assert "\n" not in clipped and re.search(r" …\[\d+ chars cut\]… ", clipped)


def test_the_count_is_right_when_its_digits_cross_a_power_of_ten() -> None:
    for length in range(100, 160):  # cuts from a few to just over 100: one, two and three digits
        text = "z" * length
        clipped = clip_middle(text, 60)
        head, count, tail = cut_apart(clipped)
        assert len(clipped) == 60 and count == length - len(head) - len(tail)


@pytest.mark.parametrize("limit", [0, 1, 2, 5, 10, 20, 30])
def test_tiny_limits_keep_the_head_and_stay_within_the_limit(limit: int) -> None:
    text = "abcdefghij" * 100
    clipped = clip_middle(text, limit)
    assert len(clipped) == limit
    if limit:
        assert clipped == text[: limit - 1] + "…"


def test_a_marker_that_would_take_over_half_the_limit_gives_way_to_an_ellipsis() -> None:
    assert MARKER.search(clip_middle("q" * 1_000, 40))  # " …[979 chars cut]… " takes 19 of 40
    assert clip_middle("q" * 1_000_000, 40) == "q" * 39 + "…"  # " …[999979 chars cut]… " would take 22


def test_a_negative_limit_is_an_error() -> None:
    with pytest.raises(ValueError, match="limit"):
        clip_middle("text", -1)


def test_unicode_is_counted_in_characters() -> None:
    text = "é" * 300 + "猫🙂" * 300 + "ß" * 300
    clipped = clip_middle(text, 150)
    assert len(clipped) == 150
    head, count, tail = cut_apart(clipped)
    assert head == "é" * len(head) and tail == "ß" * len(tail)
    assert count == len(text) - len(head) - len(tail)
    clipped.encode("utf-8")  # whole characters only: nothing split into a lone surrogate
