#!/usr/bin/env bash
# Set up the project's venv (idempotent) and run the test suite. Extra arguments go to pytest.
# RECREATE_TEST_WORKERS=N: pytest-xdist processes (default 3; whole files per process, the files
# sharing a costly session fixture together: tests/conftest.py); 0 runs everything in this one process.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh dev,embed,train,docker,studio,local,ui,ray
export OMP_NUM_THREADS=${OMP_NUM_THREADS:-1} HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1 ANONYMIZED_TELEMETRY=False
# the embedded model's HF conversion, made once for every worker (and kept for the next run)
export RECREATE_TEST_MODELS=${RECREATE_TEST_MODELS:-$PWD/.recreate/test-models}
workers=${RECREATE_TEST_WORKERS:-3}
df -h . "${TMPDIR:-/tmp}" | sed 's/^/disk: /'  # a full disk fails tests far from its cause
parallel=()
[ "$workers" = 0 ] || parallel=(-n "$workers" --dist loadscope)
exec .venv/bin/python -m pytest -q -ra --durations=25 "${parallel[@]}" "$@"
