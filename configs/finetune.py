"""The fine-tuning config of any registered task (finetuning/registry.py).

  python finetune.py --config configs/finetune.py:task=sst2 --workdir DIR \
      --config.init_from=PRETRAIN_WORKDIR --config.glue_dir=../shared/data/glue

The protocol every task shares (BERT's fine-tuning: batch 32, 3 epochs, 10% warm-up then
linear decay, the best learning rate of {5e-5, 4e-5, 3e-5, 2e-5} chosen on dev by the
mean over seeds; where the encoder comes from), then the task's own fields
(Task.config_fields, which may also replace a protocol default: SQuAD's 384-token
windows and 2 epochs) and short args (Task.short_args). configs/glue.py and
configs/squad.py are this file with their task set.
"""

from __future__ import annotations

import copy

import ml_collections

from attention import registry as attention_registry
from configs import model as model_configs
from finetuning import registry

# ARG name -> field, for every task; a task adds its own (Task.short_args).
PROTOCOL_ARGS = {
    "seeds": "num_seeds",
    "lr": "learning_rates",
    "epochs": "num_epochs",
    "batch": "batch_size",
    "seq_len": "max_seq_length",
    "init_from": "init_from",
    "max_train": "max_train_examples",
    "init": "init",
    "save_model": "save_model",
    "buckets": "length_buckets",
    "group_by_length": "group_by_length",
    "scan": "scan_layers",
}


def get_config(arg: str | None = None, default_task: str = "rte",
               task_arg: bool = True, glue_only: bool = False) -> ml_collections.ConfigDict:
    """`task_arg`: whether ARG may name the task (configs/squad.py fixes it); `glue_only`:
    only the tasks task=all runs (configs/glue.py)."""
    args = model_configs.parse_arg(arg)
    task = str(args.pop("task", default_task)) if task_arg else default_task
    tasks = registry.resolve(task)  # an unknown task: one error naming the choices
    if glue_only and not all(each.in_all for each in tasks):
        other = next(each for each in tasks if not each.in_all)
        raise ValueError(f"task={task}: {other.name} is not a GLUE task; use "
                         f"configs/finetune.py:task={other.key} (finetune.py)")
    names = task_args(tasks, task_arg)
    unknown = sorted(set(args) - set(names))
    if unknown:
        raise ValueError(f"unknown config arg(s) {unknown}; allowed: {sorted(names)}")
    config = protocol(task)
    for field, default in task_fields(tasks).items():
        config[field] = default
    return apply_args(config, args, names)


def task_fields(tasks) -> dict:
    """The fields these tasks add, each a fresh copy (a placeholder shared between
    configs would tie them together). Tasks run in one invocation share one config, so
    they must be of one kind (GLUE's together): fields that differ are refused."""
    kinds = {type(each) for each in tasks}
    if len(kinds) > 1:
        raise ValueError(f"task={'/'.join(each.key for each in tasks)}: tasks of different "
                         f"kinds share no config (their fields and protocol differ); "
                         f"fine-tune them in separate invocations")
    fields = {}
    for each in tasks:
        for field, default in each.config_fields.items():
            fields[field] = copy.deepcopy(default)
    return fields


def task_args(tasks, task_arg: bool = True) -> dict[str, str]:
    """The short args a config of these tasks takes; one that two sources define
    differently (a task's or a variant's against the protocol's) is refused."""
    names = {"task": "task"} if task_arg else {}
    sources = [("the protocol", PROTOCOL_ARGS)]
    sources += [(f"attention {name}", variant.module.insertion.short_args)  # e.g. insert_th
                for name, variant in attention_registry.insertable().items()]
    sources += [(f"task {each.key}", each.short_args) for each in tasks]
    owner = {}
    for source, args in sources:
        for arg, field in args.items():
            if arg in names and names[arg] != field:
                raise ValueError(f"short config arg {arg!r} of {source} ({field}) is also "
                                 f"{owner.get(arg, 'the task arg')}'s ({names[arg]}); "
                                 f"rename one")
            names[arg], owner[arg] = field, source
    return names


def protocol(task: str) -> ml_collections.ConfigDict:
    """The fields every task's config has."""
    config = ml_collections.ConfigDict()
    # The task (finetuning's registry: GLUE's cola, sst2, mrpc, stsb, qqp, mnli, qnli,
    # rte, wnli; squad; any registered plug-in), several as sst2/rte, or all (GLUE's
    # nine). Results of earlier invocations in the same workdir are kept.
    config.task = task
    # Pretraining workdir to start from (its latest checkpoint, config and tokenizer/).
    config.init_from = ml_collections.config_dict.placeholder(str)
    # Or a Hugging Face BERT: hub id or directory with config.json, weights, vocab.txt.
    config.init_from_hf = ml_collections.config_dict.placeholder(str)
    config.checkpoint_step = ml_collections.config_dict.placeholder(int)  # None = latest
    # pretrained: start from the checkpoint's weights. scratch: the same architecture and
    # tokenizer with freshly initialised weights (BERT's init, drawn per fine-tuning seed),
    # i.e. the model without its pretraining.
    config.init = "pretrained"
    # Fine-tune a multi-head checkpoint as another variant: each insertable variant's
    # fields (attention/*.py, Attention.insertion), e.g. insert_talking_heads and
    # insert_th_init: see the variant's `insertion.help`.
    for variant in attention_registry.insertable().values():
        insertion = variant.module.insertion
        config[insertion.flag] = False
        config[insertion.init_field] = insertion.default_init
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
    # Batch lengths (finetuning/batching.py): each batch is cut to the shortest of these its
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

    return config


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
