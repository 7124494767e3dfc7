"""`ReCreateOptimizer`: the Python API of `recreate evolve`.

    opt = ReCreateOptimizer(optimizer_model="openai:gpt-4.1", agent_model="openai:gpt-4.1-mini",
                            budget=Budget(max_usd=5), max_concurrency=8)
    result = opt.optimize(seed="scaffolds/minimal", domain=domain, trainset=train, valset=val)

A run lives in `<home>/runs/<run_id>/`: its config, the LangGraph SQLite checkpoints, the usage ledger,
cached reflections and the report. `optimize(..., run_id=ID)` on an existing run resumes it.
"""

from __future__ import annotations

import json
import shutil
import sqlite3
import threading
import uuid
from dataclasses import asdict
from pathlib import Path
from typing import Any
from urllib.parse import urlparse

from langchain_core.language_models import BaseChatModel
from langgraph.checkpoint.sqlite import SqliteSaver
from langgraph.graph.state import CompiledStateGraph

from recreate import progress
from recreate.config import load_settings
from recreate.domains.base import Domain, Task
from recreate.errors import Arg
from recreate.evaluation.errors import RunHalted
from recreate.evaluation.stats import gate_cannot_improve
from recreate.experience.schema import Trajectory
from recreate.models import (
    Budget,
    BudgetExceeded,
    ModelSpecError,
    UsageLedger,
    make_chat_model,
    price_overrides,
    require_prices,
)
from recreate.optimizer.loop import EvolveLoop, test_tasks
from recreate.optimizer.state import EvolveConfig, EvolveError
from recreate.redact import redact
from recreate.runs import (
    EvolveResult,
    check_run_id,
    checkpoint_state,
    final_model,
    read_json,
    result_from_state,
)
from recreate.sandbox import resolve_sandbox
from recreate.scaffold import Scaffold, ScaffoldStore, load_scaffold

MODEL_OPTIONS = {"agent_model": "--model", "optimizer_model": "--optimizer-model"}  # `recreate evolve`'s


def _chat_model(spec: str, argument: str, base_url: str | None, **options: Any) -> BaseChatModel:
    """make_chat_model, its errors naming `argument` (what the caller passed the spec as), not `model`."""
    try:
        return make_chat_model(spec, base_url=base_url, **options)
    except ModelSpecError as exc:
        raise exc.renamed("model", argument, MODEL_OPTIONS[argument]) from None


