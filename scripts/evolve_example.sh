#!/usr/bin/env bash
# The main job: evolve ⇄ fine-tune ⇄ serve on the embedded SmolLM2-135M, on this machine (no key, no
# download): ReCreate evolves examples/arithmetic/scaffold, and every 2 rounds TAPO fine-tunes the model
# under the agent on its own runs, serves the new version, and the gate keeps it only if held-out tasks
# say so. Extra arguments go to `recreate evolve` (e.g. --optimizer-model openai:gpt-4.1-mini).
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh embed,local,train
exec .venv/bin/recreate evolve --seed examples/arithmetic/scaffold --domain math \
  --data examples/arithmetic/tasks.jsonl --model local --rounds 4 --finetune-every 2 --budget-usd 2 "$@"
