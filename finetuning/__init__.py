"""The task-neutral fine-tuning core: a pretrained encoder, any registered task, the
learning-rate x seed grid, its records and workdir.

  task.py       the Task interface: what a task supplies (data, head, objective,
                predictions, scores, report, its config fields and identity keys)
  registry.py   the tasks by config name; tasks/ and FINETUNING_TASKS files register
  pretrained.py the encoder a fine-tuning starts from (init_from, init_from_hf, scratch)
  batching.py   epoch order, length buckets, scoring a split
  runs.py       one (task, learning rate, seed) run: train, evaluate, resume, record
  suite.py      every task of config.task over the grid, in one workdir

    config = configs.finetune.get_config("task=sst2")   # or configs/glue.py, squad.py
    finetuning.run(config, workdir)
"""

from finetuning.registry import get, names, register
from finetuning.suite import run
from finetuning.task import Task, TaskData

__all__ = ["Task", "TaskData", "get", "names", "register", "run"]
