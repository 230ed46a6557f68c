"""SQuAD v1.1 fine-tuning of a pretrained checkpoint of any attention variant.

  python eval_squad.py --config configs/squad.py --workdir DIR \
      --config.init_from=PRETRAIN_WORKDIR --config.squad_dir=DIR_WITH_THE_JSON_FILES
  python eval_squad.py --config configs/squad.py:seeds=5 --workdir DIR --config.init_from_hf=NAME

Writes DIR/results.json and DIR/results.md (EM and F1, mean ± std over seeds at the
best learning rate), DIR/predictions.json (the best run's answers, official format) and
one folder per (lr, seed) with its predictions and TensorBoard logs. Rerunning skips
finished runs; SIGTERM/SIGINT saves the current run, and the rerun continues it.
"""

from __future__ import annotations

from finetuning.cli import main

if __name__ == "__main__":
    main("configs/squad.py[:ARGS]")
