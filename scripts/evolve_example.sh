#!/usr/bin/env bash
# The main job: evolve ⇄ fine-tune ⇄ serve on the embedded SmolLM2-135M, on this machine (no key, no
# download). ReCreate evolves examples/arithmetic/scaffold on three-term sums worded four ways (its
# ReCreate-Agent is the same 135M model, proposing through the structured protocol); after round 2 TAPO
# fine-tunes the model under the agent on its own runs; each new scaffold and model version is kept only if held-out
# tasks say so, and the run ends with the seed pair vs the final pair on the untouched test split.
# Extra arguments go to `recreate evolve` (e.g. --random-seed 1, --optimizer-model openai:gpt-4.1-mini).
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh embed,local,train
exec .venv/bin/recreate evolve --seed examples/arithmetic/scaffold --domain math \
  --data examples/arithmetic/phrased_sums.jsonl --model local --rounds 3 --finetune-every 2 --val-seeds 2 \
  --budget-usd 2 "$@"
