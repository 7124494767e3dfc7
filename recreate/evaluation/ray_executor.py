"""Rollouts as Ray tasks: `--executor ray` (a local Ray on loopback) or `--executor ray://HOST:PORT`.

What runs where. The driver (the process running `recreate eval|evolve` or `optimize()`) keeps the
concurrency cap (one of its threads waits on each rollout in flight), checks the budget before each
attempt, and alone writes the rollout cache, the run's trajectories, the experience store and the ledger.
A Ray task runs one attempt (`Rollouts.attempt`: the agent in a fresh sandbox on the worker's node, then
the evaluation in another) and returns the trajectory with the usage of its model calls, which the
driver adds to the run's ledger. Before each model call a worker checks the run's whole spend, kept by
a meter actor (`ray_worker`), so the budget is one budget as with threads. A worker that cannot read
the meter stops at its next model call and the attempt is a machine error, never a score.
A worker that dies (killed, out of memory, its node gone) is run again by Ray up to `RETRIES` times; past
that the attempt is a machine error: stored for the record, never a score, never cached, run again on
resume. The model calls of a try whose worker died are still in the ledger (the meter kept them).

Workers build the agent from the runner's inputs (scaffold, domain, model spec, sandbox, agent options)
and read their settings and API keys from their own environment: the local cluster's workers inherit the
driver's; a cluster's nodes need them set where `ray start` runs. No key travels in a task's arguments or
a runtime_env, so none lands in Ray's logs. A local model server's key is in its state file: the local
cluster's workers look in the homes the driver named when it started or found its servers
(`recreate.local.server.note_home`), whatever their own RECREATE_HOME.

A cluster whose head runs with token authentication (`ray start` turns it on with RAY_AUTH_MODE=token,
or by itself when it finds a token: RAY_AUTH_TOKEN, RAY_AUTH_TOKEN_PATH, ~/.ray/auth_token) admits a
driver that runs with RAY_AUTH_MODE=token and has the cluster's token in one of those places; Ray never
turns token mode on by itself for a driver given an address. `make_executor` says so at once.
"""

from __future__ import annotations

import hashlib
import importlib.util
import logging
import os
import secrets
import tempfile
import threading
import uuid
from collections import OrderedDict
from typing import TYPE_CHECKING, Any
from urllib.parse import urlsplit
from weakref import WeakKeyDictionary

from recreate.errors import Arg, ArgumentError
from recreate.evaluation.machine import one_line
from recreate.evaluation.ray_join import check_cluster, join
from recreate.evaluation.ray_reaper import on_lasting_thread, reaped_with_this_process
from recreate.evaluation.ray_worker import RUNNERS_PER_WORKER, Meter, Metered, Spend, attempt
from recreate.models import UsageLedger, UsageRecord

if TYPE_CHECKING:
    from recreate.domains.base import Task
    from recreate.evaluation.rollout import Executor, Rollouts
    from recreate.experience.schema import Trajectory

THREADS = "threads"
LOOPBACK_ONLY = "RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER"  # "0": a local Ray binds 127.0.0.1 (Linux too)
TOKEN, TOKEN_PATH = "RAY_AUTH_TOKEN", "RAY_AUTH_TOKEN_PATH"
_TOKEN_FILE: str | None = None  # the local cluster's token, one per process
RETRIES = 2  # runs again of an attempt whose worker died, before it is recorded as a machine error
OBJECT_STORE_BYTES = 128 * 1024**2  # the local cluster's: trajectories are small


def make_executor(spec: str | Executor | None, *, concurrency: int = 4) -> Executor | None:
    """The executor `spec` names: None for "threads" (or None), a `RayExecutor` for "ray" (a local
    cluster with `concurrency` slots, or the cluster this process already joined) and "ray://HOST:PORT"
    (a Ray cluster's client port); an executor object is returned as it is."""
    if spec is None or spec == THREADS:
        return None
    if not isinstance(spec, str):
        return spec
    address = None if spec == "ray" else _ray_address(spec)
    if importlib.util.find_spec("ray") is None:
        raise ArgumentError(
            "{executor}: Ray is not installed here; `pip install 'recreate[ray]'`",
            executor=Arg("executor", repr(spec), spec),
        )
    if address is not None:
        check_cluster(address, _import_ray)
    return RayExecutor(address, num_cpus=max(2, concurrency))


