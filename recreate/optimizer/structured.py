"""The structured protocol: the ReCreate-Agent on models that cannot call tools (the embedded one).

Our code gathers the evidence an agentic meta-agent would fetch with its tools — the run's steps clipped
to fit a small context, the evaluator's outcome (instance reflection only sees training tasks), the
scaffold's overview and the nearest stored runs of training tasks — into one digest, and the model answers
in ONE call whose decoding is constrained by a JSON schema of the edit ops this scaffold can take (rule
ids, worked-example candidates and limits enumerated), so even a 135M model can only emit a well-formed
proposal or an explicit "no change" with its reason. The ops are then checked by the same dry run as the
agentic protocol's `propose` tool; a rejection is fed back once.

The synthesis patch is decoded the same way, as a choice among the ops the batch proposed.
"""

from __future__ import annotations

import json
from collections.abc import Collection, Mapping
from typing import Any

import jsonschema
from langchain_core.language_models import BaseChatModel
from langchain_core.messages import AIMessage, BaseMessage, HumanMessage, SystemMessage

from recreate.experience.digest import action_text, observation_text, task_statement
from recreate.experience.schema import Trajectory
from recreate.optimizer.prompts import STRUCTURED_EXAMPLES, STRUCTURED_REFLECT, STRUCTURED_SYNTHESIZE
from recreate.optimizer.proposals import Cause, Proposal, ProposalBox, transcript_of, usage_of
from recreate.scaffold import Scaffold
from recreate.text import clip_middle

DIGEST_CHARS = 3000  # ~900 tokens: the digest, the prompt and the reply fit a 2k-token context
STEP_CHARS = 240
MAX_OPS = 2
MAX_SIMILAR = 3
TEXT_LIMITS = {"diagnosis": 240, "rule": 160, "title": 60, "content": 240, "rationale": 240}


def _string(limit: int, *, bounded: bool, min_length: int = 1) -> dict[str, Any]:
    """A sentence: starts with a capital letter, plain prose characters, `min_length`..`limit` long (a
    small model otherwise fills free text with digit runs and timestamps)."""
    schema: dict[str, Any] = {"type": "string"}
    if bounded:  # llama.cpp and vLLM honour a pattern; on OpenAI's API the fields stay free text
        schema["pattern"] = f'^[A-Z][^"\\\\\\n]{{{min_length - 1},{limit - 1}}}$'
    return schema


def _const(value: str) -> dict[str, Any]:
    return {"type": "string", "const": value}


def _enum(values: list[str]) -> dict[str, Any]:
    return {"type": "string", "enum": values}


def _object(properties: dict[str, Any]) -> dict[str, Any]:
    return {
        "type": "object",
        "properties": properties,
        "required": list(properties),
        "additionalProperties": False,
    }


def proposal_schema(scaffold: Scaffold, example_runs: list[str], *, bounded: bool = True) -> dict[str, Any]:
    """The reply schema of one reflection: a diagnosis, its cause and 0..MAX_OPS ops (none = no change)."""
    variants = [
        _object(
            {
                "op": _const("add_rule"),
                "text": _string(TEXT_LIMITS["rule"], bounded=bounded, min_length=12),
            }
        ),
        _object(
            {
                "op": _const("add_memory"),
                "title": _string(TEXT_LIMITS["title"], bounded=bounded, min_length=4),
                "content": _string(TEXT_LIMITS["content"], bounded=bounded, min_length=12),
            }
        ),
    ]
    if example_runs:
        variants.append(_object({"op": _const("add_example"), "run": _enum(example_runs)}))
    if scaffold.rules:
        variants.append(_object({"op": _const("remove_rule"), "id": _enum([r.id for r in scaffold.rules])}))
    return _object(
        {
            "diagnosis": _string(TEXT_LIMITS["diagnosis"], bounded=bounded, min_length=12),
            "cause": _enum(list(Cause.__args__)),
            "ops": {"type": "array", "items": {"anyOf": variants}, "maxItems": MAX_OPS},
        }
    )


def synthesis_schema(labels: list[str], *, bounded: bool = True) -> dict[str, Any]:
    """The reply schema of a structured synthesis: which proposed ops to keep (none: no change)."""
    return _object(
        {
            "rationale": _string(TEXT_LIMITS["rationale"], bounded=bounded, min_length=12),
            "keep": {"type": "array", "items": _enum(labels), "maxItems": MAX_OPS + 1},
        }
    )


