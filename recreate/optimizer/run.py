"""`optimize()`: one evolve run from Python, the same run `recreate evolve` makes (the command calls it).

    from recreate import optimize
    result = optimize("scaffolds/minimal", domain, model="openai:gpt-4.1-mini", run_id="first")
    result.scaffold, result.scaffold_dir, result.report, result.model, result.test

`model="local"` (also the default when no endpoint is configured) serves the embedded model on this
machine for the run's duration; `finetune=FinetuneSettings(every=K)` trains it every K rounds (gated).
"""

from __future__ import annotations

import contextlib
import logging
import os
import shutil
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

import httpx

from recreate.config import load_settings
from recreate.endpoints import refused_key_fix
from recreate.errors import Arg, ArgumentError
from recreate.local import LOCAL_SPEC
from recreate.local.keys import auth_headers

if TYPE_CHECKING:
    from langchain_core.language_models import BaseChatModel

    from recreate.domains.base import Domain, Task
    from recreate.finetune.evolve_step import FinetuneSettings
    from recreate.models import Budget
    from recreate.optimizer.state import EvolveConfig
    from recreate.runs import EvolveResult
    from recreate.scaffold import Scaffold

LOCAL_NOTICE = (
    "{why}: running the embedded {name} on this machine (llama.cpp) for the {roles}. "
    "A 135M model: expect format errors and few accepted edits; set OPENAI_API_KEY / OPENAI_BASE_URL or "
    "pass another model for real gains."
)
Log = Callable[[str], None]


class EndpointMissing(ArgumentError):
    pass


def agent_model_spec(spec: str | None, base_url: str | None) -> str:
    """The agent model: as given, RECREATE_MODEL, the first model a configured server serves, OpenAI's
    when its key is set, else the embedded local model (`local`)."""
    if spec:
        return spec
    if base_url:
        try:
            reply = httpx.get(f"{base_url.rstrip('/')}/models", headers=auth_headers(base_url), timeout=5)
            served = None if reply.status_code in (401, 403) else reply.json()["data"][0]["id"]
        except (httpx.HTTPError, KeyError, IndexError, ValueError, TypeError) as exc:
            raise EndpointMissing(
                f"{base_url} lists no model ({type(exc).__name__}); pass {{model}}",
                model=Arg("model", "'NAME'", "NAME"),
            ) from exc
        if served is None:
            raise EndpointMissing(
                f"{base_url} refused the key (HTTP {reply.status_code}); {refused_key_fix(base_url)}"
            )
        return str(served)
    if os.environ.get("OPENAI_API_KEY"):
        return "openai:gpt-4.1-mini"
    return LOCAL_SPEC


def not_local(agent: str) -> ArgumentError:
    return ArgumentError(
        f"{{finetune}}: fine-tuning in the loop trains the local model, not {agent!r}: pass {{model}}, or "
        "fine-tune a finished run's logs (`recreate finetune --run RUN`)",
        finetune=Arg("finetune", flag="--finetune-every"),
        model=Arg("model", "'local'", "local"),
    )


