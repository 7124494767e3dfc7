"""Rollouts as Ray tasks on a real local cluster (127.0.0.1, 2 worker slots), started once for the module
from a short-lived thread (as a rollout's pool thread would): the same scores and sampling seeds as threads
per task and seed, the driver alone writing cache, store and ledger, one budget across workers, a worker
killed mid-rollout retried (nothing lost, its calls paid), one that always dies an error (never a score),
Ctrl-C, no key in Ray's logs, every socket on loopback. Choosing the executor: test_ray_inputs.py."""

from __future__ import annotations

import importlib.util
import json
import os
import signal
import sys
import tempfile
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from recreate.cli import main
from recreate.domains import get_domain
from recreate.errors import ArgumentError
from recreate.evaluation import RolloutCache, Rollouts
from recreate.evaluation.errors import ERROR_KEY
from recreate.evaluation.ray_executor import RETRIES, RayExecutor
from recreate.evaluation.ray_join import JOIN_TRIES
from recreate.experience.store import ExperienceStore
from recreate.models import Budget, BudgetExceeded, UsageLedger
from recreate.sandbox import SandboxSpec, get_sandbox
from recreate.sandbox.spares import ASKS_BEFORE_SPARES
from recreate.testing import Reply, tool_call
from tests.conftest import FAKE_KEY
from tests.evaluation.conftest import EVALUATOR, EXAMPLE, MINIMAL, solver, write_tasks

needs_ray = pytest.mark.skipif(
    importlib.util.find_spec("ray") is None, reason="ray is not installed: pip install 'recreate[ray]'"
)


STARTERS_HOME = tempfile.mkdtemp(prefix="ray-starter-home-")


@pytest.fixture(scope="module")
def cluster() -> Iterator[RayExecutor]:
    """A local Ray with 2 worker slots, its workers holding a fake API key in their environment."""
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("OPENAI_API_KEY", FAKE_KEY)
        patch.setenv("RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER", "1")  # asks Ray to listen on every interface
        patch.setenv("HOME", STARTERS_HOME)  # where Ray would write its auth token
        patch.delenv("RAY_AUTH_TOKEN", raising=False)
        executor = RayExecutor(num_cpus=2)
        starter = threading.Thread(target=executor.connect)  # as a rollout's pool thread, gone after
        starter.start()
        starter.join()
    import ray

    yield executor
    ray.shutdown()


LOOPBACK = {"0100007F", "0000000000000000FFFF00000100007F", "00000000000000000000000001000000"}


def _listening_addresses() -> set[str]:
    """The local addresses (as /proc/net writes them) of the TCP sockets this process and those below it
    listen on."""
    from recreate.evaluation.ray_reaper import descendants

    inodes = set()
    for pid in [str(os.getpid()), *descendants()]:
        try:
            links = [os.readlink(fd) for fd in Path(f"/proc/{pid}/fd").iterdir()]
        except OSError:
            continue  # gone
        inodes |= {link[8:-1] for link in links if link.startswith("socket:[")}
    found = set()
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        for row in Path(table).read_text().splitlines()[1:]:
            fields = row.split()
            if fields[3] == "0A" and fields[9] in inodes:  # LISTEN
                found.add(fields[1].split(":")[0])
    assert found, "no listening socket found: the check sees nothing"
    return found


@needs_ray
def test_a_second_executor_joins_the_same_ray_and_another_cluster_is_one_line_at_once(cluster) -> None:
    assert RayExecutor(num_cpus=2).connect() is not None  # the local Ray this process started: shared
    started = time.monotonic()
    with pytest.raises(
        RuntimeError, match=r"already runs rollouts on a Ray on this machine.*ray://127\.0\.0\.1:9"
    ):
        RayExecutor("ray://127.0.0.1:9").connect()  # was: silently the local Ray, not the cluster asked for
    assert time.monotonic() - started < 2


