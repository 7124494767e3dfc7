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
