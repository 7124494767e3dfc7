"""RL fine-tuning of an agent's model from its logged trajectories (TAPO and the losses it is compared to).

    tapo train --logs .recreate/experience --model Qwen/Qwen2.5-0.5B-Instruct --algo tapo --dry-run

Modules: `data` (trajectories -> tensors) + `logged` (logged ids, stop tokens, sampling read as logged),
`losses` + `advantages` (the objective), `config` + `trainer` + `logprobs` (the loop, on accelerate;
chunked log-probs), `accelerate/` (launch configs), `integrations.verl` (the loss in verl's registry),
`serve` (vLLM serving and LoRA merging), `synthetic` (stability experiments), `cli` (the `tapo` command).

Entry points for `recreate.finetune` (the only part of `recreate` that calls the trainer; everything
else couples the two packages through the trajectory schema): `config.command_config`,
`config.settings_file`, `config.ConfigError`; `data.dataset_for`; `load.OUTSIDE`, `load.link_outside`,
`load.trajectory_fault`; `trainer.train`, `trainer.load_tokenizer`, `trainer.token_logprobs`.
"""

__version__ = "0.1.0"