def _ray_address(spec: str) -> str:
    try:
        parts = urlsplit(spec)
        port = parts.port
    except ValueError:
        port = None
    if parts.scheme == "ray" and parts.hostname and port and not parts.path.strip("/"):
        return spec
    raise ArgumentError(
        "{executor} is no executor; use threads (the default), ray (a Ray on this machine) "
        "or ray://HOST:PORT (a Ray cluster's client port, 10001 unless its head set another)",
        executor=Arg("executor", repr(spec), spec),
    )


_joined: str | None = None  # the cluster this process's Ray joined through us (None: not us, or none)
_JOINING = threading.Lock()


def _joined_at(address: str | None) -> None:
    global _joined
    _joined = address


class RayExecutor:
    """Runs each attempt of a `Rollouts` as a Ray task; connects (or starts the local Ray) on first use."""

    def __init__(self, address: str | None = None, *, num_cpus: int = 2, retries: int = RETRIES):
        self.address, self.num_cpus, self.retries = address, num_cpus, retries
        self._remote: Any = None
        self._meter: Any = None
        self._failed: str | None = None  # why joining (or starting) Ray failed
        self._lock, self._settling = threading.Lock(), threading.Lock()
        self._ledgers: WeakKeyDictionary[UsageLedger, str] = WeakKeyDictionary()  # each one's name
        # each runner's recipe, put in the object store once: a worker fetches it only to build the runner
        self._recipes: OrderedDict[str, Any] = OrderedDict()

    def connect(self) -> Any:
        """The remote attempt function, after joining the cluster (or starting a local one)."""
        with self._lock:
            if self._failed is not None:  # each waiting thread would try again (~30 s each)
                raise RuntimeError(self._failed)
            if self._remote is None:
                ray = _import_ray()
                wanted = self.address or "a Ray on this machine"
                with _JOINING:  # another executor's connect must not see Ray still unjoined meanwhile
                    if ray.is_initialized() and _joined not in (None, wanted):
                        raise RuntimeError(
                            f"this process already runs rollouts on {_joined}, and a Ray driver joins one "
                            f"cluster: run {wanted} from another process (or after ray.shutdown())"
                        )
                    if not ray.is_initialized():
                        try:  # Ray's head processes die with the thread that started them
                            on_lasting_thread(lambda: self._init(ray))
                        except RuntimeError as exc:
                            self._failed = str(exc)
                            raise
                        _joined_at(wanted)
                self._remote = ray.remote(num_cpus=1, max_retries=self.retries)(attempt)
                self._meter = ray.remote(num_cpus=0)(Meter).remote()
            return self._remote

    def _init(self, ray: Any) -> None:
        quiet = {"logging_level": logging.ERROR, "log_to_driver": True}
        where = (
            f"cannot join the Ray cluster at {self.address}"
            if self.address
            else "the local Ray did not start"
        )
        try:
            if self.address:
                join(ray, self.address, quiet)
            else:
                # loopback only, whatever this environment said or when ray was imported: read by the
                # driver (the address it gives the node) and by the processes it starts (what they bind)
                os.environ[LOOPBACK_ONLY] = "0"
                ray._private.ray_constants.ENABLE_RAY_CLUSTER = False
                os.environ.update(_own_token())
                with reaped_with_this_process():  # some of them outlive a SIGKILL of this process
                    ray.init(
                        address="local", num_cpus=self.num_cpus, include_dashboard=False,
                        object_store_memory=OBJECT_STORE_BYTES, _temp_dir=_private_dir(),
                        # a rollout Ray's memory monitor kills runs again as often as one whose worker
                        # died (Ray's default: forever), then is a machine error
                        _system_config={"task_oom_retries": self.retries}, **quiet,
                    )  # fmt: skip
        except Exception as exc:  # one line: what failed, what to do
            ray.shutdown()  # whatever it started
            raise RuntimeError(f"{where} ({one_line(exc)}); or run with --executor threads") from None

    def attempt(self, rollouts: Rollouts, task: Task, seed: int) -> Trajectory:
        remote = self.connect()
        from ray.exceptions import RayError, RayTaskError

        from recreate.evaluation.rollout import out_of_budget

        ledger, key = rollouts.ledger, runner_key(rollouts)
        metered = None if ledger is None else self._metered(ledger)
        try:
            recipe = self._recipe(key, rollouts)
            ref = remote.remote([recipe], key, task, seed, metered)  # in a list: not fetched unless needed
        except TypeError as exc:  # Ray could not serialize an input (a model object with a live client)
            raise ArgumentError(
                f"{{executor}} sends each rollout's inputs to a Ray worker and this one cannot go: "
                f"{one_line(exc)[:200]}; pass the model as a spec (NAME@URL) and the sandbox by name",
                executor=Arg("executor", "'ray'", "ray"),
            ) from None
        usage: list[UsageRecord] = []
        tried = None
        try:
            traj, usage, tried = _import_ray().get(ref)
        except RayTaskError as exc:  # our code raised in the worker: as it would on a thread
            raise exc.as_instanceof_cause() from None
        except RayError as exc:  # its worker (or node) died, every time Ray ran it
            reason = f"the Ray worker running it died ({1 + self.retries} tries): {one_line(exc)}"
            traj = rollouts.lost(task, seed, reason)
        finally:
            if ledger is not None and metered is not None:
                self._settle(ledger, metered, usage, tried)
        if ledger is not None and metered is not None and metered.budget and out_of_budget(traj):
            # the worker saw the run's spend reach the budget: some of it may still be in flight
            metered.budget.check(Spend(self._call(self._meter.spent, metered.ledger)))  # type: ignore[arg-type]
        return traj

    def _metered(self, ledger: UsageLedger) -> Metered:
        with self._settling:
            name = self._ledgers.get(ledger)
            if name is None:  # a ledger new to the meter: what it holds already
                name = self._ledgers[ledger] = uuid.uuid4().hex
                self._call(self._meter.settle, name, "", ledger.totals())
        return Metered(self._meter, name, uuid.uuid4().hex, ledger.budget, ledger.prices)

    def _settle(
        self, ledger: UsageLedger, metered: Metered, usage: list[UsageRecord], tried: str | None
    ) -> None:
        """The attempt's usage into the driver's ledger: the returned try's, and any try whose worker
        died (from the meter); one at a time, so the meter never counts an attempt twice."""
        with self._settling:
            lost = self._call(self._meter.others, metered.ledger, metered.attempt, tried)
            for record in [*usage, *lost]:
                ledger.record(record)
            self._call(self._meter.settle, metered.ledger, metered.attempt, ledger.totals())

    def _call(self, method: Any, *args: Any) -> Any:
        return _import_ray().get(method.remote(*args))

    def _recipe(self, key: str, rollouts: Rollouts) -> Any:
        with self._lock:
            if key not in self._recipes:
                self._recipes[key] = _import_ray().put(rollouts.recipe)
            self._recipes.move_to_end(key)
            while len(self._recipes) > RUNNERS_PER_WORKER:
                self._recipes.popitem(last=False)
            return self._recipes[key]