# -- the evidence digest ----------------------------------------------------------------------------
def task_text(traj: Trajectory) -> str:
    """The task as the agent read it (its id when no message holds it)."""
    return task_statement(traj) or traj.task_id


def run_lines(traj: Trajectory, *, with_eval: bool, with_steps: bool = True) -> list[str]:
    lines = []
    if with_steps:
        for step in traj.steps:
            lines.append(f"  step {step.index}: {clip_middle(action_text(step), STEP_CHARS)}")
            shown = observation_text(step, STEP_CHARS) or (f"error: {step.error}" if step.error else "")
            if shown:
                lines.append(f"    -> {clip_middle(shown, STEP_CHARS)}")
    ev = traj.evaluation
    outcome = f"  outcome: {traj.outcome.exit_status}, submitted {traj.outcome.submission!r}"
    if ev is not None:
        outcome += f"; score {ev.score:g} ({'passed' if ev.passed else 'failed'})"
        if with_eval and ev.feedback:
            outcome += f"; evaluator: {clip_middle(ev.feedback, STEP_CHARS)}"
    lines.append(clip_middle(outcome, 2 * STEP_CHARS))
    return lines


def example_steps(traj: Trajectory) -> list[dict[str, Any]] | None:
    """A passing run's steps as a worked example's steps, or None when it is not clean enough to show
    (a malformed reply, a failed command, no submission)."""
    steps: list[dict[str, Any]] = []
    for k, step in enumerate(traj.steps):
        action = step.action or {}
        args = action.get("args") or {}
        if action.get("tool") == "submit":
            steps.append({"submit": str(args.get("answer", ""))})
            break
        if action.get("tool") != "bash" or not args.get("command"):
            return None
        obs = step.observation
        last = k == len(traj.steps) - 1
        if obs is None or (obs.exit_code not in (0, None) and not last):
            return None
        steps.append({"command": args["command"], "output": "" if last else clip_middle(obs.stdout, 400)})
    return steps or None


def scaffold_overview(scaffold: Scaffold) -> str:
    rules = "\n".join(f"  [{r.id}] {r.text}" for r in scaffold.rules) or "  (none)"
    memory = "\n".join(f"  [{m.id}] {m.title}" for m in scaffold.memory) or "  (none)"
    examples = (
        "\n".join(f"  {i}: {clip_middle(e.task, 80)}" for i, e in enumerate(scaffold.examples)) or "  (none)"
    )
    return (
        f"Scaffold {scaffold.ref or scaffold.name}: at most {scaffold.limits.max_steps} steps; "
        f"tools: {[t.name for t in scaffold.tools] or 'none'}.\n"
        f"Rules:\n{rules}\nMemory items:\n{memory}\nWorked examples (tasks):\n{examples}"
    )


class Digest:
    """The evidence for one reflection, and the runs it offers as worked examples (label -> run)."""

    def __init__(
        self,
        traj: Trajectory,
        *,
        scaffold: Scaffold,
        experience: Any,
        hidden_tasks: Collection[str],
        with_eval: bool,
        with_steps: bool,
        prompts: Mapping[str, str] | None = None,
    ):
        """`prompts`: the raw task text of this run's training tasks, by id: a passing run of one of them
        is offered as a worked example (never under the no-trajectory ablation, which hides steps)."""
        self.candidates: dict[str, tuple[str, str, list[dict[str, Any]]]] = {}  # label -> (run, task, steps)
        self.prompts = prompts if with_steps and prompts else {}
        shown = {e.task for e in scaffold.examples}
        parts = [
            scaffold_overview(scaffold),
            "",
            f"THE RUN ({traj.trajectory_id}) on task: {clip_middle(task_text(traj), 400)}",
        ]
        parts += run_lines(traj, with_eval=with_eval, with_steps=with_steps)
        self._offer(traj, "R1", shown)
        similar = self._similar(traj, experience, hidden_tasks)
        if similar:
            parts += ["", "SIMILAR PAST RUNS (of other tasks):"]
        for n, other in enumerate(similar, start=2):
            parts.append(f"R{n} ({other.trajectory_id}) on task: {clip_middle(task_text(other), 200)}")
            parts += run_lines(other, with_eval=with_eval, with_steps=with_steps)
            self._offer(other, f"R{n}", shown)
        if self.candidates:
            parts += [
                "",
                f"Runs that passed cleanly (can become worked examples): {', '.join(self.candidates)}",
            ]
        self.text = clip_middle("\n".join(parts), DIGEST_CHARS)
        if traj.trajectory_id not in self.text:  # clipped away: the run itself must stay named
            self.text = f"THE RUN: {traj.trajectory_id}\n{self.text}"

    def _offer(self, traj: Trajectory, label: str, shown: set[str]) -> None:
        ev, task = traj.evaluation, self.prompts.get(traj.task_id)
        if task is None or ev is None or not ev.passed or task in shown:
            return
        steps = example_steps(traj)
        if steps is not None:
            self.candidates[label] = (traj.trajectory_id, task, steps)

    @staticmethod
    def _similar(traj: Trajectory, experience: Any, hidden: Collection[str]) -> list[Trajectory]:
        """The nearest stored runs of other training tasks (held-out tasks never appear)."""
        if experience is None:
            return []
        try:
            hits = experience.search(
                task_text(traj), scope="summaries", filters={"domain": traj.domain}, k=12
            )
        except Exception:  # an index still warming up or unavailable: the run alone is evidence enough
            return []
        out: list[Trajectory] = []
        seen_tasks = {traj.task_id}
        for hit in hits:
            entry = experience.catalog.get(hit.trajectory_id)
            if entry is None or entry.task_id in hidden or entry.task_id in seen_tasks:
                continue
            try:
                other = experience.get(hit.trajectory_id)
            except Exception:
                continue
            if other.evaluation is None:  # an error, not a run to learn from
                continue
            seen_tasks.add(entry.task_id)
            out.append(other)
            if len(out) == MAX_SIMILAR - 1:
                break
        return out


