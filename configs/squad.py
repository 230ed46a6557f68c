"""SQuAD v1.1 fine-tuning config.

  python eval_squad.py --config configs/squad.py --workdir DIR \
      --config.init_from=PRETRAIN_WORKDIR --config.squad_dir=DIR_OF_THE_JSON_FILES
  python eval_squad.py --config configs/squad.py:seeds=5 --workdir DIR \
      --config.init_from_hf=bert-base-uncased          # rajpurkar/squad from the hub

BERT's run_squad.py recipe: windows of max_seq_length 384 tokens with doc_stride 128,
questions cut to max_query_length 64, answers of at most max_answer_length 30 tokens
from the n_best 20 start and end logits; 2 epochs (tasks/squad_task.py). Everything else
is the protocol every task shares (configs/finetune.py: batch 32, 10% warm-up then
linear decay, the learning-rate grid {5e-5, 4e-5, 3e-5, 2e-5}, the best on dev F1 by the
mean over seeds) and its settings
(init_from / init_from_hf, init=scratch, insert_th, mesh, length buckets, jax_cache)
mean the same.
"""

from __future__ import annotations

import ml_collections

from configs import finetune
from finetuning import registry

# ARG name -> field: the protocol's and SQuAD's own (tasks/squad_task.py), no task.
SQUAD_ARGS = finetune.task_args([registry.get("squad")], task_arg=False)


def get_config(arg: str | None = None) -> ml_collections.ConfigDict:
    return finetune.get_config(arg, default_task="squad", task_arg=False)
