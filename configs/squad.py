"""SQuAD v1.1 fine-tuning config.

  python eval_squad.py --config configs/squad.py --workdir DIR \
      --config.init_from=PRETRAIN_WORKDIR --config.squad_dir=DIR_OF_THE_JSON_FILES
  python eval_squad.py --config configs/squad.py:seeds=5 --workdir DIR \
      --config.init_from_hf=bert-base-uncased          # rajpurkar/squad from the hub

BERT's run_squad.py recipe: windows of max_seq_length 384 tokens with doc_stride 128,
questions cut to max_query_length 64, answers of at most max_answer_length 30 tokens
from the n_best 20 start and end logits; 2 epochs. Everything else is GLUE's protocol
(configs/glue.py: batch 32, 10% warm-up then linear decay, the learning-rate grid
{5e-5, 4e-5, 3e-5, 2e-5}, the best on dev F1 by the mean over seeds) and its settings
(init_from / init_from_hf, init=scratch, insert_th, mesh, length buckets, jax_cache)
mean the same.
"""

from __future__ import annotations

import ml_collections

from configs import glue as glue_configs
from configs import model as model_configs

SQUAD_ARGS = {
    **{k: v for k, v in glue_configs.GLUE_ARGS.items() if k not in ("task", "glue_dir")},
    "squad_dir": "squad_dir",
    "doc_stride": "doc_stride",
    "max_query": "max_query_length",
    "max_answer": "max_answer_length",
}


def get_config(arg: str | None = None) -> ml_collections.ConfigDict:
    args = model_configs.parse_arg(arg)
    unknown = sorted(set(args) - set(SQUAD_ARGS))
    if unknown:
        raise ValueError(f"unknown config arg(s) {unknown}; allowed: {sorted(SQUAD_ARGS)}")
    config = glue_configs.get_config()  # the fine-tuning protocol both share
    for field in ("task", "glue_dir", "write_test_predictions"):
        del config[field]
    # train-v1.1.json and dev-v1.1.json as the SQuAD site serves them; None loads
    # rajpurkar/squad from the Hugging Face hub.
    config.squad_dir = ml_collections.config_dict.placeholder(str)
    config.max_seq_length = 384
    config.doc_stride = 128  # tokens between the starts of a context's windows
    config.max_query_length = 64  # question tokens kept
    config.max_answer_length = 30  # tokens of a predicted answer, at most
    config.n_best = 20  # start and end candidates per window
    config.num_epochs = 2.0
    # Cap on training questions (quick runs and smoke tests); None = all.
    config.max_train_examples = ml_collections.config_dict.placeholder(int)
    # The span head is not exported to Hugging Face (scripts/export_hf.py exports GLUE
    # classifiers); keep the fine-tuned parameters with best or all.
    config.save_model = "none"
    config.eval_batch_size = 64
    return glue_configs.apply_args(config, args, SQUAD_ARGS)