_TWO_AT_ONCE = """
import threading
import ray
from recreate.evaluation.ray_executor import RayExecutor

executors, errors = [RayExecutor(num_cpus=2), RayExecutor(num_cpus=2)], []
start = threading.Barrier(2)

def connect(executor):
    start.wait()
    try:
        executor.connect()
    except Exception as exc:
        errors.append(exc)

threads = [threading.Thread(target=connect, args=(executor,)) for executor in executors]
for thread in threads:
    thread.start()
for thread in threads:
    thread.join()
print("errors:", errors, "initialized:", ray.is_initialized())
"""


_LOCAL_SERVER_FROM_A_WORKER = """
import sys
from pathlib import Path

import ray

from recreate.evaluation.ray_executor import RayExecutor
from recreate.local.server import LocalServer, free_port

port = free_port()
command = [sys.executable, "-c", sys.argv[2], str(port), sys.argv[3]]  # a stand-in behind our guard
server = LocalServer(command, engine="fake", model="m", port=port, home=Path(sys.argv[1]), tool_calls=False)
info = server.start()
RayExecutor(num_cpus=1).connect()


@ray.remote
def ask(spec):
    from recreate.models import make_chat_model

    return make_chat_model(spec, max_retries=0).invoke("hi").content


try:
    print("answer:", ray.get(ask.remote(info.spec), timeout=120))
finally:
    server.stop()
    ray.shutdown()
"""