# -- the constrained call ---------------------------------------------------------------------------
def constrained_call(
    model: BaseChatModel, messages: list[BaseMessage], schema: dict[str, Any], name: str
) -> tuple[dict[str, Any] | None, AIMessage, str | None]:
    """One reply decoded against `schema`: (the parsed object or None, the reply, why it is unusable)."""
    response_format = {"type": "json_schema", "json_schema": {"name": name, "schema": schema, "strict": True}}
    if hasattr(model, "openai_api_base") or type(model).__name__.endswith("ChatOpenAI"):
        reply = model.bind(response_format=response_format).invoke(messages)
    else:  # another LangChain provider: its own mapping of a JSON schema to constrained output
        raw = model.with_structured_output(schema, method="json_schema", include_raw=True).invoke(messages)
        reply = raw["raw"]
    text = reply.content if isinstance(reply.content, str) else json.dumps(reply.content)
    try:
        parsed = json.loads(text, strict=False)  # a raw control character inside a string is still text
    except json.JSONDecodeError as exc:
        cut = (reply.response_metadata or {}).get("finish_reason") == "length"
        return None, reply, f"the reply is not JSON ({'cut at the token cap' if cut else exc})"
    try:  # an endpoint that takes response_format but does not enforce it: what it says is not trusted
        jsonschema.validate(parsed, schema)
    except jsonschema.ValidationError as exc:
        where = "/".join(map(str, exc.absolute_path)) or "the reply"
        return None, reply, f"the reply does not fit the schema at {where}: {clip_middle(exc.message, 200)}"
    return parsed, reply, None


def _bounded(model: BaseChatModel) -> bool:
    return "api.openai.com" not in str(getattr(model, "openai_api_base", None) or "api.openai.com")


def _ask(
    box: ProposalBox,
    model: BaseChatModel,
    messages: list[BaseMessage],
    schema: dict[str, Any],
    name: str,
    to_ops,
) -> Proposal:
    """Ask until the box holds a proposal (a rejection of the ops is fed back once), recording the
    conversation and its tokens on the proposal."""
    while not box.done:
        parsed, reply, problem = constrained_call(model, messages, schema, name)
        messages.append(reply)
        if problem is None:
            try:
                ops, diagnosis, cause, evidence = to_ops(parsed)
            except (KeyError, TypeError, AttributeError, ValueError) as exc:  # beyond the schema check
                problem = f"the reply names something not offered: {type(exc).__name__}: {exc}"
        if problem is not None:
            answer = box.refuse(problem, again="Answer again with one JSON object")
            if not box.done:
                messages.append(HumanMessage(answer))
            continue
        # each op says why, and from which runs
        ops = [{"rationale": diagnosis, **op, "evidence": op.get("evidence") or evidence} for op in ops]
        rejected = len(box.proposal.errors)
        answer = box.submit(ops, diagnosis, cause, evidence)
        if len(box.proposal.errors) == rejected:  # recorded: ops, or a stated "no change"
            break
        if not box.done:
            messages.append(HumanMessage(answer))
    proposal = box.finish()
    proposal.protocol = "structured"
    proposal.transcript = transcript_of(messages)
    proposal.usage = usage_of(messages)
    return proposal


