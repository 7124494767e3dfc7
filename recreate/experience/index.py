"""Chroma index over the experience store: steps, trajectory summaries and memory items.

Embedded `PersistentClient` by default, `HttpClient` when a server URL is given. Collection names carry
the embedding's name, so indexes built with different embeddings live side by side and never mix.
The index is derived data: `ExperienceStore.reindex()` rebuilds it from the trajectory files.

One process at a time owns an embedded index for writing (see ownership.py); other processes store
files and catalog rows and leave indexing to the owner (`ExperienceStore.sync_index`). Use a Chroma
server (`chroma_url`) when several processes must index at once.
"""

from __future__ import annotations

import re
import threading
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import urlparse

import chromadb
import numpy as np
from chromadb.api.types import EmbeddingFunction
from chromadb.config import Settings as ChromaSettings

from recreate.experience.catalog import FILTER_KEYS, STEP_KEYS, check_filters
from recreate.experience.documents import (
    base_metadata,
    step_documents,
    summary_document,
    where_clause,
)
from recreate.experience.embeddings import fingerprint, make_embedding
from recreate.experience.ownership import IndexBusyError, opened, owns, release
from recreate.experience.schema import Trajectory
from recreate.experience.vector_cache import VectorCache
from recreate.experience.vectors import VectorFile, rank, smallest

SCOPES = ("steps", "summaries", "memory")
STEP_FILTER_KEYS = (*FILTER_KEYS, *STEP_KEYS)
MEMORY_FILTER_KEYS = ("scaffold_name", "tag")
BRUTE_FORCE_LIMIT = 1000  # filtered search: score the matching documents exactly when this few
# With a server every search is an HNSW search: a denser graph, built and searched wider, for recall among
# near-duplicate steps (10k steps: recall@10 vs exact 0.82 -> 0.95, 0.76 at 100k; ingest 1,232 -> 986
# steps/s with the hash embedding, benchmarks/experience.py --chroma-url). Embedded indexes are scanned
# exactly up to `exact_limit` and keep Chroma's cheaper defaults. Existing collections keep theirs.
SERVER_HNSW = {"space": "cosine", "ef_construction": 400, "max_neighbors": 48, "ef_search": 400}
OVERFETCH = 20  # candidates per hit asked of HNSW (which then searches with ef >= that many)
# Up to this many vectors a search scores every one exactly from the vector file (one pass over 100k:
# 22 ms p50 / 26 ms p95 on 2 shared cores); beyond, HNSW's over-fetched candidates, which on
# near-duplicate steps miss true neighbours (raw Chroma recall@10 0.44 at 100k; benchmarks/experience.py)
EXACT_LIMIT = 200_000


@dataclass(frozen=True)
class Hit:
    id: str
    scope: str
    distance: float
    document: str
    metadata: dict[str, Any]

    @property
    def trajectory_id(self) -> str:
        return str(self.metadata.get("trajectory_id", ""))


def make_client(path: Path, url: str | None = None) -> chromadb.ClientAPI:
    settings = ChromaSettings(anonymized_telemetry=False)
    if url:
        parsed = urlparse(url if "://" in url else f"http://{url}")
        return chromadb.HttpClient(
            host=parsed.hostname or "localhost",
            port=parsed.port or 8000,
            ssl=parsed.scheme == "https",
            settings=settings,
        )
    path.mkdir(parents=True, exist_ok=True)
    return chromadb.PersistentClient(path=str(path), settings=settings)


def filter_keys(scope: str) -> tuple[str, ...]:
    if scope not in SCOPES:
        raise ValueError(f"unknown scope {scope!r}; choose one of {', '.join(SCOPES)}")
    return {"steps": STEP_FILTER_KEYS, "summaries": FILTER_KEYS, "memory": MEMORY_FILTER_KEYS}[scope]