def runner_key(rollouts: Rollouts) -> str:
    """What names a runner a worker may keep built: everything in its recipe."""
    rest = sorted((k, repr(v)) for k, v in rollouts.recipe.items() if k not in ("scaffold", "domain"))
    text = f"{rollouts.context_key}:{rollouts.scaffold_hash}:{rest}"
    return hashlib.sha256(text.encode()).hexdigest()


def _private_dir() -> str:
    """Where the local Ray keeps its sockets and logs (errors and output of rollouts): in a new folder
    only this user opens (Ray's default, /tmp/ray, is open to every user of the machine, and Ray opens
    the folder it is given to all: hence one level down)."""
    return os.path.join(tempfile.mkdtemp(prefix="recreate-ray-"), "ray")


def _own_token() -> dict[str, str]:
    """Where the local cluster's auth token lies (Ray turns token auth on for a new local cluster, so
    another user of this machine who reaches its loopback ports runs nothing): a file of this process's
    own, made once (Ray's loader keeps the token it read), where Ray would otherwise write one into ~/.ray
    of whoever runs it. A token this environment gives Ray wins."""
    global _TOKEN_FILE
    if os.environ.get(TOKEN):
        return {}
    if _TOKEN_FILE is None:
        path = os.path.join(tempfile.mkdtemp(prefix="recreate-ray-token-"), "auth_token")
        with open(os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600), "w") as out:
            out.write(secrets.token_hex(32))
        _TOKEN_FILE = path
    return {TOKEN_PATH: _TOKEN_FILE}


def _import_ray() -> Any:
    # on Linux Ray gives a local cluster the machine's address (listening on every interface); this
    # switch keeps a local one on 127.0.0.1 (a cluster's nodes set their own; see `_init`)
    os.environ[LOOPBACK_ONLY] = "0"
    import ray

    return ray
