"""The drivers: everything train.py runs, as importable functions, and what pretraining
and fine-tuning (finetuning/) share (the device mesh and sharding rules, the optimizer, the
train step, checkpoints, metric writers, the result files' records in results.py).

Each driver reads as a short sequence of named steps: pretrain.py (with pretrain_loop.py,
the step loop, and resume.py, a resume's checks). Below finetuning/, tasks/, configs/,
analysis/ and scripts/ in the import graph."""
