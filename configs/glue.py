"""GLUE fine-tuning config.

  python eval_glue.py --config configs/glue.py:task=rte --workdir DIR \
      --config.init_from=PRETRAIN_WORKDIR --config.glue_dir=../shared/data/glue
  python eval_glue.py --config configs/glue.py:task=all,seeds=5 --workdir DIR \
      --config.init_from=PRETRAIN_WORKDIR

The model's architecture and tokenizer come from the pretraining workdir
(`init_from`: its last checkpoint and tokenizer/) or from a Hugging Face BERT
(`init_from_hf`: a hub id or a local directory with config.json, weights and
vocab.txt). `init=scratch` trains the same architecture from fresh weights (no pretraining), and
`insert_th=true` turns a multi-head checkpoint into talking heads whose mixing starts
at the identity (`insert_th_init=fan_in`: a fresh fan-in draw per fine-tuning seed).
Protocol as the BERT paper: batch 32, 3 epochs, 10% warmup then
linear decay, the best learning rate of {5e-5, 4e-5, 3e-5, 2e-5} chosen on
dev by the mean over seeds.
"""

from __future__ import annotations

import ml_collections

from configs import finetune
from finetuning import registry

# ARG name -> field (analysis/sweep_grids.py checks a grid's GLUE args against it).
GLUE_ARGS = finetune.task_args(registry.in_all())


def is_glue_task(name: str) -> bool:
    """One of GLUE's tasks (the ones task=all runs), by any spelling."""
    return registry.is_task(name) and registry.get(name).in_all


def get_config(arg: str | None = None) -> ml_collections.ConfigDict:
    return finetune.get_config(arg, default_task="rte", glue_only=True)

