"""The catalog's connections: one per thread, and `close` (from any thread) closes every one of them
without pulling a connection from under a statement another thread is running."""

from __future__ import annotations

import subprocess
import sys
import threading
from pathlib import Path

from recreate.experience.catalog import Catalog, entry_for, step_rows
from tests.experience.factory import make_trajectory

REPO = Path(__file__).resolve().parents[2]

# two threads query while a third closes the catalog over and over, for a second
HAMMER = """
import sys, threading, time
from pathlib import Path
from recreate.experience.catalog import Catalog, entry_for
from tests.experience.factory import make_trajectory

catalog = Catalog(Path(sys.argv[1]) / "catalog.sqlite")
for n in range(300):
    traj = make_trajectory(f"t-{n}", n_steps=2)
    catalog.insert(entry_for(traj, path=f"{n}.json", added_at=f"{n:05d}", source=None), lambda: None)
stop, reads, errors = time.monotonic() + 1.0, [], []

def read() -> None:
    while time.monotonic() < stop:
        try:
            reads.append(len(catalog.query()))
        except Exception as exc:
            errors.append(repr(exc))

def close() -> None:
    while time.monotonic() < stop:
        catalog.close()
        time.sleep(0.001)

threads = [threading.Thread(target=read), threading.Thread(target=read), threading.Thread(target=close)]
for t in threads:
    t.start()
for t in threads:
    t.join()
print(len(reads), set(reads), errors[:3])
"""


def test_closing_while_other_threads_query_neither_crashes_nor_fails_a_query(tmp_path: Path) -> None:
    # in a child: a connection closed under a running statement killed the interpreter (SIGSEGV)
    done = subprocess.run(
        [sys.executable, "-c", HAMMER, str(tmp_path)],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    reads, sizes, errors = done.stdout.strip().split(" ", 2)
    assert int(reads) > 0 and sizes == "{300}" and errors == "[]"


def test_close_waits_for_another_threads_transaction_and_the_thread_reconnects(tmp_path: Path) -> None:
    catalog = Catalog(tmp_path / "catalog.sqlite")
    traj = make_trajectory("t-1", n_steps=2)
    inside, go_on = threading.Event(), threading.Event()

    def commit_file() -> None:  # runs inside the insert's transaction
        inside.set()
        assert go_on.wait(10)

    def insert_then_read(found: list[int]) -> None:
        catalog.insert(
            entry_for(traj, path="t-1.json", added_at="0", source=None), commit_file, step_rows(traj)
        )
        found.append(catalog.count())  # on this thread's connection, which `close` closed: reopened

    found: list[int] = []
    writer = threading.Thread(target=insert_then_read, args=(found,))
    writer.start()
    assert inside.wait(10)
    closer = threading.Thread(target=catalog.close)
    closer.start()
    closer.join(0.3)
    assert closer.is_alive()  # waiting for the transaction, not closing its connection under it
    go_on.set()
    closer.join(10)
    writer.join(10)
    assert not closer.is_alive() and found == [1]
    assert catalog.get("t-1") is not None and catalog.count() == 1
    catalog.close()
