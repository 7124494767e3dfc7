"""Rollouts that are no score: the endpoint's or the machine's failures, not the scaffold's.

A model call that fails (a 5xx after the client's retries, a 400, a timeout, a dropped connection) says
nothing about the scaffold: such a run is an *endpoint error*. A sandbox that cannot open, a task
preparation that fails because the machine does, and an evaluator that crashes without the submission's
doing are *machine* and *evaluator* errors (`recreate.evaluation.machine` tells them apart). Each is stored
for the record (`ERROR_KEY` in the trajectory's metadata, no evaluation) but never scored, never cached as
a result and never trained on, so the next attempt (or a resume) runs it again.
A context overflow is different: the conversation the scaffold led to does not fit the model, which is
the run's own outcome (exit status `context_exceeded`, set by the agent) and is scored like any other.
"""

from __future__ import annotations

from typing import Literal

from recreate.experience.schema import Trajectory
from recreate.models import is_context_overflow
from recreate.redact import redact

FailureKind = Literal["endpoint", "machine", "evaluator"]
ERROR_KEY = "rollout_error"  # trajectory metadata: the FailureKind of a run that is no score
REASON_KEY = "rollout_error_reason"  # trajectory metadata: why, for machine and evaluator errors

# exception class names of the model clients (the agent records errors as "Type: message"): the OpenAI
# SDK's, LangChain's wrappers of them (OpenAI*, Model*Error) and httpx's
_CLIENT_PREFIXES = ("OpenAI", "Model", "Anthropic")
_ENDPOINT_ERRORS = frozenset(
    {
        "APIError",
        "APIStatusError",
        "APIConnectionError",
        "APITimeoutError",
        "APIResponseValidationError",
        "BadRequestError",
        "AuthenticationError",
        "PermissionDeniedError",
        "NotFoundError",
        "ConflictError",
        "UnprocessableEntityError",
        "RateLimitError",
        "InternalServerError",
        "ConnectError",
        "ConnectTimeout",
        "ReadTimeout",
        "ReadError",
        "RemoteProtocolError",
        "TimeoutException",
    }
)


class RunHalted(RuntimeError):
    """Not the scaffold's doing and not going away by itself: the run stops, resumably."""


class EndpointDown(RunHalted):
    """A meta-agent's model call failed past its client's retries: the run stops, resumably, rather than
    record the failure as a round with nothing to propose."""


class MachineDown(RunHalted):
    """Rollouts keep failing for the same machine reason (a sandbox that stopped opening, a broken
    evaluator): the run stops, resumably, rather than store a run of errors."""


# refusals of one request (its content, its size), which the next request may not meet
_REQUEST_REFUSALS = ("BadRequest", "InvalidRequest", "UnprocessableEntity", "Conflict", "ResponseValidation")


def classify_failure(error: str | None) -> FailureKind | None:
    """`"endpoint"` for a failed model call, None for anything else (the run's own failure, a context
    overflow included: scored as usual)."""
    if not error or is_context_overflow(error):
        return None
    name = error.split(":", 1)[0].strip().rsplit(".", 1)[-1]
    client = name.startswith(_CLIENT_PREFIXES) and name.endswith("Error")
    return "endpoint" if client or name in _ENDPOINT_ERRORS else None


def is_endpoint_down(error: str) -> bool:
    """An endpoint failure not about the one request: unreachable, a refused key, an unknown model, or
    429/5xx past the client's retries."""
    name = error.split(":", 1)[0]
    return classify_failure(error) == "endpoint" and not any(r in name for r in _REQUEST_REFUSALS)


def endpoint_down(exc: BaseException, role: str) -> EndpointDown | None:
    """The stop to raise for a meta-agent's failed call (`role`: optimizer, synthesis), or None when the
    failure is not its endpoint's."""
    error = redact(f"{type(exc).__name__}: {exc}")
    return EndpointDown(f"the {role} model's endpoint failed: {error}") if is_endpoint_down(error) else None


def failure_kind(traj: Trajectory) -> FailureKind | None:
    """`"endpoint"` for a run that failed in a model call: by the client's error type, or by where it
    broke off (waiting for a reply: a 200 whose body is no completion raises a JSON or a parsing error
    that names no client); None for the run's own failure."""
    if traj.outcome.exit_status != "error":
        return None
    return classify_failure(traj.outcome.error) or ("endpoint" if awaited_reply(traj) else None)


def awaited_reply(traj: Trajectory) -> bool:
    """The run ended in an error while it waited for the model: its conversation had begun and its last
    message is not the model's (a failure acting on a reply ends after that reply). A context overflow
    is the run's own outcome and never ends as an error."""
    return bool(traj.messages) and traj.messages[-1].get("role") != "assistant"


def is_endpoint_error(traj: Trajectory) -> bool:
    """A stored run whose model call failed: not a score of its scaffold."""
    return traj.metadata.get(ERROR_KEY) == "endpoint"


def is_rollout_error(traj: Trajectory) -> bool:
    """A stored run that is no score of its scaffold: its endpoint, machine or evaluator failed."""
    return bool(traj.metadata.get(ERROR_KEY))


def error_reason(traj: Trajectory) -> str:
    """What went wrong in a run that is no score, in one line."""
    return str(traj.metadata.get(REASON_KEY) or traj.outcome.error or "unknown error")
