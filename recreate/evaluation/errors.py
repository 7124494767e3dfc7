"""Whether a rollout that ended in an error was the endpoint's fault.

A model call that fails (a 5xx after the client's retries, a 400, a timeout, a dropped connection) says
nothing about the scaffold: such a run is an *endpoint error*. It is stored for the record but never
evaluated, never cached as a result and never scored, so the next attempt (or a resume) runs it again.
A context overflow is different: the conversation the scaffold led to does not fit the model, which is
the run's own outcome (exit status `context_exceeded`, set by the agent) and is scored like any other.
"""

from __future__ import annotations

from typing import Literal

from recreate.experience.schema import Trajectory
from recreate.models import is_context_overflow
from recreate.redact import redact

FailureKind = Literal["endpoint"]
ERROR_KEY = "rollout_error"  # trajectory metadata: the FailureKind of a run that ended in an error

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


class EndpointDown(RuntimeError):
    """A meta-agent's model call failed past its client's retries: the run stops, resumably, rather than
    record the failure as a round with nothing to propose."""


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
    if traj.outcome.exit_status != "error":
        return None
    return classify_failure(traj.outcome.error)


def is_endpoint_error(traj: Trajectory) -> bool:
    """A stored run whose model call failed: not a score of its scaffold."""
    return traj.metadata.get(ERROR_KEY) == "endpoint"
