"""Vectors of documents embedded before: a repeated step, a re-index or a re-import costs no model call.

Agent logs repeat themselves (the same command with the same output, the same format error, run after
run), and MiniLM on a CPU is compute-bound: the only way to embed a document faster without changing its
vector is not to embed it again. The cache maps sha256(fingerprint, text) to the float32 vector the model
returned for that text: a hit is what the model computes (but for the last bits, ~4e-8, which depend on
the batch a text was embedded in). The fingerprint names everything that determines a vector (the
embedding, its settings and a hash of the weights the process loaded, see `embeddings.fingerprint`); an
embedding that cannot name its weights is not cached. A broken cache file
costs speed, never correctness: it is reported once and the documents are embedded.
"""

from __future__ import annotations

import hashlib
import logging
import sqlite3
import threading
from collections.abc import Callable, Sequence
from pathlib import Path

import numpy as np

log = logging.getLogger(__name__)
_SCHEMA = "CREATE TABLE IF NOT EXISTS vectors (key BLOB PRIMARY KEY, vector BLOB NOT NULL) WITHOUT ROWID"
_CHUNK = 500  # keys per SELECT (SQLite's default limit on bound parameters is far above)
Embed = Callable[[list[str]], Sequence[np.ndarray]]


class VectorCache:
    def __init__(self, path: Path, fingerprint: str) -> None:
        self.path, self.fingerprint = path, fingerprint
        self.hits = self.misses = 0
        self._prefix = hashlib.sha256(fingerprint.encode("utf-8")).digest()
        self._db: sqlite3.Connection | None = None
        self._broken = False
        self._lock = threading.Lock()

    def embed(self, docs: Sequence[str], embed: Embed) -> np.ndarray:
        """Vectors of `docs` (float32 rows, in order): from the cache where held, else from `embed`,
        called once on the distinct documents it lacks."""
        if not docs:
            return np.zeros((0, 0), dtype=np.float32)
        keys = [self._key(doc) for doc in docs]
        found = self._read(keys)
        if found is None:  # a damaged row among them: none is trusted, and each is replaced
            return self._recompute(docs, embed)
        missing = list(dict.fromkeys(doc for doc, key in zip(docs, keys, strict=True) if key not in found))
        if missing:
            fresh = np.asarray(embed(missing), dtype=np.float32)
            if found and next(iter(found.values())).shape != fresh.shape[1:]:
                return self._recompute(docs, embed)  # held rows of another shape: none is trusted
            computed = {self._key(doc): fresh[n] for n, doc in enumerate(missing)}
            self._write(computed)
            found.update(computed)
        self.hits += len(docs) - len(missing)
        self.misses += len(missing)
        return np.stack([found[key] for key in keys])

    def _recompute(self, docs: Sequence[str], embed: Embed) -> np.ndarray:
        distinct = list(dict.fromkeys(docs))
        fresh = np.asarray(embed(distinct), dtype=np.float32)
        computed = {self._key(doc): fresh[n] for n, doc in enumerate(distinct)}
        self._write(computed, replace=True)
        self.misses += len(distinct)
        return np.stack([computed[self._key(doc)] for doc in docs])

    def close(self) -> None:
        with self._lock:
            if self._db is not None:
                self._db.close()
                self._db = None

    def _key(self, doc: str) -> bytes:
        return hashlib.sha256(self._prefix + doc.encode("utf-8", "surrogatepass")).digest()

    def _connect(self) -> sqlite3.Connection | None:
        if self._db is None and not self._broken:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            db = sqlite3.connect(self.path, timeout=30, check_same_thread=False)
            try:
                db.execute("PRAGMA journal_mode=WAL")
                db.execute("PRAGMA synchronous=NORMAL")
                db.execute(_SCHEMA)
            except sqlite3.DatabaseError:
                db.close()
                raise
            self._db = db
        return self._db

    def _read(self, keys: list[bytes]) -> dict[bytes, np.ndarray] | None:
        """The held vectors of `keys`, or None when a row among them is damaged (not whole float32
        values, or not all of one shape)."""
        distinct = list(dict.fromkeys(keys))
        rows: list[tuple[bytes, bytes]] = []
        with self._lock:
            try:
                db = self._connect()
                if db is None:
                    return {}
                for first in range(0, len(distinct), _CHUNK):
                    chunk = distinct[first : first + _CHUNK]
                    marks = ",".join("?" * len(chunk))
                    rows += db.execute(
                        f"SELECT key, vector FROM vectors WHERE key IN ({marks})", chunk
                    ).fetchall()
            except (sqlite3.Error, OSError) as exc:  # OSError: its folder cannot be made
                self._give_up(exc)
                return {}
        if any(len(blob) % 4 for _, blob in rows):
            return None
        vectors = {bytes(key): np.frombuffer(blob, dtype=np.float32) for key, blob in rows}
        if len({v.shape for v in vectors.values()}) > 1:  # a foreign or damaged row: recompute them all
            return None
        return vectors

    def _write(self, vectors: dict[bytes, np.ndarray], replace: bool = False) -> None:
        rows = [(key, np.ascontiguousarray(v, dtype=np.float32).tobytes()) for key, v in vectors.items()]
        with self._lock:
            try:
                db = self._connect()
                if db is None:
                    return
                with db:
                    verb = "REPLACE" if replace else "IGNORE"
                    db.executemany(f"INSERT OR {verb} INTO vectors (key, vector) VALUES (?, ?)", rows)
            except (sqlite3.Error, OSError) as exc:
                self._give_up(exc)

    def _give_up(self, exc: Exception) -> None:
        """Called with the lock held: stop using the file for the rest of this process."""
        log.warning(
            "embedding cache %s is unusable (%s): embedding without it; delete the file to start a new one",
            self.path,
            exc,
        )
        self._broken = True
        if self._db is not None:
            self._db.close()
            self._db = None
