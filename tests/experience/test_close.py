import contextlib
import gc
import os

from recreate.experience.schema import Trajectory
from recreate.experience.store import ExperienceStore


def open_fds() -> int:
    # Chroma leaves reference cycles that hold its sqlite file until the collector runs; without
    # collecting first the count depends on GC timing (it failed 2 runs in 10)
    gc.collect()
    return len(os.listdir("/proc/self/fd"))


def test_closing_a_store_releases_the_chroma_client(tmp_path):
    def cycle(i: int) -> None:
        with ExperienceStore(tmp_path / "exp", embedding="hash") as store:
            store.add(Trajectory(task_id=f"t{i}", domain="d"))
            assert store.search("t", k=1, scope="summaries")

    cycle(0)
    settled = open_fds()
    for i in range(1, 6):
        cycle(i)
    assert open_fds() <= settled + 1
    with ExperienceStore(tmp_path / "exp", embedding="hash") as store:
        assert len(store.list()) == 6 and len(store.search("t", k=10, scope="summaries")) == 6


def test_a_closed_store_holds_no_file_open_on_any_thread(tmp_path):
    stores = []  # kept, as a long-lived process keeps its objects
    for i in range(50):
        store = ExperienceStore(tmp_path / "exp", embedding="hash")
        store.add(Trajectory(task_id=f"t{i}", domain="d"), index_later=True)  # indexed on a pool thread
        store.close()
        stores.append(store)
    gc.collect()
    assert not [f for f in open_files() if f.startswith(str(tmp_path))]
    assert len(stores[0].list()) == 50  # a closed store reopens on use


def open_files() -> list[str]:
    found = []
    for fd in os.listdir("/proc/self/fd"):
        with contextlib.suppress(OSError):  # the listing's own descriptor, closed by now
            found.append(os.readlink(f"/proc/self/fd/{fd}"))
    return found
