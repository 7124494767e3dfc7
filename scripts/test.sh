#!/usr/bin/env bash
# Set up the project's venv (idempotent) and run the test suite. Extra arguments go to pytest.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh dev,embed,train,docker,studio,local,ui
export OMP_NUM_THREADS=${OMP_NUM_THREADS:-1} HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1 ANONYMIZED_TELEMETRY=False
exec .venv/bin/python -m pytest -q -ra --durations=25 "$@"
