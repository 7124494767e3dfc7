"""An append-only copy of a collection's vectors, for exact filtered search.

When a filter matches thousands of steps, asking Chroma for their vectors costs ~23 µs each and its
search restricted to those ids walks a sparse HNSW graph; a row gather from this file plus one matrix
product costs ~1 µs per candidate. Two files per collection: `<name>.f32` (float32 rows, stored at
unit length so a cosine distance is one dot product) and
`<name>.ids` (a `dim=N` header, then one line per row: its id, or `-id` to drop an id). Only the
process that owns the embedded index appends (see index.py); readers map the rows whose id line is
complete, so a writer killed mid-append leaves nothing half-visible, and the next writer cuts the
files back to the complete rows before appending.
"""

from __future__ import annotations

import mmap
import threading
from collections.abc import Iterable, Sequence
from pathlib import Path

import numpy as np


class VectorFile:
    def __init__(self, path: Path):
        self.vectors_path = path.with_suffix(".f32")
        self.ids_path = path.with_suffix(".ids")
        self.dim: int | None = None
        self._rows: dict[str, int] = {}
        self._owners: list[str | None] = []  # per row: its id, or None once replaced or dropped
        self._live: np.ndarray | None = None  # per row: owned? (rebuilt after a refresh)
        self._count = 0  # rows with a complete id line
        self._read_to = 0  # bytes of the ids file already read
        self._matrix: np.ndarray | None = None  # a view of `_map`: the complete rows
        self._map: mmap.mmap | None = None
        self._lock = threading.Lock()

    def append(self, ids: Sequence[str], vectors: Sequence[Sequence[float]]) -> None:
        matrix = np.asarray(vectors, dtype=np.float32)
        norms = np.linalg.norm(matrix, axis=1, keepdims=True)
        matrix = matrix / np.where(norms == 0, 1.0, norms)
        with self._lock:
            self._refresh()
            if self.dim is None:
                self.dim = matrix.shape[1]
                self.ids_path.parent.mkdir(parents=True, exist_ok=True)
                self.ids_path.write_text(f"dim={self.dim}\n", encoding="utf-8")
                self._read_to = self.ids_path.stat().st_size
            if matrix.shape[1] != self.dim:
                raise ValueError(f"vectors of dimension {matrix.shape[1]} for a file of dimension {self.dim}")
            with open(self.vectors_path, "ab") as fh:
                fh.truncate(self._count * self.dim * 4)  # rows a killed writer left without ids
                fh.write(matrix.tobytes())
            self._write_ids(f"{i}\n" for i in ids)

    def drop(self, ids: Sequence[str]) -> None:
        with self._lock:
            self._refresh()
            if self.dim is not None:
                self._write_ids(f"-{i}\n" for i in ids)

    def _write_ids(self, lines: Iterable[str]) -> None:
        with open(self.ids_path, "a", encoding="utf-8") as fh:
            fh.truncate(self._read_to)  # a torn last line of a killed writer
            fh.write("".join(lines))

    def reset(self) -> None:
        with self._lock:
            self.ids_path.unlink(missing_ok=True)
            self.vectors_path.unlink(missing_ok=True)
            self._forget()

    def close(self) -> None:
        """Release the mapping (and its file descriptor); the next use reads the files again."""
        with self._lock:
            self._forget()

    def _forget(self) -> None:
        self._matrix = None  # drop the array before closing the map it views
        if self._map is not None:
            self._map.close()
        self.dim, self._rows, self._count, self._read_to, self._map = None, {}, 0, 0, None
        self._owners, self._live = [], None

    def ids(self) -> set[str]:
        with self._lock:
            self._refresh()
            return set(self._rows)

    def nearest(
        self, vector: Sequence[float], ids: Sequence[str], k: int
    ) -> tuple[list[tuple[str, float]], list[str]]:
        """Cosine distances of the k nearest of `ids` that this file holds, and the ids it lacks."""
        with self._lock:
            self._refresh()
            lookup = self._rows.get
            rows = np.fromiter((lookup(i, -1) for i in ids), dtype=np.int64, count=len(ids))
            held = np.flatnonzero(rows >= 0)
            missing = [ids[n] for n in np.flatnonzero(rows < 0)]
            if not len(held) or self._matrix is None:
                return [], missing
            matrix = self._matrix[rows[held]]
        query = np.asarray(vector, dtype=np.float32)
        distances = 1.0 - dot_rows(matrix, query) / (np.linalg.norm(query) or 1.0)  # rows: unit length
        best = np.argsort(distances, kind="stable")[:k]
        return [(ids[held[n]], float(distances[n])) for n in best], missing

    def scan(self, vector: Sequence[float]) -> tuple[np.ndarray, list[str | None]]:
        """Exact cosine distance of every row to `vector` (inf for replaced or dropped rows), and each
        row's id: one pass over the file (~150 MB at 100k rows of 384 dims)."""
        with self._lock:
            self._refresh()
            if self._matrix is None:
                return np.zeros(0, dtype=np.float32), []
            if self._live is None:
                self._live = np.fromiter((o is not None for o in self._owners), dtype=bool, count=self._count)
            matrix, owners, live = self._matrix, self._owners, self._live
        query = np.asarray(vector, dtype=np.float32)
        distances = 1.0 - dot_rows(matrix, query) / (np.linalg.norm(query) or 1.0)
        distances[~live] = np.inf
        return distances, owners

    def __len__(self) -> int:
        with self._lock:
            self._refresh()
            return len(self._rows)

    def _disown(self, row: int | None) -> None:
        if row is not None:
            self._owners[row] = None

    def _refresh(self) -> None:
        """Read id lines appended since the last look (by this or another process)."""
        try:
            size = self.ids_path.stat().st_size
        except FileNotFoundError:
            self._forget()
            return
        if size < self._read_to:  # reset by another process
            self._forget()
        if size == self._read_to:
            return
        with open(self.ids_path, "rb") as fh:
            fh.seek(self._read_to)
            chunk = fh.read(size - self._read_to)
        complete = chunk[: chunk.rfind(b"\n") + 1]
        self._read_to += len(complete)
        for line in complete.decode("utf-8").splitlines():
            if line.startswith("dim="):
                self.dim = int(line[4:])
            elif line.startswith("-"):
                self._disown(self._rows.pop(line[1:], None))
            else:
                self._disown(self._rows.get(line))
                self._rows[line] = self._count
                self._owners.append(line)
                self._count += 1
        self._live = None
        if self._count and self.dim:
            self._matrix = None
            if self._map is not None:
                self._map.close()
            with open(self.vectors_path, "rb") as fh:
                self._map = mmap.mmap(fh.fileno(), self._count * self.dim * 4, access=mmap.ACCESS_READ)
            self._matrix = np.frombuffer(self._map, dtype=np.float32).reshape(self._count, self.dim)