class ReCreateOptimizer:
    def __init__(
        self,
        *,
        optimizer_model: str | BaseChatModel,
        agent_model: str | BaseChatModel,
        experience: Any = None,
        budget: Budget | None = None,
        sandbox: Any = "bwrap",
        max_concurrency: int = 4,
        home: str | Path | None = None,
        config: EvolveConfig | None = None,
        agent_options: dict[str, Any] | None = None,
        prices: dict[str, Any] | None = None,
        finetune: Any = None,
        agent_spec: str | None = None,
        executor: Any = None,
    ):
        """`agent_options`: passed to every domain agent (`build_domain_agent`): action_format,
        temperature, max_tokens, logprobs. `finetune`: a `recreate.finetune.FinetuneStep`; the agents
        then sample from its served policy, whose version changes as the loop fine-tunes it.
        `agent_spec`: how to reach the agent model again after the run, when `agent_model` is a server
        started for it (`local`); the result's `model` (default: `agent_model` as a spec). `executor`:
        where rollouts run (`recreate.evaluation.ray_executor.make_executor`; None: this process)."""
        self.settings = load_settings(home=home)
        for argument, model in (("agent_model", agent_model), ("optimizer_model", optimizer_model)):
            if isinstance(model, str):  # a spec that cannot work fails here, naming the argument
                _chat_model(model, argument, self.settings.base_url)
        self.settings.prices = {**self.settings.prices, **(prices or {})}
        price_overrides(self.settings.prices)  # a malformed price fails here, not in the middle of the run
        models = {"agent": _model_spec(agent_model), "optimizer": _model_spec(optimizer_model)}
        require_prices(models, budget, self.settings.prices, self.settings.base_url)
        self.config = config or EvolveConfig(max_concurrency=max_concurrency)
        self.config.max_concurrency = max_concurrency
        self.config.check()  # a field set after the config was made, or this max_concurrency
        self.budget = budget
        self.optimizer_model, self.agent_model = optimizer_model, agent_model
        self.agent_options = agent_options or {}
        self.agent_spec = agent_spec or _model_spec(agent_model)
        self.finetune = finetune
        self.executor = executor
        self.sandbox = resolve_sandbox(sandbox)
        self._own_experience = experience is None  # closed after each run (a caller closes its own)
        self.experience = experience if experience is not None else _experience(self.settings)
        self.scaffolds = ScaffoldStore(self.settings.home / "scaffolds")

    def _model(self, spec: str | BaseChatModel, role: str, ledger: UsageLedger) -> BaseChatModel:
        if isinstance(spec, str):
            return _chat_model(spec, "optimizer_model", self.settings.base_url, role=role, ledger=ledger)
        from recreate.models import LedgerCallback

        # a copy with the ledger among its own callbacks: a with_config binding loses them at bind_tools
        callbacks = [*(spec.callbacks or []), LedgerCallback.for_model(ledger, role, spec)]  # type: ignore[misc]
        return spec.model_copy(update={"callbacks": callbacks})

    def build(
        self,
        *,
        seed: str | Path | Scaffold,
        domain: Domain,
        trainset: list[Task],
        valset: list[Task],
        run_id: str | None = None,
        allow_train_as_val: bool = False,
        checkpointer: Any = "run",
        force: bool = False,
    ) -> tuple[CompiledStateGraph, dict[str, Any], EvolveLoop, UsageLedger]:
        """The compiled loop, its run config, the loop object and the run's ledger. `checkpointer`:
        "run" (the run's own SQLite file, what makes `--resume` work), None, or any LangGraph saver.
        Resuming a run with another config raises `EvolveError` naming the keys, unless `force`."""
        if not trainset:
            raise EvolveError("the training set is empty: give at least one task")
        if not valset:
            raise EvolveError("a validation set is required (held-out tasks the gate compares versions on)")
        if why := gate_cannot_improve(len({t.id for t in valset}), self.config.gate_alpha):
            progress.warn(why)  # a smoke run may mean it; a real one learns it before it spends
        overlap = {t.id for t in trainset} & {t.id for t in valset}
        if overlap and not allow_train_as_val:
            raise EvolveError(
                f"{len(overlap)} validation task(s) are also training tasks (e.g. {sorted(overlap)[0]}); "
                "use held-out tasks, or pass {allow} to insist",
                allow=Arg("allow_train_as_val", "True"),
            )
        run_id = check_run_id(run_id) if run_id is not None else f"evolve-{uuid.uuid4().hex[:8]}"
        run_dir = self.settings.home / "runs" / run_id
        run_dir.mkdir(parents=True, exist_ok=True)
        seed_scaffold = seed if isinstance(seed, Scaffold) else load_scaffold(seed, store=self.scaffolds)
        stored = run_dir / "config.json"
        resumed = read_json(stored, dict) if stored.is_file() else None  # BrokenRun if it is damaged
        seed_ref = self._stored_seed(resumed, seed_scaffold)  # a resume: the version it started from
        if seed_ref is None:
            seed_ref = self.scaffolds.commit(seed_scaffold, message=f"seed of {run_id}", set_head=False).ref
        run_config = {
            "run_id": run_id,
            "seed_ref": seed_ref,
            "domain": domain.name,
            # a fine-tuning run names its base: the served version changes as the run goes on
            "agent_model": self.finetune.policy.base_name
            if self.finetune
            else _model_spec(self.agent_model, port=False),
            "optimizer_model": _model_spec(self.optimizer_model, port=False),
            "agent_spec": redact(self.agent_spec),  # a URL's password is not kept in the run's files
            "evolve": _jsonable(self.config),
            **({"finetune": _jsonable(self.finetune.settings)} if self.finetune else {}),
            "train": [t.id for t in trainset],
            "val": [t.id for t in valset],
            "test": [t.id for t in test_tasks(domain, trainset, valset)] if self.config.test_seeds else [],
        }
        if resumed is not None and not force:
            differing = config_differences(resumed, run_config)
            if differing:
                raise EvolveError(
                    f"run {run_id!r} was started with another config ({', '.join(differing)} differ): "
                    "resume it with the same options, or pass {force} to go on with these",
                    force=Arg("force", "True"),
                )
        ledger = UsageLedger(run_dir / "ledger.jsonl", budget=self.budget, prices=self.settings.prices)
        loop = EvolveLoop(
            domain=domain,
            trainset=trainset,
            valset=valset,
            seed_ref=seed_ref,
            scaffolds=self.scaffolds,
            experience=self.experience,
            rollout=self._rollout_fn(domain, ledger, run_id),
            optimizer_model=self._model(self.optimizer_model, "optimizer", ledger),
            synthesis_model=self._model(self.optimizer_model, "synthesis", ledger),
            sandbox=self.sandbox,
            run_dir=run_dir,
            config=self.config,
            finetune=self.finetune,
        )
        if checkpointer == "run":
            checkpoint_state(run_dir, run_id)  # a damaged file: BrokenRun naming it, before anything runs
            checkpointer = SqliteSaver(
                sqlite3.connect(run_dir / "checkpoints.sqlite", check_same_thread=False)
            )
        graph = loop.graph().compile(checkpointer=checkpointer, name="recreate_evolve")
        cfg = {
            "configurable": {"thread_id": run_id},
            "max_concurrency": self.config.max_concurrency,
            "recursion_limit": 10 + 7 * self.config.rounds,
        }
        stored.write_text(json.dumps(run_config, indent=1), encoding="utf-8")
        return graph, cfg, loop, ledger

    def _stored_seed(self, stored: dict[str, Any] | None, seed: Scaffold) -> str | None:
        """The seed version a run being resumed (its config.json: `stored`) started from, when `seed` has
        its content. Committing the seed again would make a new version once the run's HEAD has moved on
        (its parent is the HEAD)."""
        if stored is None:
            return None
        ref = stored.get("seed_ref")
        try:
            return ref if ref and self.scaffolds.resolve(ref).hash == seed.content_hash() else None
        except Exception:  # a store that no longer has it: commit the seed anew
            return None

    def _rollout_fn(self, domain: Domain, ledger: UsageLedger, run_id: str):
        """(scaffold, task, seed) -> (evaluated trajectory, came from the cache)."""
        from recreate.evaluation import RolloutCache, Rollouts

        cache = RolloutCache(self.settings.home / "rollouts")
        runners: dict[str, Rollouts] = {}
        lock = threading.Lock()

        def rollout(scaffold: Scaffold, task: Task, seed: int) -> tuple[Trajectory, bool]:
            model = self.finetune.policy.server.info.spec if self.finetune else self.agent_model
            key = f"{scaffold.content_hash()}:{_model_spec(model)}"
            with lock:
                if key not in runners:
                    runners[key] = Rollouts(
                        scaffold,
                        domain,
                        model=model,
                        sandbox=self.sandbox,
                        ledger=ledger,
                        store=self.experience,
                        run_id=run_id,
                        cache=cache,
                        trajectory_dir=self.settings.home / "runs" / run_id / "trajectories",
                        executor=self.executor,
                        **self.agent_options,
                    )
                runner = runners[key]
            hit = runner.cached(task, seed)
            if hit is None:
                return runner.run(task, seed), False
            with lock:  # a kill between caching a rollout and storing it must not lose it from experience
                if self.experience.catalog.get(hit.trajectory_id) is None:
                    self.experience.add(hit)
            return hit, True

        return rollout

    def optimize(
        self,
        *,
        seed: str | Path | Scaffold,
        domain: Domain,
        trainset: list[Task],
        valset: list[Task],
        run_id: str | None = None,
        allow_train_as_val: bool = False,
        force: bool = False,
    ) -> EvolveResult:
        graph, cfg, loop, ledger = self.build(
            seed=seed,
            domain=domain,
            trainset=trainset,
            valset=valset,
            run_id=run_id,
            allow_train_as_val=allow_train_as_val,
            force=force,
        )
        stopped = None
        try:
            resume = graph.get_state(cfg).next
            graph.invoke(None if resume else {}, cfg)
        except (BudgetExceeded, RunHalted) as exc:  # resumable: --resume goes on from here
            stopped = str(exc)
        finally:
            state = graph.get_state(cfg).values
            graph.checkpointer.conn.close()
            if hasattr(self.sandbox, "close_spares"):  # the sessions it opened ahead of need
                self.sandbox.close_spares()
            if self._own_experience:  # else its Chroma client stays for the life of the process
                self.experience.close()  # (it reopens on next use)
        result = result_from_state(
            state,
            run_id=cfg["configurable"]["thread_id"],
            run_dir=loop.run_dir,
            stopped=stopped,
            usage=ledger.by_role(),
            config=json.loads((loop.run_dir / "config.json").read_text(encoding="utf-8")),
        )
        return self._finish(result)

    def _finish(self, result: EvolveResult) -> EvolveResult:
        """What a run leaves besides its state, also when it stopped early: the report, the final
        version as a scaffold directory (and as an object on the result), the final model's spec and
        weights, and result.json (written last)."""
        from recreate.optimizer.report import write_report

        result.report = write_report(result, result.run_dir / "report")
        if result.final:
            result.scaffold_dir = export_scaffold(self.scaffolds, result.final, result.run_dir / "scaffold")
            result.scaffold = self.scaffolds.load(result.final)
        result.model, result.weights = final_model(result.run_dir, result.config, result.final_model)
        path = result.run_dir / "result.json"
        path.write_text(json.dumps(result.to_json(), indent=1), encoding="utf-8")
        return result

    def as_graph(self, *, checkpointer: Any = None, **build_kwargs: Any) -> CompiledStateGraph:
        """The evolve loop as a compiled LangGraph graph. Without a checkpointer by default, for
        langgraph.json / LangGraph Studio, whose server brings its own."""
        return self.build(checkpointer=checkpointer, **build_kwargs)[0]


