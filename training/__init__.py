"""The drivers: everything train.py, eval_glue.py and eval_squad.py run, as importable
functions, and what they share (the device mesh and sharding rules, the optimizer, the
train step, checkpoints, metric writers, the result files' records in results.py).

Each driver reads as a short sequence of named steps: pretrain.py (with pretrain_loop.py,
the step loop, and resume.py, a resume's checks), finetune.py and squad_finetune.py.
Above every package but analysis/ and scripts/ in the import graph."""