def reflect_structured(
    traj: Trajectory,
    *,
    scaffold: Scaffold,
    domain_text: str,
    model: BaseChatModel,
    experience: Any,
    sandbox: Any,
    hidden_tasks: Collection[str],
    with_eval: bool = True,
    with_steps: bool = True,
    guidance: bool = True,
    prompts: Mapping[str, str] | None = None,
) -> Proposal:
    """`prompts`: raw task text by id of the run's training tasks (what a worked example shows)."""
    box = ProposalBox(scaffold, traj.task_id, [traj.trajectory_id], sandbox=sandbox)
    digest = Digest(
        traj, scaffold=scaffold, experience=experience, hidden_tasks=hidden_tasks,
        with_eval=with_eval, with_steps=with_steps, prompts=prompts,
    )  # fmt: skip
    schema = proposal_schema(scaffold, list(digest.candidates), bounded=_bounded(model))
    system = STRUCTURED_REFLECT.format(domain=clip_middle(domain_text, 600), max_ops=MAX_OPS)
    if guidance:
        system += "\n" + STRUCTURED_EXAMPLES
    messages: list[BaseMessage] = [SystemMessage(system), HumanMessage(digest.text)]

    def to_ops(reply: dict[str, Any]) -> tuple[list[dict[str, Any]], str, str, list[str]]:
        ops, evidence = [], [traj.trajectory_id]
        for op in reply.get("ops") or []:
            if op.get("op") == "add_example":
                run, task, steps = digest.candidates[op["run"]]
                ops.append({"op": "add_example", "task": task, "steps": steps, "evidence": [run]})
                evidence.append(run)
            else:
                ops.append(dict(op))
        return ops, str(reply.get("diagnosis", "")), str(reply.get("cause", "other")), sorted(set(evidence))

    return _ask(box, model, messages, schema, "proposal", to_ops)


def synthesize_structured(
    proposals: list[Proposal],
    *,
    scaffold: Scaffold,
    domain_text: str,
    model: BaseChatModel,
    sandbox: Any,
    check: Any,
    outcomes: dict[str, dict[str, Any]],
) -> Proposal:
    """Choose, among the batch's proposed ops, the ones that make one domain-level patch."""
    labelled: dict[str, dict[str, Any]] = {}
    lines = []
    for p, proposal in enumerate(proposals, start=1):
        run = outcomes.get(proposal.source, {})
        lines.append(f"P{p} (run score {run.get('score')}): {clip_middle(proposal.diagnosis, 200)}")
        for o, op in enumerate(proposal.ops, start=1):
            label = f"P{p}.{o}"
            labelled[label] = op
            shown = {
                k: v for k, v in op.items() if k not in ("rationale", "evidence") and v not in (None, [], "")
            }
            lines.append(f"  {label}: {clip_middle(json.dumps(shown), 300)}")
    if not labelled:
        return Proposal(source="synthesis", status="empty", protocol="structured")
    traj_ids = sorted({t for p in proposals for t in p.trajectory_ids})
    box = ProposalBox(scaffold, "synthesis", traj_ids, sandbox=sandbox, check=check)
    system = STRUCTURED_SYNTHESIZE.format(domain=clip_middle(domain_text, 600), max_ops=MAX_OPS + 1)
    request = scaffold_overview(scaffold) + "\n\nPROPOSALS:\n" + clip_middle("\n".join(lines), DIGEST_CHARS)
    messages: list[BaseMessage] = [SystemMessage(system), HumanMessage(request)]

    def to_ops(reply: dict[str, Any]) -> tuple[list[dict[str, Any]], str, str, list[str]]:
        ops, seen = [], set()
        for label in reply.get("keep") or []:  # the same edit proposed from two runs counts once
            op = labelled[label]
            key = json.dumps(
                [op.get("op"), op.get("task") or op.get("text") or op.get("title") or op.get("id")]
            )
            if key not in seen:
                seen.add(key)
                ops.append(op)
        evidence = sorted({e for op in ops for e in op.get("evidence", [])}) or traj_ids
        return ops, str(reply.get("rationale", "")), "other", evidence

    return _ask(
        box, model, messages, synthesis_schema(list(labelled), bounded=_bounded(model)), "patch", to_ops
    )