class ExperienceIndex:
    brute_force_limit = BRUTE_FORCE_LIMIT
    overfetch = OVERFETCH
    exact_limit = EXACT_LIMIT

    def __init__(
        self,
        path: Path,
        *,
        embedding: str | EmbeddingFunction = "minilm",
        url: str | None = None,
        vector_cache: Path | None = None,
    ) -> None:
        """`vector_cache`: a file of the vectors of documents embedded before (see vector_cache.py), so
        a repeated document is not embedded again; None embeds every document."""
        self.embedding = make_embedding(embedding)
        self.path, self.url = path, url
        self._cache_path, self._cache = vector_cache, None
        self.client = make_client(path, url)
        self._owner_key = opened(path) if url is None else None  # embedded: see `_release`
        self._suffix = re.sub(r"[^A-Za-z0-9]+", "-", self.embedding.name()).strip("-")
        self._write_lock = threading.Lock()
        self._open_lock = threading.Lock()
        self._cache_lock = threading.Lock()
        self._collections: dict[str, Any] = {}
        self._copied: set[str] = set()
        # embedded only: with a server, several processes write and no single file can follow them
        self._vector_files = {
            scope: VectorFile(path / "vectors" / self.collection_name(scope))
            for scope in ("steps", "summaries")
            if url is None
        }

    def collection_name(self, scope: str) -> str:
        return f"exp-{scope}-{self._suffix}"

    def collection(self, scope: str) -> Any:
        if scope not in SCOPES:
            raise ValueError(f"unknown scope {scope!r}; choose one of {', '.join(SCOPES)}")
        with self._open_lock:
            if scope not in self._collections:
                self._collections[scope] = self.client.get_or_create_collection(
                    self.collection_name(scope),
                    embedding_function=self.embedding,
                    configuration={"hnsw": SERVER_HNSW if self.url else {"space": "cosine"}},
                )
        return self._collections[scope]

    def close(self) -> None:
        for vectors in self._vector_files.values():
            vectors.close()
        self.client.close()
        if self._cache is not None:
            self._cache.close()
        if self._owner_key is not None:
            release(self._owner_key)
            self._owner_key = None

    def writable(self) -> bool:
        """True when this process may write: always with a server, else when it owns the directory."""
        return self.url is not None or owns(self.path)

    def _check_writable(self) -> None:
        if not self.writable():
            raise IndexBusyError(
                f"another process is writing the index in {self.path}; "
                "its entries are indexed by that process or by the next `reindex`/sync"
            )

    def _write(self, scope: str, ids: list[str], docs: list[str], metas: list[dict[str, Any]]) -> None:
        if not ids:
            return
        self._check_writable()
        collection = self.collection(scope)
        batch = self.client.get_max_batch_size()
        embeddings = list(self._embed_documents(docs))
        # A stored trajectory never changes, so its documents are added (~8% faster than upsert; an id
        # indexed twice after a crash keeps its identical first copy); memory items are edited in place.
        write = collection.upsert if scope == "memory" else collection.add
        with self._write_lock:
            for start in range(0, len(ids), batch):
                end = start + batch
                write(
                    ids=ids[start:end],
                    documents=docs[start:end],
                    metadatas=metas[start:end],
                    embeddings=embeddings[start:end],
                )
            if scope in self._vector_files:
                self._vector_files[scope].append(ids, embeddings)

    def _embed_documents(self, docs: list[str]) -> Sequence[Any]:
        with self._cache_lock:  # writers on several threads share one cache (and one connection)
            if self._cache is None and self._cache_path is not None:
                key = fingerprint(self.embedding)  # loads the model: not before the first write
                if key is None:  # an embedding that cannot name its weights: nothing to key a cache on
                    self._cache_path = None
                else:
                    self._cache = VectorCache(self._cache_path, key)
            cache = self._cache
        return self.embedding(docs) if cache is None else cache.embed(docs, self.embedding)

    def add(self, trajectories: Sequence[Trajectory]) -> None:
        ids, docs, metas = [], [], []
        for traj in trajectories:
            step_ids, step_docs, step_metas = step_documents(traj)
            ids += step_ids
            docs += step_docs
            metas += step_metas
        self._write("steps", ids, docs, metas)
        self._write(
            "summaries",
            [t.trajectory_id for t in trajectories],
            [summary_document(t) for t in trajectories],
            [base_metadata(t) for t in trajectories],
        )

    def add_memory(self, items: Iterable[dict[str, Any]], scaffold_name: str = "") -> None:
        ids, docs, metas = [], [], []
        for item in items:
            ids.append(str(item["id"]))
            docs.append(f"{item.get('title', '')}\n{item.get('content', '')}")
            metas.append(
                {
                    "scaffold_name": scaffold_name,
                    "title": str(item.get("title", "")),
                    "tag": ",".join(item.get("tags", [])) or "",
                }
            )
        self._write("memory", ids, docs, metas)

    def search(
        self,
        query: str,
        *,
        scope: str = "steps",
        filters: dict[str, Any] | None = None,
        k: int = 5,
        vector: Any = None,
    ) -> list[Hit]:
        """Nearest documents to `query` (or its precomputed `vector`) matching `filters`, which Chroma
        applies itself: exact, but slow on large collections (its metadata scan takes ~150 ms at 100k
        steps). `ExperienceStore.search` answers step and trajectory filters through its catalog."""
        filters = check_filters(filters, filter_keys(scope))
        if vector is None:
            vector = self.embed(query)
        return self._query(scope, vector, where_clause(filters), k)

    def embed(self, query: str) -> Any:
        return self.embedding.embed_query([query])

    def nearest(self, scope: str, vector: Any, n: int) -> list[tuple[str, float]]:
        """(id, distance) of the `n` nearest documents by HNSW, without reading their metadata (cheap).
        HNSW searches with ef = max(ef_search, n), so asking for more candidates also finds the
        nearest ones more reliably among near-duplicates."""
        found = self.collection(scope).query(query_embeddings=vector, n_results=n, include=["distances"])
        return list(zip(found["ids"][0], map(float, found["distances"][0]), strict=True))

    def scans_exactly(self, scope: str) -> bool:
        """True when a search of `scope` scores every stored vector: embedded, at most `exact_limit`
        of them, and the vector file holds all that Chroma does (not so after a killed writer)."""
        if scope not in self._vector_files:
            return False
        self._copy_vectors_once(scope)
        held = len(self._vector_files[scope])
        return held <= self.exact_limit and held >= self.collection(scope).count()

    def ranked(
        self, scope: str, vector: Any, k: int, keep: Callable[[list[str]], set[str]] | None = None
    ) -> list[tuple[str, float]]:
        """(id, distance) of the `k` nearest documents whose ids `keep` keeps (all when None), nearest
        first. Exact when `scans_exactly`; otherwise the best of `k * overfetch` HNSW candidates
        (fewer than k when `keep` rejects too many of them)."""
        if not self.scans_exactly(scope):
            ranked = self.nearest(scope, vector, k * self.overfetch)
            if keep is not None:
                kept = keep([i for i, _ in ranked])
                ranked = [(i, d) for i, d in ranked if i in kept]
            return ranked[:k]
        distances, owners = self._vector_files[scope].scan(vector[0])
        chosen: list[tuple[str, float]] = []
        start, size = 0, k * self.overfetch
        while len(chosen) < k and start < len(distances):
            rows = smallest(distances, size, start)
            if not len(rows):
                break
            batch = [(owners[r], float(distances[r])) for r in rows]
            kept = keep([i for i, _ in batch]) if keep is not None else None  # type: ignore[misc]
            chosen += [(i, d) for i, d in batch if kept is None or i in kept]  # type: ignore[misc]
            start, size = start + size, size * 4
        return chosen[:k]

    def nearest_among(self, scope: str, vector: Any, ids: Sequence[str], k: int) -> list[Hit]:
        """Exact: the `k` nearest of the documents `ids` by cosine distance, like the collections.
        Scored here from the vector file (or, with a server, from vectors Chroma returns, or for many
        ids by Chroma's search restricted to them)."""
        if not ids:
            return []
        query = np.asarray(vector[0], dtype=np.float32)
        if scope in self._vector_files:
            self._copy_vectors_once(scope)
            ranked, missing = self._vector_files[scope].nearest(query, ids, k)
            if missing:  # not indexed yet, or indexed by a writer killed before its file append
                ranked = sorted(ranked + self._rank_from_chroma(scope, query, missing, k), key=lambda r: r[1])
            return self.hits(scope, ranked[:k])
        if len(ids) > self.brute_force_limit:
            found = self.collection(scope).query(
                query_embeddings=vector, ids=list(ids), n_results=k, include=["distances"]
            )
            return self.hits(
                scope, list(zip(found["ids"][0], map(float, found["distances"][0]), strict=True))
            )
        return self.hits(scope, self._rank_from_chroma(scope, query, ids, k))

    def _copy_vectors_once(self, scope: str, page: int = 5000) -> None:
        """Indexes built before vector files existed get theirs from Chroma, once (~25 s per 1M steps)."""
        vectors = self._vector_files[scope]
        if scope in self._copied or not self.writable():
            return
        with self._write_lock:
            self._copied.add(scope)
            if vectors.ids() or not self.collection(scope).count():
                return
            offset = 0
            while True:
                got = self.collection(scope).get(include=["embeddings"], limit=page, offset=offset)
                if len(got["ids"]):
                    vectors.append(got["ids"], got["embeddings"])
                if len(got["ids"]) < page:
                    return
                offset += page

    def _rank_from_chroma(
        self, scope: str, query: np.ndarray, ids: Sequence[str], k: int
    ) -> list[tuple[str, float]]:
        got = self.collection(scope).get(ids=list(ids), include=["embeddings"])
        if not got["ids"]:
            return []
        return rank(query, np.asarray(got["embeddings"], dtype=np.float32), got["ids"], k)

    def vector_file_ids(self, scope: str) -> set[str] | None:
        """Ids in the scope's vector file; None when the index keeps none (server mode)."""
        return self._vector_files[scope].ids() if scope in self._vector_files else None

    def hits(self, scope: str, ranked: Sequence[tuple[str, float]]) -> list[Hit]:
        """Hits with documents and metadata for ranked (id, distance) pairs."""
        if not ranked:
            return []
        got = self.collection(scope).get(ids=[i for i, _ in ranked], include=["documents", "metadatas"])
        found = {
            i: (doc, meta)
            for i, doc, meta in zip(got["ids"], got["documents"], got["metadatas"], strict=True)
        }
        return [
            Hit(id=i, scope=scope, distance=d, document=found[i][0] or "", metadata=dict(found[i][1] or {}))
            for i, d in ranked
            if i in found
        ]

    def _query(self, scope: str, vector: Any, where: dict[str, Any] | None, k: int) -> list[Hit]:
        found = self.collection(scope).query(
            query_embeddings=vector, n_results=k, where=where, include=["metadatas", "distances", "documents"]
        )
        return [
            Hit(id=i, scope=scope, distance=float(d), document=doc or "", metadata=dict(meta or {}))
            for i, d, doc, meta in zip(
                found["ids"][0],
                found["distances"][0],
                found["documents"][0],
                found["metadatas"][0],
                strict=True,
            )
        ]

    def ids(self, scope: str, page: int = 5000) -> set[str]:
        collection, out, offset = self.collection(scope), set(), 0
        while True:
            got = collection.get(include=[], limit=page, offset=offset)["ids"]
            out.update(got)
            if len(got) < page:
                return out
            offset += page

    def delete(self, scope: str, ids: list[str]) -> None:
        self._check_writable()
        collection = self.collection(scope)
        with self._write_lock:
            for start in range(0, len(ids), self.client.get_max_batch_size()):
                collection.delete(ids=ids[start : start + self.client.get_max_batch_size()])
            if scope in self._vector_files:
                self._vector_files[scope].drop(ids)

    def reset(self, scopes: Iterable[str] = SCOPES) -> None:
        self._check_writable()
        with self._write_lock:
            for scope in scopes:
                self._collections.pop(scope, None)
                if self.collection_name(scope) in {c.name for c in self.client.list_collections()}:
                    self.client.delete_collection(self.collection_name(scope))
                if scope in self._vector_files:
                    self._vector_files[scope].reset()
