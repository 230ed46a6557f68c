"""GLUE fine-tuning of a pretrained checkpoint of any attention variant.

  python eval_glue.py --config configs/glue.py:task=rte --workdir DIR \
      --config.init_from=PRETRAIN_WORKDIR --config.glue_dir=../shared/data/glue
  python eval_glue.py --config configs/glue.py:task=all --workdir DIR --config.init_from=RUN

Writes DIR/results.json, DIR/results.md (mean ± std over seeds at the best
learning rate), one folder per (task, lr, seed) with TensorBoard logs, and
DIR/submission/ with test predictions in GLUE's format. Rerunning skips
finished (task, lr, seed) runs.
"""

from __future__ import annotations

from finetuning.cli import main

if __name__ == "__main__":
    main("configs/glue.py[:ARGS]")
