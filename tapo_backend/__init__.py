"""RL fine-tuning of an agent's model from its logged trajectories (TAPO and the losses it is compared to).

    tapo train --logs .recreate/experience --model Qwen/Qwen2.5-0.5B-Instruct --algo tapo --dry-run

Modules: `data` (trajectories -> tensors), `losses` + `advantages` (the objective), `config` + `trainer`
(the loop, on accelerate), `serve` (vLLM serving and LoRA merging), `synthetic` (stability experiments),
`cli` (the `tapo` command).
"""

__version__ = "0.1.0"
