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

from configs import model as model_configs

GLUE_ARGS = {
    "task": "task",
    "seeds": "num_seeds",
    "lr": "learning_rates",
    "epochs": "num_epochs",
    "batch": "batch_size",
    "seq_len": "max_seq_length",
    "glue_dir": "glue_dir",
    "init_from": "init_from",
    "max_train": "max_train_examples",
    "init": "init",
    "insert_th": "insert_talking_heads",
    "insert_th_init": "insert_th_init",
    "save_model": "save_model",
    "buckets": "length_buckets",
    "group_by_length": "group_by_length",
    "scan": "scan_layers",
}


def get_config(arg: str | None = None) -> ml_collections.ConfigDict:
    args = model_configs.parse_arg(arg)
    unknown = sorted(set(args) - set(GLUE_ARGS))
    if unknown:
        raise ValueError(f"unknown config arg(s) {unknown}; allowed: {sorted(GLUE_ARGS)}")

    config = ml_collections.ConfigDict()
    # A GLUE task (cola, sst2, mrpc, stsb, qqp, mnli, qnli, rte, wnli), several as
    # sst2/rte, or all. Results of earlier invocations in the same workdir are kept.
    config.task = "rte"
    # Pretraining workdir to start from (its latest checkpoint, config and tokenizer/).
    config.init_from = ml_collections.config_dict.placeholder(str)
    # Or a Hugging Face BERT: hub id or directory with config.json, weights, vocab.txt.
    config.init_from_hf = ml_collections.config_dict.placeholder(str)
    config.checkpoint_step = ml_collections.config_dict.placeholder(int)  # None = latest
    # pretrained: start from the checkpoint's weights. scratch: the same architecture and
    # tokenizer with freshly initialised weights (BERT's init, drawn per fine-tuning seed),
    # i.e. the model without its pretraining.
    config.init = "pretrained"
    # Fine-tune a multi-head checkpoint as talking heads: P_l and P_w are added to every
    # layer at the identity, so at step 0 the model computes exactly the checkpoint's
    # function, and the mixing is then learned with the rest.
    config.insert_talking_heads = False
    # The inserted mixing's start: identity (the checkpoint's function at step 0) |
    # fan_in (N(0, 1/heads) per entry, drawn per fine-tuning seed: what swapping the
    # talking-heads class into a trained model gives) | truncated_fan_in (the reference's).
    config.insert_th_init = "identity"
    # GLUE TSV folder as download_glue_data.py leaves it; None loads nyu-mll/glue from the hub.
    config.glue_dir = ml_collections.config_dict.placeholder(str)
    config.max_seq_length = 128  # tokens per example, [CLS] and [SEP]s included
    config.batch_size = 32
    config.num_epochs = 3.0
    config.learning_rates = (5e-5, 4e-5, 3e-5, 2e-5)  # grid; best on dev (mean over seeds)
    config.num_seeds = 3  # seeds 0..num_seeds-1 per learning rate (BERT paper: >= 5 small)
    config.warmup_fraction = 0.1  # of the training steps
    config.weight_decay = 0.01
    config.dropout_rate = 0.1  # hidden and classifier dropout while fine-tuning
    config.attention_dropout_rate = 0.1  # 0 is forced for attention_impl='fused'
    # The PRNG of the dropout masks, as pretraining's (configs/pretrain.py says why threefry,
    # and threefry_gpu_kernel on GPU): threefry | threefry_gpu_kernel | rbg | unsafe_rbg.
    # Part of the workdir's identity (threefry_gpu_kernel counts as threefry).
    config.dropout_prng = "threefry"
    # The encoder's layout (model.scan_layers): None keeps the pretrained model's | true:
    # scanned (one layer compiled, whatever the depth) | false: unrolled. The weights are
    # converted (models/layout.py); the numbers computed are the same.
    config.scan_layers = ml_collections.config_dict.placeholder(bool)
    # Cap on training examples per task (quick runs and smoke tests); None = all.
    config.max_train_examples = ml_collections.config_dict.placeholder(int)
    config.eval_batch_size = 128
    # Batch lengths (training/finetune.py): each batch is cut to the shortest of these its
    # longest example fits (only padding is cut; the same rows, so the same run up to
    # dropout draws), and eval scores examples shortest first. auto: 16/24/32/48/64/96/128
    # ... up to max_seq_length | none: every batch at max_seq_length | e.g. 32/64/128.
    # One compilation per length.
    config.length_buckets = "auto"
    # Batches of examples of similar length (sorted within windows of 64 batches, then
    # shuffled; Hugging Face's group_by_length): with the buckets, most of an epoch runs
    # at the short lengths. Off by default: it changes which examples share a batch.
    config.group_by_length = False
    config.log_every_steps = 50
    config.write_test_predictions = True  # GLUE submission files for the best run
    # Fine-tuned parameters kept in TASK/lr{LR}_seed{S}/model/ for scripts/export_hf.py:
    # best (the run GLUE's submission comes from: the best learning rate's best seed; the
    # other runs' are removed once the task's summary is made) | all | none.
    config.save_model = "best"
    # Mesh axes sizes, as pretraining: data parallel over every device by default; set
    # fsdp (or tensor) to shard a large row's parameters. Batch sizes must divide by the
    # batch shards (data x fsdp).
    config.mesh = ml_collections.ConfigDict({"data": -1, "fsdp": 1, "tensor": 1})
    config.logical_axis_rules = ()  # empty: training/sharding.py's DEFAULT_RULES
    # Compiled programs kept across processes (common/compile_cache.py); never part of a run.
    config.jax_cache = "auto"  # auto: $JAX_COMPILATION_CACHE_DIR or ~/.cache/... | none | DIR

    return apply_args(config, args, GLUE_ARGS)


def apply_args(config: ml_collections.ConfigDict, args: dict, names: dict[str, str]
               ) -> ml_collections.ConfigDict:
    """Short config args (task=rte,lr=3e-5/2e-5) into their fields."""
    for key, value in args.items():
        field = names[key]
        if field == "learning_rates":
            value = tuple(float(v) for v in str(value).split("/")) if isinstance(
                value, str) else (float(value),)
        try:
            config[field] = value
        except TypeError:  # ml_collections: a value of the wrong type for the field
            raise ValueError(f"{key}={value!r}: {field} must be of type "
                             f"{type(config[field]).__name__}") from None
    return config
