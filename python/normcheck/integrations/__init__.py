"""normcheck inside the frameworks people train with: one real optimizer step of theirs, judged.

- ``normcheck.integrations.transformers``: a ``TrainerCallback`` (and ``attach``) for a Hugging Face
  ``transformers.Trainer`` and the trainers built on it (TRL's).
- ``normcheck.integrations.lightning``: a ``lightning.pytorch.Callback`` for a Lightning ``Trainer``.
- ``normcheck.integrations.trl``: what TRL's ``GRPOTrainer`` needs beside the callback: its policy
  loss is not a cross-entropy, and each ``loss_type`` declares its own objective.

Each module imports its framework when it is imported, and nothing here imports them before.
An accelerate loop or an FSDP2 loop is the user's own code: it hosts ``normcheck.torch.Probe``
directly (docs/python.md shows where the calls go).
"""

from typing import List

__all__: List[str] = []
