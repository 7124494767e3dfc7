#!/usr/bin/env bash
# Build the pinned DS-1000 evaluation venv (idempotent; a no-op when it is already there).
#   scripts/ds1000_env.sh [TARGET] [--python /path/to/python3.11]
# TARGET defaults to $RECREATE_DS1000_ENV, else ${RECREATE_HOME:-.recreate}/envs/ds1000.
#   --with pytorch,tensorflow adds the optional library groups (DS-1000 Pytorch/Tensorflow problems).
# Offline: PIP_NO_INDEX=1 PIP_FIND_LINKS=/path/to/wheelhouse scripts/ds1000_env.sh
set -euo pipefail
repo="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
# any Python 3 can run the builder; the venv itself is based on a system Python 3.11 (see find_python)
exec "$(command -v python3)" "$repo/recreate/domains/ds1000/env.py" "$@"