# limits a resumed run may change (a run stopped by its budget is resumed with a larger one)
# and how the agent model is reached (a user's server may come back on another port)
_RESUMABLE_KEYS = frozenset(
    {"evolve.max_rollouts", "evolve.max_wall_s", "evolve.max_concurrency", "agent_spec"}
)
# keys newer than some runs' config.json: such a run resumes with today's values for them
_ADDED_KEYS = frozenset(
    {"test", "evolve.optimizer_protocol", "evolve.test_seeds", "evolve.gate_alpha", "finetune.val_seeds"}
)


def config_differences(stored: dict[str, Any], current: dict[str, Any]) -> list[str]:
    """Dotted keys whose values differ between a run's stored config and the one asked for now."""

    def flat(d: dict[str, Any], prefix: str = "") -> dict[str, Any]:
        out: dict[str, Any] = {}
        for key, value in d.items():
            if isinstance(value, dict):
                out |= flat(value, f"{prefix}{key}.")
            else:
                out[f"{prefix}{key}"] = value
        return out

    old, new = flat(stored), flat(current)
    added = {k for k in _ADDED_KEYS if k not in old}  # a run from before the key existed: not a difference
    return sorted(
        k for k in old.keys() | new.keys() if old.get(k) != new.get(k) and k not in _RESUMABLE_KEYS | added
    )


