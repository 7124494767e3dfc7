"""Cutting long text down to a length (imports nothing from `recreate`, so every layer can use it)."""

from __future__ import annotations


def clip_middle(text: str, limit: int) -> str:
    """`text` cut to at most `limit` characters (code points), keeping its head and tail.

    Text within `limit` comes back unchanged. Longer text keeps its first and last characters (the
    head gets the odd one) with a marker between them, `…[N chars cut]…`, where N is exactly how many
    characters of `text` are missing; the marker sits on its own line when `text` has several lines
    and between spaces otherwise, so one-line text stays one line. The marker counts toward `limit`.
    When the marker would take more than half of `limit`, the result is the head followed by a
    single `…` instead. A negative `limit` raises ValueError.
    """
    if limit < 0:
        raise ValueError(f"limit must be >= 0, got {limit}")
    if len(text) <= limit:
        return text
    sep = "\n" if "\n" in text else " "
    cut = len(text) - limit
    while True:  # the count's own digits take room, so cut grows until it counts them too
        marker = f"{sep}…[{cut} chars cut]…{sep}"
        if len(text) - limit + len(marker) == cut:
            break
        cut = len(text) - limit + len(marker)
    if len(marker) > limit // 2:
        return text[: limit - 1] + "…" if limit else ""
    tail = (len(text) - cut) // 2
    return text[: len(text) - cut - tail] + marker + text[len(text) - tail :]