def optimize(
    seed: str | Path | Scaffold,
    domain: Domain,
    *,
    model: str | BaseChatModel | None = None,
    optimizer_model: str | BaseChatModel | None = None,
    trainset: list[Task] | None = None,
    valset: list[Task] | None = None,
    config: EvolveConfig | None = None,
    budget: Budget | None = None,
    prices: dict[str, Any] | None = None,
    sandbox: Any = None,
    home: str | Path | None = None,
    run_id: str | None = None,
    allow_train_as_val: bool = False,
    force: bool = False,
    finetune: FinetuneSettings | None = None,
    why_local: str | None = None,
    log: Log | None = None,
    executor: Any = None,
) -> EvolveResult:
    """Evolve `seed` on `domain` (its train and val splits unless `trainset`/`valset` are given) and
    return the result: its final Scaffold and scaffold directory, report, final model spec (and weights
    when fine-tuned) and final test. An existing `run_id` resumes that run. Local model servers started
    here stop when it returns. `why_local`: why the embedded model runs, for the notice (`log`).
    `executor`: where rollouts run: "threads" (default), "ray" (a local Ray), "ray://HOST:PORT" (a Ray
    cluster), or an executor object (`recreate.evaluation.ray_executor`)."""
    from recreate.evaluation.ray_executor import make_executor
    from recreate.optimizer.optimizer import ReCreateOptimizer
    from recreate.optimizer.state import EvolveConfig
    from recreate.runs import check_run_id

    run_id = check_run_id(run_id) if run_id is not None else f"evolve-{uuid.uuid4().hex[:8]}"
    if not callable(getattr(domain, "tasks", None)) or not callable(getattr(domain, "evaluate", None)):
        raise ArgumentError(
            f"{{domain}} is {domain!r}, not a Domain: pass one, e.g. get_domain('jsonl', data='tasks.jsonl')",
            domain=Arg("domain", flag="--domain"),
        )
    if config is not None and not isinstance(config, EvolveConfig):
        raise ArgumentError(
            f"{{config}} is a {type(config).__name__}, not an EvolveConfig: pass EvolveConfig(**settings)",
            config=Arg("config"),
        )
    log = log or logging.getLogger("recreate.progress").info
    settings = load_settings(home=home)
    agent = model if model is not None else agent_model_spec(settings.model, settings.base_url)
    optimizer = optimizer_model or settings.optimizer_model or agent
    if finetune and agent != LOCAL_SPEC:
        raise not_local(str(agent))
    config = config or EvolveConfig()
    config.check()  # a field set after it was made: said before a server starts
    runs_on = make_executor(executor, concurrency=config.max_concurrency)
    run_dir = settings.home / "runs" / run_id
    started_fresh = not run_dir.exists()
    asked = (model, optimizer_model, settings.model, settings.optimizer_model)
    why = why_local or ("model 'local' asked" if LOCAL_SPEC in asked else "no model endpoint configured")
    try:
        with contextlib.ExitStack() as stack:
            models = serve_models(
                stack, settings.home, run_dir, agent, optimizer, config.max_concurrency, finetune, why, log
            )
            try:
                opt = ReCreateOptimizer(
                    **models,
                    budget=budget,
                    sandbox=sandbox or settings.sandbox,
                    max_concurrency=config.max_concurrency,
                    home=settings.home,
                    config=config,
                    prices=prices,
                    executor=runs_on,
                )
            except ArgumentError as exc:  # optimize() takes the agent's model as `model`
                raise exc.renamed("agent_model", "model") from None
            return opt.optimize(
                seed=seed,
                domain=domain,
                trainset=domain.tasks("train") if trainset is None else trainset,
                valset=domain.tasks("val") if valset is None else valset,
                run_id=run_id,
                allow_train_as_val=allow_train_as_val,
                force=force,
            )
    except BaseException:
        if started_fresh and not (run_dir / "config.json").is_file():  # nothing to resume: leave no orphan
            shutil.rmtree(run_dir, ignore_errors=True)
        raise


def serve_models(
    stack: contextlib.ExitStack, home: Path, run_dir: Path, agent: Any, optimizer: Any, concurrency: int,
    finetune: FinetuneSettings | None, why: str, log: Log,
) -> dict[str, Any]:  # fmt: skip
    """ReCreateOptimizer's model arguments, with the local servers the run needs started on `stack`:
    the embedded model for the roles that asked for `local`, or the run's served policy when it
    fine-tunes (the agent samples from the trainer's own f32 weights)."""
    from recreate.local import EMBEDDED_NAME, local_agent_options, local_chat_model, local_endpoint

    if finetune is None and LOCAL_SPEC not in (agent, optimizer):
        return {"agent_model": agent, "optimizer_model": optimizer}
    roles = [r for r, spec in (("agent", agent), ("optimizer", optimizer)) if spec == LOCAL_SPEC]
    log(LOCAL_NOTICE.format(why=why, name=EMBEDDED_NAME, roles=" and ".join(roles)))
    models: dict[str, Any] = {"agent_model": agent, "optimizer_model": optimizer}
    if agent == LOCAL_SPEC:
        models["agent_spec"] = LOCAL_SPEC  # how the result names it: the served port is gone after the run
    if finetune is not None:
        from recreate.finetune import FinetuneStep, ServedPolicy

        policy = stack.enter_context(ServedPolicy(home, run_dir / "policy", parallel=concurrency))
        log(
            f"fine-tuning every {finetune.every} round(s): the agent samples from {policy.current.name} "
            f"({policy.server.info.base_url})"
        )
        models |= {
            "agent_model": policy.server.info.spec,
            "agent_options": local_agent_options(policy.server.info),
            "finetune": FinetuneStep(policy, finetune),
        }
        if optimizer != LOCAL_SPEC:
            return models
    server = stack.enter_context(local_endpoint(home, log=log))
    if agent == LOCAL_SPEC and finetune is None:
        models |= {"agent_model": server.spec, "agent_options": local_agent_options(server)}
    if optimizer == LOCAL_SPEC:
        models["optimizer_model"] = local_chat_model(server, "optimizer")
    return models
