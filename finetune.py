"""Fine-tuning of a pretrained checkpoint on any registered task (finetuning/registry.py:
GLUE's nine, SQuAD, a plug-in of tasks/ or FINETUNING_TASKS).

  python finetune.py --config configs/finetune.py:task=sst2 --workdir DIR \
      --config.init_from=PRETRAIN_WORKDIR --config.glue_dir=../shared/data/glue
  FINETUNING_TASKS=my_task.py python finetune.py --config configs/finetune.py:task=mine \
      --workdir DIR --config.init_from=PRETRAIN_WORKDIR

eval_glue.py and eval_squad.py are this command with configs/glue.py and configs/squad.py.
Writes DIR/results.json, DIR/results.md and one folder per (task, lr, seed); a rerun
skips finished runs, and a signal saves the current one for the rerun to continue.
"""

from __future__ import annotations

from finetuning.cli import main

if __name__ == "__main__":
    main("configs/finetune.py[:ARGS]")
