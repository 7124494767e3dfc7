"""Which run errors are the endpoint's (retried, never scored); a context overflow is not one."""

from __future__ import annotations

import pytest

from recreate.evaluation.errors import classify_failure
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
