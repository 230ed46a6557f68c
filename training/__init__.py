"""What pretraining (train.py) and fine-tuning (eval_glue.py) share: the device
mesh and sharding rules, the optimizer, checkpoints and metric writers, the result
files' records (results.py) and the one atomic file writer (files.py)."""
