"""Which run errors are the endpoint's (retried, never scored); a context overflow is not one."""

from __future__ import annotations

import pytest

from recreate.evaluation.errors import classify_failure, is_endpoint_down
from recreate.models import is_context_overflow


@pytest.mark.parametrize(
    "error",
    [
        # llama.cpp's server (the embedded model's engine), as it answers an overlong prompt
        "BadRequestError: Error code: 400 - {'error': {'code': 400, 'message': 'request (6031 tokens) "
        "exceeds the available context size (4096 tokens), try increasing it', "
        "'type': 'exceed_context_size_error'}}",
        "BadRequestError: Error code: 400 - This model's maximum context length is 8192 tokens",
        "BadRequestError: context_length_exceeded",
    ],
)
def test_a_prompt_the_context_cannot_hold_is_not_the_endpoints_failure(error):
    assert is_context_overflow(error)
    assert classify_failure(error) is None  # scored as the run's outcome, never retried as a fault


def test_connection_failures_are_the_endpoints_and_ordinary_errors_are_the_runs():
    assert classify_failure("APIConnectionError: Connection error.") == "endpoint"
    assert classify_failure("ValueError: no task") is None
    assert classify_failure(None) is None
    assert not is_context_overflow("BadRequestError: Error code: 400 - invalid 'messages'")


@pytest.mark.parametrize(
    ("error", "down"),
    [
        ("APIConnectionError: Connection error.", True),
        ("OpenAIConnectionError: Connection error.", True),
        ("AuthenticationError: Error code: 401 - the key was revoked", True),
        ("NotFoundError: Error code: 404 - model 'gpt-x' not found", True),
        ("InternalServerError: Error code: 503 - overloaded", True),  # past the client's retries
        ("BadRequestError: Error code: 400 - invalid 'messages'", False),  # about this request only
        ("OpenAIInvalidRequestError: Error code: 400 - content filtered", False),
        ("BadRequestError: context_length_exceeded", False),
        ("ValueError: no task", False),
    ],
)
def test_an_endpoint_is_down_when_its_failure_is_not_about_one_request(error: str, down: bool) -> None:
    assert is_endpoint_down(error) is down