def dot_rows(matrix: np.ndarray, vector: np.ndarray) -> np.ndarray:
    """matrix @ vector without BLAS: a multithreaded BLAS keeps its threads spinning after the call,
    and on a small machine they starve the embedding model's own threads (query p95 8 -> 100 ms)."""
    return np.einsum("ij,j->i", matrix, vector)


def smallest(distances: np.ndarray, n: int, start: int = 0) -> np.ndarray:
    """Positions of the n smallest finite distances after the `start` smallest, in ascending order."""
    n = min(n, len(distances) - start)
    if n <= 0:
        return np.zeros(0, dtype=np.int64)
    part = np.argpartition(distances, start + n - 1)[: start + n] if start + n < len(distances) else None
    chosen = part if part is not None else np.arange(len(distances))
    ordered = chosen[np.argsort(distances[chosen], kind="stable")][start : start + n]
    return ordered[np.isfinite(distances[ordered])]


def rank(query: np.ndarray, matrix: np.ndarray, ids: Sequence[str], k: int) -> list[tuple[str, float]]:
    """The k nearest rows by cosine distance (as the collections measure it), nearest first."""
    norms = np.sqrt(np.einsum("ij,ij->i", matrix, matrix)) * (np.linalg.norm(query) or 1.0)
    distances = 1.0 - dot_rows(matrix, query) / np.where(norms == 0, 1.0, norms)
    order = np.argsort(distances, kind="stable")[:k]
    return [(ids[n], float(distances[n])) for n in order]
