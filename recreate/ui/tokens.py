"""The token log-probability heat map: each sampled token with the probability the sampling model gave
it and, where the model's tokenizer can be found, its text.

The tokenizer of the model version that sampled a trajectory is looked up once per run and model
version: the run's policy index (`runs/<run>/policy/versions.json`) names each version's HF directory
(that version's first, then the others': fine-tuning changes weights, never the tokenizer), then the
home's `models/<name>/` (where `recreate` converts the embedded base model). Only `tokenizer.json` is
read, with the `tokenizers` library: data, no code from the home runs. Without a loadable one the map
shows token ids and a one-line note says why.

Text is decoded incrementally (the technique of streaming detokenizers): a token's text is what it adds
to the decoding of the tokens before it, so a byte-level BPE piece that holds only part of a UTF-8
character shows as part of a character (empty text) and the token that completes it shows the whole
character."""

from __future__ import annotations

import json
import math
import threading
import unicodedata
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from recreate.experience.schema import Step, Trajectory

# a token's bucket is the first probability floor it reaches (0: likely)
PROBABILITY_FLOORS = (0.9, 0.5, 0.2, 0.05, 0.01)
MAX_TOKENIZER_BYTES = 64 * 2**20  # a tokenizer.json is a few MB; a bigger file is not loaded by a page
MARKERS = {" ": "·", "\n": "↵", "\t": "→", "\r": "␍"}
INVISIBLE = {"Cc", "Cf", "Co", "Cn", "Zs", "Zl", "Zp"}  # control, format, private, unassigned, spaces
REPLACEMENT = "\ufffd"  # what a decoder writes for bytes that are not (yet) a whole UTF-8 character


@dataclass(frozen=True)
class Token:
    id: int | None
    logprob: float
    bucket: int  # index into PROBABILITY_FLOORS; len(PROBABILITY_FLOORS) for the least likely
    text: str | None = None  # None: no tokenizer; "": part of a character a later token completes

    @property
    def probability(self) -> float:
        return math.exp(min(self.logprob, 0.0))  # a log-prob over 0 (no endpoint's) would overflow

    @property
    def shown(self) -> list[tuple[bool, str]]:
        """The text as runs of (marker?, characters): whitespace and invisible characters as visible
        markers (· ↵ → ␍, U+XXXX) so a token that is a space or a newline still shows."""
        runs: list[tuple[bool, str]] = []
        for char in self.text or "":
            marker = MARKERS.get(char)
            if marker is None and unicodedata.category(char) in INVISIBLE:
                marker = f"U+{ord(char):04X}"
            piece, is_marker = (marker, True) if marker is not None else (char, False)
            if runs and runs[-1][0] == is_marker:
                runs[-1] = (is_marker, runs[-1][1] + piece)
            else:
                runs.append((is_marker, piece))
        return runs


@dataclass(frozen=True)
class Detokenizer:
    """A tokenizer (a `tokenizers.Tokenizer`), or None and the note that says why there is none."""

    tokenizer: Any = None
    note: str = ""

    def texts(self, ids: Sequence[int | None]) -> list[str | None]:
        """Each token's text (see the module doc); None for every token without a tokenizer and for an
        id outside the vocabulary."""
        if self.tokenizer is None:
            return [None] * len(ids)
        size = self.tokenizer.get_vocab_size(with_added_tokens=True)
        out: list[str | None] = []
        run: list[int] = []  # consecutive ids in the vocabulary, decoded together
        try:
            for token_id in ids:
                if isinstance(token_id, int) and 0 <= token_id < size:
                    run.append(token_id)
                    continue
                out += [*self._run_texts(run), None]
                run = []
            return out + self._run_texts(run)
        except Exception:  # a decoder that fails on these ids: the page shows ids, never a 500
            return [None] * len(ids)

    def _run_texts(self, ids: list[int]) -> list[str | None]:
        out: list[str | None] = []
        start = done = 0  # ids[start:done]: the last token with text and its context; ids[done:] pending
        for i in range(len(ids)):
            before, after = self._decode(ids[start:done]), self._decode(ids[start : i + 1])
            if len(after) > len(before) and not after.endswith(REPLACEMENT):
                out += [""] * (i - done) + [after[len(before) :]]
                start, done = done, i + 1
        if done < len(ids):  # the text ends inside a character: the last token shows what decodes of it
            rest = self._decode(ids[start:])[len(self._decode(ids[start:done])) :]
            out += [""] * (len(ids) - done - 1) + [rest]
        return out

    def _decode(self, ids: list[int]) -> str:
        return str(self.tokenizer.decode(ids, skip_special_tokens=False)) if ids else ""


