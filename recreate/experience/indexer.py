"""Background indexing for the experience store: a pass runs once adds go quiet, one pass at a time.

Chroma holds the GIL while it writes (~5 ms a call plus per document), which would stall every other
thread of a busy run at each add; waiting for a quiet moment makes a burst of adds one write. Whoever
needs the index (a search, verify, flush, close) cuts the wait short.

A pass that fails is logged at once and tried again after RETRY_S waits (a waiter cuts none of them
short: a busy index or a full disk needs the time); after the last, its error goes to whoever waits and
its entries stay marked unindexed in the catalog, for the next add, flush or opening of the store.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from concurrent.futures import Future

from recreate.pools import ThreadPool

QUIET_S = 0.25  # a pass starts once no add came for this long ...
MAX_DELAY_S = 2.0  # ... or this long after the first add it waits for
RETRY_S = (0.2, 1.0, 5.0)  # a failed pass is tried again after each of these waits
log = logging.getLogger(__name__)
# a worker per store (8 at once), so one store's quiet wait holds up no other
_POOL = ThreadPool(8, "recreate-experience-index")  # a forked child gets its own


class BackgroundIndexer:
    def __init__(self, sync: Callable[[], object]):
        self._sync = sync  # indexes whatever the catalog has unindexed
        self._pass: Future[None] | None = None
        self._again = False  # an add came while a pass ran: it may have read the catalog already
        self._first = self._last = 0.0  # when the first and the last waiting add came
        self._lock = threading.Lock()
        self._now = threading.Event()  # set by a waiter: no quiet period

    def schedule(self) -> None:
        with self._lock:
            now = time.monotonic()
            self._last = now
            if self._pass is not None:
                self._again = True
                return
            self._first = now
            self._pass = _POOL.submit(self._run)

    def wait(self) -> BaseException | None:
        """Until the scheduled indexing is done (at once, not after quiet); the error of a failed pass."""
        with self._lock:
            running = self._pass
        if running is None:
            return None
        self._now.set()
        return running.exception()

    def _wait_for_quiet(self) -> None:
        while not self._now.is_set():
            with self._lock:
                due = min(self._last + QUIET_S, self._first + MAX_DELAY_S)
            left = due - time.monotonic()
            if left <= 0:
                return
            self._now.wait(left)

    def _run(self) -> None:
        while True:
            self._wait_for_quiet()
            with self._lock:
                self._again = False  # (a waiter's `_now` stays set until it is served)
            try:
                self._sync_with_retries()
            except BaseException:
                with self._lock:
                    self._pass = None
                    self._now.clear()
                raise
            with self._lock:
                if not self._again:
                    self._pass = None
                    self._now.clear()  # served: the next pass waits for quiet again
                    return
                self._first = time.monotonic()

    def _sync_with_retries(self) -> None:
        for tries, wait_s in enumerate((*RETRY_S, None), 1):
            try:
                self._sync()
                return
            except Exception as exc:
                if wait_s is None:
                    log.warning("experience indexing failed %d times, left for later: %s", tries, exc)
                    raise
                log.warning("experience indexing failed, trying again in %g s: %s", wait_s, exc)
                time.sleep(wait_s)