def _model_spec(model: str | BaseChatModel, *, port: bool = True) -> str:
    """A model as a spec string: the spec itself, or a chat model's name (@ its endpoint, if any).
    Without `port`, a local server's port is left out: a resumed run's server gets another one."""
    if isinstance(model, str):
        name, _, url = model.partition("@")
    else:
        name = getattr(model, "model_name", None) or getattr(model, "model", None) or type(model).__name__
        url = getattr(model, "openai_api_base", None) or ""
    if url and not port:
        parsed = urlparse(url)
        url = parsed._replace(netloc=parsed.hostname or "").geturl()
    return f"{name}@{url}" if url else str(name)


def export_scaffold(store: ScaffoldStore, ref: str, dest: Path) -> Path:
    """The version `ref` as a scaffold directory at `dest`, replacing what an earlier attempt of the run
    wrote there (a run stopped by its budget, then resumed)."""
    fresh = dest.with_name(f".{dest.name}.new")
    shutil.rmtree(fresh, ignore_errors=True)
    store.export(ref, fresh)
    shutil.rmtree(dest, ignore_errors=True)
    fresh.rename(dest)
    return dest


def _experience(settings: Any) -> Any:
    from recreate.experience.store import ExperienceStore

    return ExperienceStore(settings.home / "experience", embedding=settings.embedding)


def _jsonable(obj: Any) -> Any:
    return json.loads(json.dumps(asdict(obj) if hasattr(obj, "__dataclass_fields__") else obj, default=str))