def token_heat(step: Step, detokenizer: Detokenizer | None = None) -> list[Token]:
    """The step's completion tokens with the log-probability the sampling model gave each and their
    text (none when the endpoint returned no log-probabilities)."""
    ids: list[int | None] = list(step.token_ids or [])
    logprobs = step.logprobs or []
    ids = (ids + [None] * len(logprobs))[: len(logprobs)]
    texts = (detokenizer or Detokenizer()).texts(ids)
    out = []
    for token_id, logprob, text in zip(ids, logprobs, texts, strict=True):
        p = math.exp(min(logprob, 0.0))
        bucket = next(
            (i for i, floor in enumerate(PROBABILITY_FLOORS) if p >= floor), len(PROBABILITY_FLOORS)
        )
        out.append(Token(token_id, logprob, bucket, text))
    return out


class Tokenizers:
    """The tokenizer of each run's model versions in a home, loaded once (a page renders in a thread
    pool: one lock)."""

    def __init__(self, home: Path) -> None:
        self.home = home
        self._lock = threading.Lock()
        self._by_model: dict[tuple[str, str], Detokenizer] = {}
        self._by_file: dict[Path, Detokenizer] = {}

    def for_trajectory(self, traj: Trajectory) -> Detokenizer:
        model, run_id = (traj.model.name if traj.model else ""), traj.run_id or ""
        if not any(step.logprobs for step in traj.steps):
            return Detokenizer(note="no token log-probabilities")
        with self._lock:
            key = (run_id, model)
            if key not in self._by_model:
                self._by_model[key] = self._find(run_id, model)
            return self._by_model[key]

    def _find(self, run_id: str, model: str) -> Detokenizer:
        if not model:
            return Detokenizer(note="token text unavailable (no model named): showing token ids")
        broken = ""  # a tokenizer.json that is there but does not load says more than one that is not
        for directory in self._candidates(run_id, model):
            found = self._load(directory / "tokenizer.json")
            if found.tokenizer is not None:
                return found
            broken = broken or (found.note if (directory / "tokenizer.json").is_file() else "")
        why = broken or f"no tokenizer.json for {model} in its run's policy versions or in models/"
        return Detokenizer(note=f"token text unavailable ({why}): showing token ids")

    def _candidates(self, run_id: str, model: str) -> list[Path]:
        """HF directories that may hold the tokenizer of `model`, the likeliest first: the run's policy
        versions (where the run wrote them, then the same folder in this home: a home that was moved),
        then the home's models/ folder."""
        policy = self.home / "runs" / run_id / "policy"
        rows: list[Any] = []
        if _plain_name(run_id) and (policy / "versions.json").is_file():
            try:
                rows = json.loads((policy / "versions.json").read_text(encoding="utf-8"))
            except (OSError, ValueError):
                rows = []
        rows = [r for r in rows if isinstance(r, dict) and isinstance(r.get("hf_dir"), str)]
        rows.sort(key=lambda r: r.get("name") != model)  # the version that sampled first
        dirs = [Path(r["hf_dir"]) for r in rows] + [policy / Path(r["hf_dir"]).name for r in rows]
        base = model.split("+ft", 1)[0]  # a fine-tuned version's name starts with its base's
        dirs += [self.home / "models" / name for name in (model, base) if _plain_name(name)]
        return list(dict.fromkeys(dirs))

    def _load(self, path: Path) -> Detokenizer:
        if path not in self._by_file:
            self._by_file[path] = _read_tokenizer(path)
        return self._by_file[path]


def _plain_name(name: str) -> bool:
    return bool(name) and "/" not in name and "\\" not in name and name not in (".", "..")


def _read_tokenizer(path: Path) -> Detokenizer:
    try:
        if not path.is_file():
            return Detokenizer(note=f"no {path.parent.name}/{path.name}")
        if path.stat().st_size > MAX_TOKENIZER_BYTES:
            return Detokenizer(note=f"{path.parent.name}/{path.name} is over {MAX_TOKENIZER_BYTES >> 20} MB")
        from tokenizers import Tokenizer

        return Detokenizer(Tokenizer.from_file(str(path)))
    except Exception as exc:  # any unreadable or malformed file is a note on the page, never a 500
        first = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
        return Detokenizer(note=f"{path.parent.name}/{path.name} does not load: {first[:200]}")
