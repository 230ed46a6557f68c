"""What pretraining (train.py) and fine-tuning (eval_glue.py) share: the device
mesh and sharding rules, the optimizer, checkpoints and metric writers."""
