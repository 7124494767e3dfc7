"""Fine-tuning the model under the agents, from their own runs (the TAPO backend does the training).

- `finetune` (`recreate finetune`): train on an evolve run's logs, publish, compare base and tuned.
- `online_train` (`tapo train --online`): sample with the agent, reward with the domain, train, serve.
- `FinetuneStep` (`recreate evolve --finetune-every K`): fine-tuning as a gated step of the evolve loop.
- `ServedPolicy`: the policy versions those produce, served by llama.cpp.
"""

from recreate.finetune.evolve_step import FinetuneSettings, FinetuneStep
from recreate.finetune.offline import FinetuneError, FinetuneReport, finetune
from recreate.finetune.online import OnlineConfig, online_train
from recreate.finetune.policy import PolicyVersion, ServedPolicy

__all__ = [
    "FinetuneError",
    "FinetuneReport",
    "FinetuneSettings",
    "FinetuneStep",
    "OnlineConfig",
    "PolicyVersion",
    "ServedPolicy",
    "finetune",
    "online_train",
]