@needs_ray
def test_a_local_ray_worker_reaches_a_local_server_of_a_home_given_only_to_the_driver(tmp_path: Path) -> None:
    """`optimize(home=...)` with a local model on a local Ray: the workers' own home (RECREATE_HOME) is
    elsewhere, yet they find the server's key (the driver names its home to the processes it starts)."""
    import subprocess

    from recreate.local.vllm import GUARD_DIR
    from tests.local.test_server_isolation import KEYED_SERVER

    pytest.importorskip("uvicorn")

    env = {**os.environ, "HOME": str(tmp_path), "RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER": "1"}
    env["RECREATE_HOME"] = str(tmp_path / "the-workers-home")
    env.pop("RAY_AUTH_TOKEN", None)
    env.pop("RECREATE_SERVER_HOMES", None)
    home = tmp_path / "the-drivers-home"
    done = subprocess.run(
        [sys.executable, "-c", _LOCAL_SERVER_FROM_A_WORKER, str(home), KEYED_SERVER, str(GUARD_DIR)],
        env=env, capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    assert "answer: hello" in done.stdout, done.stdout + done.stderr[-2000:]


@needs_ray
def test_two_executors_connecting_at_once_share_one_ray(tmp_path: Path) -> None:
    import subprocess

    env = {**os.environ, "HOME": str(tmp_path), "RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER": "1"}
    env.pop("RAY_AUTH_TOKEN", None)
    done = subprocess.run(
        [sys.executable, "-c", _TWO_AT_ONCE], env=env, capture_output=True, text=True, timeout=300
    )
    # was: both saw no Ray yet and both started one; the second's failure shut the first's down
    assert "errors: [] initialized: True" in done.stdout, done.stdout + done.stderr[-2000:]


@needs_ray
def test_the_local_cluster_asks_for_a_token_kept_in_its_private_folder(cluster) -> None:
    import ray
    from ray._private.authentication.authentication_utils import is_token_auth_enabled

    token = Path(os.environ["RAY_AUTH_TOKEN_PATH"])
    assert is_token_auth_enabled() and len(token.read_text()) == 64
    assert token.stat().st_mode & 0o077 == 0 and token.parent.stat().st_mode & 0o077 == 0
    assert not Path(STARTERS_HOME, ".ray").exists()  # nothing in the home of whoever started it
    assert ray.get_runtime_context().gcs_address.startswith("127.0.0.1:")


@needs_ray
def test_a_rollout_killed_for_memory_is_retried_as_a_dead_worker_is_not_forever(cluster) -> None:
    import ray

    assert ray._private.worker._global_node._config["task_oom_retries"] == RETRIES == cluster.retries


def _run(
    executor, domain, url: str, tmp_path: Path, name: str, sandbox: object = "bwrap", **options
) -> tuple[list, Rollouts]:
    rollouts = Rollouts(
        MINIMAL, domain, model=f"scripted@{url}", sandbox=sandbox, cache=RolloutCache(tmp_path / name),
        trajectory_dir=tmp_path / name / "log", executor=executor, **options,
    )  # fmt: skip
    return rollouts.run_many(domain.tasks("all"), seeds=(0, 1), concurrency=2, progress=False), rollouts


def _sampled(requests) -> list[tuple[str, int, int]]:
    """What each model call asked for: the task, the conversation's length, the sampling seed."""
    return sorted((r["messages"][1]["content"], len(r["messages"]), r.get("seed")) for r in requests)


def _scores(trajectories) -> dict[tuple[str, int], float]:
    return {(t.task_id, t.seed): t.evaluation.score for t in trajectories}


@needs_ray
@pytest.mark.bwrap
def test_ray_gives_the_scores_of_threads_and_the_driver_keeps_the_records(
    cluster, openai_server, bwrap, tmp_path
):
    import ray

    assert ray.get_runtime_context().gcs_address.startswith("127.0.0.1:")
    assert _listening_addresses() <= LOOPBACK  # every socket the cluster's processes listen on
    data = write_tasks(tmp_path / "tasks.jsonl", 2)
    domain = get_domain("jsonl", data=data, evaluator=EVALUATOR, evaluator_dir=EXAMPLE)
    openai_server.responder = solver(wrong={"add_1"})
    threads, _ = _run(None, domain, openai_server.url, tmp_path, "threads", ledger=UsageLedger())
    by_threads = _sampled(openai_server.requests)
    store = ExperienceStore(tmp_path / "experience", index=False)
    ledger = UsageLedger(tmp_path / "ledger.jsonl")
    on_ray, rollouts = _run(cluster, domain, openai_server.url, tmp_path, "ray", store=store, ledger=ledger)

    assert _scores(on_ray) == _scores(threads) and len(on_ray) == 4
    assert _sampled(openai_server.requests[len(by_threads) :]) == by_threads  # the same seeds asked for
    assert _scores(on_ray)[("add-1", 0)] == 0.0 and _scores(on_ray)[("add-0", 1)] == 1.0
    for traj in on_ray:  # the driver cached, logged and stored what the workers returned
        assert rollouts.cached(domain.tasks("all")[int(traj.task_id[-1])], traj.seed) is not None
        assert store.get(traj.trajectory_id).evaluation.score == traj.evaluation.score
        assert (tmp_path / "ray" / "log" / f"{traj.trajectory_id}.json").is_file()
    assert ledger.totals()["calls"] == 8 and ledger.totals()["cost_usd"] == pytest.approx(0.008)
    assert len((tmp_path / "ledger.jsonl").read_text().splitlines()) == 8

    calls = len(openai_server.requests)
    again, _ = _run(cluster, domain, openai_server.url, tmp_path, "ray")
    assert _scores(again) == _scores(threads) and len(openai_server.requests) == calls  # cache: no run
    threads_again, _ = _run(None, domain, openai_server.url, tmp_path, "ray")  # the same cache keys
    assert _scores(threads_again) == _scores(threads) and len(openai_server.requests) == calls

    logs = Path(ray._private.worker._global_node.get_session_dir_path())
    below_tmp = [p for p in logs.parents if Path(tempfile.gettempdir()) in p.parents]
    assert any(p.stat().st_mode & 0o077 == 0 for p in below_tmp)  # Ray's files: this user's alone
    leaked = [p for p in logs.rglob("*") if p.is_file() and FAKE_KEY.encode() in p.read_bytes()]
    assert not leaked, f"the API key is in Ray's files: {leaked}"


def _stepper(steps: int):
    """Responder: `steps` - 1 bash steps, then the right function."""

    def respond(body: dict) -> Reply:
        name = body["messages"][1]["content"].split("`")[1].split("(")[0]
        if len(body["messages"]) < 2 * steps:
            return tool_call("bash", {"command": "true"}, cost=0.001)
        return tool_call("submit", {"answer": f"def {name}(x):\n    return x + {name[4:]}\n"}, cost=0.001)

    return respond


@needs_ray
@pytest.mark.bwrap
def test_a_backend_object_that_keeps_spares_travels_to_the_workers(cluster, openai_server, tmp_path):
    """`recreate evolve --executor ray` hands the rollouts its resolved backend object, not a name; one
    that had opened sessions ahead of need (its spares) could not be sent to a worker."""
    sandbox = get_sandbox("bwrap")
    for _ in range(ASKS_BEFORE_SPARES):
        sandbox.open(SandboxSpec()).close()
    data = write_tasks(tmp_path / "tasks.jsonl", 2)
    domain = get_domain("jsonl", data=data, evaluator=EVALUATOR, evaluator_dir=EXAMPLE)
    openai_server.responder = solver(wrong={"add_1"})
    try:
        threads, _ = _run(None, domain, openai_server.url, tmp_path, "threads", sandbox)
        on_ray, _ = _run(cluster, domain, openai_server.url, tmp_path, "ray", sandbox)
    finally:
        sandbox.close_spares()
    assert _scores(on_ray) == _scores(threads) and len(on_ray) == 4
    assert not any(t.metadata.get(ERROR_KEY) for t in on_ray)


@needs_ray
@pytest.mark.bwrap
def test_the_budget_is_one_budget_across_workers(cluster, openai_server, tmp_path):
    data = write_tasks(tmp_path / "tasks.jsonl", 4)
    domain = get_domain("jsonl", data=data, evaluator=_judge(tmp_path, doomed=None))
    openai_server.responder = _stepper(8)
    ledger = UsageLedger(budget=Budget(max_calls=5))
    with pytest.raises(BudgetExceeded):
        _run(cluster, domain, openai_server.url, tmp_path, "budget", ledger=ledger)
    # each worker checks the run's whole spend before each call: past the budget go only the calls in
    # flight when it was reached, one per worker (2), as with threads; not each worker's own 5
    calls = len(openai_server.requests)
    assert 5 <= ledger.totals()["calls"] == calls <= 5 + 2
    assert not list((tmp_path / "budget").glob("**/*-s*.json"))  # nothing cached


def _judge(tmp_path: Path, doomed: str | None, *, every_time: bool = False):
    """A Python evaluator (it runs in the worker's process) that, on the `doomed` task, leaves its pid
    in tmp_path/doomed.pid and waits to be killed (the first time), or kills its process (every time)."""
    marker = tmp_path / "doomed.pid"

    def judge(task, submission):
        if task.id == doomed and every_time:
            os.kill(os.getpid(), signal.SIGKILL)
        if task.id == doomed and not marker.exists():
            marker.write_text(str(os.getpid()))
            time.sleep(120)
        offset = task.id.split("-")[1]
        return {"score": float(f"x + {offset}" in submission)}

    return judge


def _kill_when_doomed(marker: Path, killed: list[int]) -> threading.Thread:
    def watch() -> None:
        deadline = time.monotonic() + 120
        while not marker.exists() and time.monotonic() < deadline:
            time.sleep(0.05)
        time.sleep(0.1)  # the pid is written
        killed.append(int(marker.read_text()))
        os.kill(killed[0], signal.SIGKILL)

    watcher = threading.Thread(target=watch, daemon=True)
    watcher.start()
    return watcher


@needs_ray
@pytest.mark.bwrap
def test_a_worker_killed_mid_rollout_is_retried_and_nothing_is_lost(cluster, openai_server, tmp_path):
    data = write_tasks(tmp_path / "tasks.jsonl", 3)
    domain = get_domain("jsonl", data=data, evaluator=_judge(tmp_path, doomed="add-1"))
    openai_server.responder = solver()
    killed: list[int] = []
    watcher = _kill_when_doomed(tmp_path / "doomed.pid", killed)
    ledger = UsageLedger()
    done, _ = _run(cluster, domain, openai_server.url, tmp_path, "killed", ledger=ledger)
    watcher.join(timeout=5)

    assert killed and killed[0] != os.getpid()  # a worker process, not the driver
    assert _scores(done) == {(f"add-{i}", s): 1.0 for i in range(3) for s in (0, 1)}
    assert not any(t.metadata.get("rollout_error") for t in done)
    first_turns = [r for r in openai_server.requests if len(r["messages"]) == 2]
    runs_of_add_1 = sum("add_1(" in r["messages"][1]["content"] for r in first_turns)
    assert runs_of_add_1 == 3  # seeds 0 and 1, and the killed one's retry
    assert ledger.totals()["calls"] == len(openai_server.requests) == 14  # the killed try's calls too


@needs_ray
@pytest.mark.bwrap
def test_a_worker_that_always_dies_is_an_error_never_a_score(cluster, openai_server, tmp_path):
    data = write_tasks(tmp_path / "tasks.jsonl", 2)
    domain = get_domain("jsonl", data=data, evaluator=_judge(tmp_path, doomed="add-0", every_time=True))
    openai_server.responder = solver()
    rollouts = Rollouts(
        MINIMAL, domain, model=f"scripted@{openai_server.url}", sandbox="bwrap",
        cache=RolloutCache(tmp_path / "cache"), trajectory_dir=tmp_path, executor=RayExecutor(retries=1),
    )  # fmt: skip
    dead, alive = rollouts.run_many(domain.tasks("all"), concurrency=2, progress=False)

    assert dead.evaluation is None and dead.metadata["rollout_error"] == "machine"
    assert "the Ray worker running it died (2 tries)" in dead.metadata["rollout_error_reason"]
    assert rollouts.cached(domain.tasks("all")[0]) is None  # run again next time
    assert alive.evaluation.score == 1.0 and rollouts.cached(domain.tasks("all")[1]) is not None


@needs_ray
def test_a_model_object_that_cannot_travel_is_one_argument_error(cluster, tmp_path):
    from langchain_openai import ChatOpenAI

    data = write_tasks(tmp_path / "tasks.jsonl", 1)
    domain = get_domain("jsonl", data=data, evaluator=EVALUATOR, evaluator_dir=EXAMPLE)
    model = ChatOpenAI(model="m", base_url="http://127.0.0.1:9/v1", api_key=FAKE_KEY)
    rollouts = Rollouts(MINIMAL, domain, model=model, sandbox="bwrap", cache=False, executor=cluster)
    with pytest.raises(ArgumentError, match=r"pass the model as a spec \(NAME@URL\)") as refused:
        rollouts.run(domain.tasks("all")[0])
    assert "\n" not in str(refused.value) and FAKE_KEY not in str(refused.value)


@needs_ray
@pytest.mark.bwrap
def test_eval_command_runs_on_ray(
    cluster, openai_server, bwrap, monkeypatch, capsys, recreate_home, tmp_path
):
    data = write_tasks(tmp_path / "tasks.jsonl", 2)
    openai_server.responder = solver()
    argv = ["recreate", "eval", "--scaffold", str(MINIMAL), "--domain", "jsonl", "--data", str(data),
            "--split", "all", "--model", f"scripted@{openai_server.url}", "--evaluator", EVALUATOR,
            "-o", f"evaluator_dir={EXAMPLE}", "--sandbox", "bwrap", "--no-progress", "--executor", "ray",
            "--run", "on-ray"]  # fmt: skip
    monkeypatch.setattr(sys, "argv", argv)
    with pytest.raises(SystemExit) as done:
        main()
    assert done.value.code == 0, capsys.readouterr().err
    results = json.loads((recreate_home / "evals" / "on-ray" / "results.json").read_text())
    assert results["complete"] and results["summary"]["pass_at_1"] == 1.0
    assert [t["task_id"] for t in results["tasks"]] == ["add-0", "add-1"]


@pytest.mark.bwrap
@pytest.mark.parametrize("where", ["threads", pytest.param("ray", marks=needs_ray)])
def test_ctrl_c_starts_no_more_rollouts_and_keeps_the_finished(where, request, openai_server, tmp_path):
    executor = request.getfixturevalue("cluster") if where == "ray" else None
    data = write_tasks(tmp_path / "tasks.jsonl", 6)
    domain = get_domain("jsonl", data=data, evaluator=EVALUATOR, evaluator_dir=EXAMPLE)
    openai_server.responder = solver(delay_s=0.2)
    rollouts = Rollouts(
        MINIMAL, domain, model=f"scripted@{openai_server.url}", sandbox="bwrap",
        cache=RolloutCache(tmp_path / "cache"), trajectory_dir=tmp_path / "log", executor=executor,
    )  # fmt: skip
    pressed = threading.Event()

    def ctrl_c(traj) -> None:  # once the first rollout is finished
        if not pressed.is_set():
            pressed.set()
            signal.pthread_kill(threading.main_thread().ident, signal.SIGINT)

    with pytest.raises(KeyboardInterrupt):
        rollouts.run_many(domain.tasks("all"), concurrency=1, progress=False, on_result=ctrl_c)
    started = [r for r in openai_server.requests if len(r["messages"]) == 2]
    assert len(started) <= 2  # the first, and one that started before Ctrl-C arrived; not all 6
    kept = [t for t in domain.tasks("all") if rollouts.cached(t) is not None]
    assert kept and all(rollouts.cached(t).evaluation.score == 1.0 for t in kept)


@needs_ray
@pytest.mark.bwrap
def test_a_meter_that_cannot_be_read_makes_an_error_never_a_score(cluster, openai_server, tmp_path):
    import ray

    from recreate.evaluation.ray_executor import runner_key
    from recreate.evaluation.ray_worker import Meter, Metered

    data = write_tasks(tmp_path / "tasks.jsonl", 1)
    domain = get_domain("jsonl", data=data, evaluator=EVALUATOR, evaluator_dir=EXAMPLE)
    openai_server.responder = solver()
    rollouts = Rollouts(MINIMAL, domain, model=f"scripted@{openai_server.url}", sandbox="bwrap", cache=False)
    gone = ray.remote(num_cpus=0)(Meter).remote()
    ray.kill(gone)  # the worker's view of the budget fails (its node cut off from the driver's)
    metered = Metered(gone, "ledger", "attempt", Budget(max_calls=100), {})
    remote = cluster.connect()
    recipe = ray.put(rollouts.recipe)
    traj, _, _ = ray.get(remote.remote([recipe], runner_key(rollouts), domain.tasks("all")[0], 0, metered))
    assert traj.evaluation is None and traj.metadata["rollout_error"] == "machine"
    assert "budget meter could not be read" in traj.metadata["rollout_error_reason"]


class _FlakyHead:
    """Ray's `init`/`shutdown` for a head whose client server for a driver fails to start `failures`
    times (as a busy head's was seen to: Ray raises ConnectionAbortedError), or raises `other`."""

    def __init__(self, failures: int, other: Exception | None = None):
        self.failures, self.other, self.calls = failures, other, []

    def init(self, **kwargs: object) -> None:
        self.calls.append("init")
        if self.other is not None:
            raise self.other
        if self.failures:
            self.failures -= 1
            raise ConnectionAbortedError("Initialization failure: Starting Ray client server failed")

    def shutdown(self) -> None:
        self.calls.append("shutdown")


def test_a_join_the_head_fails_to_serve_is_tried_again_then_one_line() -> None:
    executor = RayExecutor("ray://127.0.0.1:10001")
    head = _FlakyHead(failures=JOIN_TRIES - 1)
    executor._init(head)
    assert head.calls == ["init", "shutdown"] * (JOIN_TRIES - 1) + ["init"]

    head = _FlakyHead(failures=JOIN_TRIES)
    with pytest.raises(RuntimeError) as failed:
        executor._init(head)
    assert head.calls.count("init") == JOIN_TRIES
    assert str(failed.value).startswith("cannot join the Ray cluster at ray://127.0.0.1:10001 (")
    assert "Starting Ray client server failed" in str(failed.value) and "\n" not in str(failed.value)

    for other in (
        ValueError("a version mismatch"),  # not a failed start
        ConnectionError("ray client connection timeout"),  # a head that never answered (~30 s each)
    ):
        head = _FlakyHead(failures=0, other=other)
        with pytest.raises(RuntimeError, match=str(other)):
            executor._init(head)
        assert head.calls == ["init", "shutdown"]  # tried once; what it started is shut down
