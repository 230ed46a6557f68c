"""GLUE fine-tuning: everything eval_glue.py runs, as importable functions.

One run = (task, learning rate, seed). Each finished run leaves
WORKDIR/TASK/lr{lr}_seed{seed}/result.json (written atomically), so a rerun
skips it; an interrupted run has no result.json and is redone. The task summary
picks the learning rate with the best mean dev score over seeds and reports
mean, std and every seed's score; the best run's test predictions become GLUE
submission files. The files' formats are training/results.py's records (RunResult,
TaskSummary, GlueResults); results.md's table is training/glue_report.py's.
"""

from __future__ import annotations

import dataclasses
import json
import math
import os
import shutil
from collections.abc import Callable
from typing import Any

import flax
import flax.linen as nn
import jax
import jax.numpy as jnp
import ml_collections
import numpy as np
import tokenizers

import glue
import input_pipeline
from attention import registry
from attention.talking_heads import CHOICES as TH_CHOICES
from common.files import write_json_atomic
from models import BertForSequenceClassification, BertModel, ModelConfig, layout
from models.hf_export import EXPORTABLE_ATTENTION
from training import checkpoint_reader, checkpoints, metrics, results, sharding, steps
from training import glue_report as report
from training import workdir as workdir_lib
from training.checkpoints import CheckpointError
from training.cli import Stopped
from training.optimizer import make_optimizer
from training.preemption import PreemptionFlag
from training.workdir import WorkdirLock


@dataclasses.dataclass
class Pretrained:
    model_config: ModelConfig
    bert_params: dict[str, Any] | None  # None: init=scratch, every run draws its own
    tokenizer: tokenizers.Tokenizer
    source: str  # where it came from, for results and the workdir identity check
    # init=scratch: the source run's pretraining seed, folded into every run's init key.
    # A sweep fine-tunes a scratch row once per pretraining seed; without it those runs
    # would draw the same encoders and repeat one another.
    init_stream: int = 0


INITS = ("pretrained", "scratch")
SAVE_MODEL = ("best", "all", "none")  # config.save_model
# TASK/lr{LR}_seed{S}/model/: a run's fine-tuned parameters (no optimizer state), and
# WORKDIR/tokenizer/: the tokenizer of every run in the workdir (scripts/export_hf.py).
FINE_TUNED_MODEL = "model"
TOKENIZER = "tokenizer"


# -- loading the pretrained model ------------------------------------------------------
def load_pretrained(config: ml_collections.ConfigDict) -> Pretrained:
    from input_pipeline import load_tokenizer

    if config.init_from and config.init_from_hf:
        raise ValueError("set only one of init_from and init_from_hf")
    if config.init not in INITS:
        raise ValueError(f"init={config.init!r} is unknown; choose one of {', '.join(INITS)}")
    if config.init_from:
        workdir = config.init_from
        state, saved, step, where = checkpoint_reader.restore_run(
            workdir, config.checkpoint_step, name=f"init_from={workdir}")
        if not isinstance(saved.get("model"), dict):
            raise CheckpointError(f"{where}: its config has no model settings "
                                  f"(not a pretraining checkpoint?)")
        model_config = ModelConfig.from_config(saved["model"])
        bert = state.get("params", {}).get("bert") if isinstance(state, dict) else None
        if bert is None:
            raise CheckpointError(f"{where}: holds no params/bert (not a pretraining "
                                  f"checkpoint?)")
        tokenizer = load_tokenizer(os.path.join(workdir, "tokenizer"))
        source = f"{os.path.abspath(workdir)}@{step}"
        # A live run may be past it by now: say which checkpoint this is.
        metrics.console(f"init_from={workdir}: its checkpoint at step {step}")
        pretrain_seed = int(saved.get("seed", 0))
    elif config.init_from_hf:
        from models.hf_import import from_pretrained

        model_config, params, directory = from_pretrained(config.init_from_hf, with_directory=True)
        bert = params["bert"]
        tokenizer = load_tokenizer(directory)
        source = f"hf:{config.init_from_hf}"
        pretrain_seed = 0
    else:
        raise ValueError("set --config.init_from=PRETRAIN_WORKDIR or --config.init_from_hf=NAME")
    model_config, bert = fine_tuning_model(model_config, bert, config)
    if config.max_seq_length > model_config.max_position_embeddings:
        raise ValueError(
            f"max_seq_length={config.max_seq_length} exceeds the model's "
            f"max_position_embeddings={model_config.max_position_embeddings} ({source})")
    ids = input_pipeline.tokenizer.vocab_bound(tokenizer)
    if ids != model_config.vocab_size:
        raise CheckpointError(f"{source}: the tokenizer has ids 0..{ids - 1} but the model "
                              f"vocabulary has {model_config.vocab_size}")
    check_params_fit(bert, model_config, source)
    if config.insert_talking_heads:
        init = config.insert_th_init
        model_config, bert = with_talking_heads_inserted(model_config, bert, source, init)
        where = "at identity" if init == "identity" else f"with {init} mixing"
        source = f"talking heads inserted {where}: {source}"  # ends PATH@STEP
    if config.init == "scratch":
        # The architecture and tokenizer only: each run initialises every weight itself.
        bert, source = None, results.SCRATCH_START + source
        return Pretrained(model_config, bert, tokenizer, source, init_stream=pretrain_seed)
    return Pretrained(model_config, bert, tokenizer, source)


def fine_tuning_model(model_config: ModelConfig, bert: dict[str, Any], config
                      ) -> tuple[ModelConfig, dict[str, Any]]:
    """The pretrained architecture with the fine-tuning's dropout and layout (scan_layers
    None: the source's), and its encoder's weights in that layout."""
    model_config = model_config.replace(
        dropout_rate=config.dropout_rate,
        attention_dropout_rate=0.0 if model_config.attention_impl == "fused"
        else config.attention_dropout_rate,
    )
    if config.get("scan_layers") is not None:  # fine-tune in another layout than the source's
        model_config = model_config.replace(scan_layers=bool(config.scan_layers))
    return model_config, layout.to_layout(bert, model_config.scan_layers)


def talking_heads_inserted_config(model_config: ModelConfig, source: str,
                                  init: str = "identity") -> ModelConfig:
    """The architecture insert_talking_heads fine-tunes: the multi-head checkpoint's, as
    talking heads (what a table costs such a row at, not its checkpoint's)."""
    if init not in TH_CHOICES["init"]:  # the talking-heads layer's own inits
        raise ValueError(f"insert_th_init={init!r} is unknown; choose one of "
                         f"{', '.join(TH_CHOICES['init'])}")
    if model_config.attention != "multi_head":
        raise ValueError(f"insert_talking_heads needs a multi_head checkpoint; {source} is "
                         f"{model_config.attention}")
    # Every architecture setting at its default (a multi-head config may carry talking
    # heads settings it never used: dynamic maps would start random), the execution ones
    # (impl, chunk size, dropout noise) as the config has them.
    current = model_config.talking_heads
    execution = registry.variant("talking_heads").execution_fields
    settings = type(current)(init=init, **{name: getattr(current, name) for name in execution})
    return model_config.replace(attention="talking_heads", talking_heads=settings)


def with_talking_heads_inserted(model_config: ModelConfig, bert: dict[str, Any], source: str,
                                init: str = "identity") -> tuple[ModelConfig, dict[str, Any]]:
    """A multi-head encoder as talking heads: P_l and P_w added to every layer.

    init=identity: P_l = P_w = I, which changes neither the logits nor the weights, so
    the new model computes exactly the checkpoint's function (tests/test_eval_glue.py
    checks it); fine-tuning then moves the mixing away from I where that helps.
    fan_in (or truncated_fan_in): the mixing is left out of the returned params, so each
    fine-tuning run draws it with the rest of its fresh weights (the classifier), from
    its own seed. Either way this is the "swap the layer into a trained model" route a
    user takes, as opposed to pretraining talking heads.
    """
    model_config = talking_heads_inserted_config(model_config, source, init)
    if init != "identity":
        return model_config, bert
    eye = np.eye(model_config.num_heads, dtype=np.float32)
    encoder = {name: dict(layer) for name, layer in bert["encoder"].items()}
    for name, layer in encoder.items():
        if "attention" in layer:  # a layer; a pre-LN encoder also holds its final norm
            # Scanned layers hold every layer's matrices stacked: one identity each.
            mixing = (np.broadcast_to(eye, (model_config.num_layers, *eye.shape)).copy()
                      if name == layout.STACKED else eye)
            layer["attention"] = {**layer["attention"], "logits_mixing": mixing,
                                  "weights_mixing": mixing}
    return model_config, {**bert, "encoder": encoder}


def check_params_fit(bert: dict[str, Any], model_config: ModelConfig, source: str) -> None:
    """Every parameter the encoder needs is there with the right shape (pooler optional)."""
    ids = jnp.zeros((1, 2), jnp.int32)
    shapes = jax.eval_shape(lambda: BertModel(model_config).init(jax.random.key(0), ids))
    want = flax.traverse_util.flatten_dict(nn.unbox(shapes)["params"], sep="/")
    have = flax.traverse_util.flatten_dict(bert, sep="/")
    for name, shape in sorted(want.items()):
        if name.startswith("pooler/") and name not in have:
            continue
        if name not in have:
            raise CheckpointError(f"{source}: parameter bert/{name} is missing")
        if tuple(np.shape(have[name])) != tuple(shape.shape):
            raise CheckpointError(
                f"{source}: bert/{name} has shape {tuple(np.shape(have[name]))}, "
                f"the model needs {tuple(shape.shape)} (a different architecture?)"
            )


# -- data -----------------------------------------------------------------------------
def load_task_data(task: glue.GlueTask, config, tokenizer) -> dict[str, dict[str, np.ndarray]]:
    """{split: encoded arrays} for train, the dev splits and whichever test splits exist
    (none when write_test_predictions is off).

    A missing test file is announced (there is then no submission for it); duplicate
    test ids are refused here, before any fine-tuning, since GLUE scores by id.
    """
    data = {}
    for split in task.splits:
        if split.startswith("test") and not config.write_test_predictions:
            continue  # no submission: the test split would only cost its scoring
        where = (str(glue.split_path(task, config.glue_dir, split)) if config.glue_dir
                 else f"hub {task.name}/{split}")
        if (split.startswith("test") and config.glue_dir
                and not glue.split_path(task, config.glue_dir, split).exists()):
            # Test predictions are optional; train and dev are not.
            metrics.console(f"warning: {where} is missing: no GLUE submission for "
                            f"{task.name} {split}")
            continue
        examples = glue.load_split(task, split, config.glue_dir)
        if split.startswith("test"):
            seen: set[str] = set()
            for e in examples:
                if e.guid in seen:
                    raise glue.GlueDataError(f"{where}: id {e.guid!r} appears twice; GLUE "
                                             f"scores a submission by id")
                seen.add(e.guid)
        if split == "train" and config.max_train_examples:
            examples = examples[: config.max_train_examples]
        encoded = glue.encode_examples(tokenizer, examples, config.max_seq_length, task)
        encoded["guids"] = np.asarray([e.guid for e in examples])
        data[split] = encoded
    return data


def missing_test_files(task: glue.GlueTask, config) -> list[str]:
    if not config.glue_dir or not config.write_test_predictions:
        return []
    paths = [glue.split_path(task, config.glue_dir, s) for s in task.test_splits]
    return [str(p) for p in paths if not p.exists()]


# -- what a run needs of its task --------------------------------------------------------
@dataclasses.dataclass(frozen=True)
class Tuning:
    """What one fine-tuning run needs of its task beyond the data: GLUE's classifier
    (glue_tuning) or SQuAD's span head (training/squad_finetune.py); the run, its
    sharding, optimizer, checkpoints and results are the same code for both."""

    task: Any  # .name, .dev_splits, .test_splits, .main_metric (glue.GlueTask, squad.TASK)
    model: Callable[[ModelConfig], nn.Module]
    objective: Any  # training/steps.py: ClassifierObjective, SpanObjective
    predict_step: Callable[[nn.Module, Callable], Callable]  # (model, gather) -> predict
    label_keys: tuple[str, ...]  # the batch's targets besides the model's inputs
    # (split, predictions of its examples, run_dir) -> {metric: value}
    score: Callable[[str, np.ndarray, str], dict[str, float]]
    # RUN_DIR/SPLIT_predictions.npy (GLUE: per-example comparisons of runs, submissions);
    # SQuAD's per-token logits are large and its answers are in predictions.json.
    save_scores: bool = True


def glue_tuning(task: glue.GlueTask, data: dict[str, dict[str, np.ndarray]]) -> Tuning:
    return Tuning(
        task=task, model=lambda cfg: BertForSequenceClassification(cfg, task.num_labels),
        objective=steps.ClassifierObjective(task.is_regression),
        predict_step=lambda model, gather: steps.make_predict_step(
            model, task.is_regression, gather),
        label_keys=("labels",),
        score=lambda split, predictions, run_dir: glue.compute_metrics(
            task, predictions, data[split]["labels"]))


# -- one run ---------------------------------------------------------------------------
# config.length_buckets="auto": batch lengths to choose from, up to max_seq_length. Each
# is one compilation of the train and predict steps; a batch pads to at most 1.5x its
# longest example (SST-2's training sentences: median 10 tokens, so most batches of 32
# fit 48 or 64 of 128).
AUTO_LENGTH_BUCKETS = (16, 24, 32, 48, 64, 96, 128, 192, 256, 384, 512)


def length_buckets(spec: str, max_length: int) -> tuple[int, ...]:
    """config.length_buckets: 'auto' (AUTO_LENGTH_BUCKETS up to max_seq_length), 'none'
    (every batch padded to max_seq_length), or lengths as 'A/B/C'; max_seq_length is
    always the last."""
    spec = str(spec).strip().lower()
    if spec == "none":
        return (max_length,)
    if spec == "auto":
        sizes = [b for b in AUTO_LENGTH_BUCKETS if b < max_length]
    else:
        try:
            sizes = [int(part) for part in spec.split("/") if part.strip()]
        except ValueError:
            raise ValueError(f"length_buckets={spec!r}: auto, none or lengths as "
                             f"A/B/C") from None
        bad = [b for b in sizes if not 0 < b <= max_length]
        if bad:
            raise ValueError(f"length_buckets={spec!r}: {bad[0]} is not in 1.."
                             f"max_seq_length={max_length}")
    return tuple(sorted(set(sizes) | {max_length}))


def batches(arrays: dict[str, np.ndarray], order: np.ndarray, batch_size: int,
            buckets: tuple[int, ...] | None = None, label_keys: tuple[str, ...] = ("labels",)):
    """Global batches of `batch_size` rows (the last padded with weight-0 rows). With
    `buckets`, each batch is cut to the shortest bucket its longest example fits
    (examples are padded on the right, so only padding is cut); the rows of a batch are
    the same either way, so a run stays a pure function of (seed, step)."""
    keys = ("input_ids", "token_type_ids", "attention_mask", *label_keys)
    for start in range(0, len(order), batch_size):
        rows = order[start:start + batch_size]
        pad = batch_size - len(rows)
        batch = {k: arrays[k][np.concatenate([rows, np.zeros(pad, rows.dtype)])] for k in keys}
        batch["weights"] = np.concatenate([np.ones(len(rows)), np.zeros(pad)]).astype(np.float32)
        if "labels" in batch:  # a missing label (test: -1 or NaN) must not reach the loss
            if batch["labels"].dtype.kind == "f":
                batch["labels"] = np.nan_to_num(batch["labels"])
            else:
                batch["labels"] = np.maximum(batch["labels"], 0)
        if buckets is not None:
            longest = int(batch["attention_mask"].sum(axis=1).max())
            width = next(b for b in buckets if b >= longest)
            for k in ("input_ids", "token_type_ids", "attention_mask"):
                batch[k] = batch[k][:, :width]
        yield batch


def on_mesh(batch: dict[str, np.ndarray], mesh, rules) -> dict[str, jax.Array]:
    """A global batch -> sharded arrays; each process contributes only its own rows."""
    rows = input_pipeline.process_rows(len(batch["weights"]), jax.process_index(),
                                       jax.process_count())
    return sharding.host_batch_to_global({k: v[rows] for k, v in batch.items()}, mesh, rules)


# group_by_length: examples are sorted by length within windows of this many batches.
GROUP_WINDOW_BATCHES = 64


def epoch_order(lengths: np.ndarray, seed: int, epoch: int, batch_size: int,
                group_by_length: bool = False) -> np.ndarray:
    """The training examples of one epoch, in batch order: a permutation drawn from
    (seed, epoch). group_by_length (Hugging Face's Trainer has the same option) then
    sorts each window of GROUP_WINDOW_BATCHES batches by length and shuffles the batches
    (the last, partial one stays last), so each batch holds examples of similar length
    and length buckets cut most of their padding; every example is still seen once per
    epoch, and the order is still a function of (seed, epoch)."""
    rng = np.random.default_rng([seed, epoch])
    order = rng.permutation(len(lengths))
    if not group_by_length:
        return order
    window = batch_size * GROUP_WINDOW_BATCHES
    order = np.concatenate([
        chunk[np.argsort(-lengths[chunk], kind="stable")]
        for chunk in np.split(order, range(window, len(order), window))]) if len(order) else order
    full = len(order) // batch_size
    shuffled = rng.permutation(full)
    head = order[:full * batch_size].reshape(full, batch_size)[shuffled].reshape(-1)
    return np.concatenate([head, order[full * batch_size:]])


def predict_split(predict, params, arrays, batch_size: int, mesh, rules,
                  buckets: tuple[int, ...] | None = None,
                  label_keys: tuple[str, ...] = ("labels",)) -> np.ndarray:
    """Scores of every example, in the split's order. With `buckets` the examples are
    scored shortest first (each prediction depends on its own example only), so batches
    carry little padding; per-token scores (B, T, ...) of a shorter bucket are padded
    back to the longest width with the dtype's minimum (SQuAD's span logits)."""
    count = len(arrays["input_ids"])
    order = (np.argsort(arrays["attention_mask"].sum(axis=1), kind="stable")
             if buckets is not None else np.arange(count))
    out = []
    for batch in batches(arrays, order, batch_size, buckets, label_keys):
        real = int(batch["weights"].sum())
        with mesh, nn.logical_axis_rules(rules):
            scores = predict(params, on_mesh(batch, mesh, rules))
        out.append(sharding.to_host(scores)[:real])
    if out and out[0].ndim > 1:
        width = max(o.shape[1] for o in out)
        out = [np.pad(o, [(0, 0), (0, width - o.shape[1])] + [(0, 0)] * (o.ndim - 2),
                      constant_values=np.finfo(o.dtype).min) for o in out]
    scores = np.concatenate(out)
    unsorted = np.empty_like(scores)
    unsorted[order] = scores
    return unsorted


def make_mesh(config, devices=None):
    """The fine-tuning mesh and rules (config.mesh, config.logical_axis_rules): data
    parallel over every device by default; `fsdp` shards a large row's parameters."""
    mesh = sharding.make_mesh(dict(config.mesh), devices)
    rules = sharding.rules_from_config(config.logical_axis_rules)
    divisor = sharding.batch_divisor(mesh, rules)
    for name in ("batch_size", "eval_batch_size"):
        if config[name] % divisor:
            raise ValueError(f"{name}={config[name]} must divide by the batch shards "
                             f"({divisor}) of mesh {dict(mesh.shape)}")
    return mesh, rules


def finetune_run(task: glue.GlueTask | Tuning, pretrained: Pretrained, data,
                 learning_rate: float, seed: int, config, run_dir: str, mesh_and_rules=None,
                 preemption: PreemptionFlag | None = None) -> dict[str, Any]:
    """One (task, lr, seed) run on the mesh, with pretraining's sharded state, optimizer
    builder and train step (training/steps.py; the task's objective: a GLUE task's
    classifier, or a Tuning such as SQuAD's).

    A SIGTERM/SIGINT (`preemption`: eval_glue.py's flag; None: this run's own) at any
    moment, training or evaluating, saves the run's state and raises Stopped; the rerun
    continues from it (after training, only the evaluation is redone)."""
    done = results.RunResult.read(run_dir)
    if done is not None:
        return done.to_json()  # finished earlier: never redone, never overwritten
    if preemption is None:
        with PreemptionFlag() as flag:
            return finetune_run(task, pretrained, data, learning_rate, seed, config, run_dir,
                                mesh_and_rules, flag)
    mesh, rules = mesh_and_rules or make_mesh(config)
    os.makedirs(run_dir, exist_ok=True)
    tuning = task if isinstance(task, Tuning) else glue_tuning(task, data)
    run = compile_run(tuning, pretrained, len(data["train"]["input_ids"]), learning_rate, seed,
                      config, run_dir, mesh, rules, preemption)
    state = restore_or_init_run(run)
    # A line per logged step, as train.py's: fine-tuning a large task takes minutes.
    state.progress = metrics.Progress(
        run.total_steps, state.start, f"{run.task.name} lr={learning_rate:g} seed={seed}: ",
        examples_per_step=config.batch_size)
    writer = metrics.MetricWriter(run_dir)
    try:
        train_epochs(run, state, data["train"], writer)
        dev = evaluate_run(run, state, data, writer)
        run.stop_if_requested(state, "writing the result")
    finally:
        writer.close()
        run.checkpointer.close()
    return finish_run(run, state, dev)


@dataclasses.dataclass(frozen=True)
class FineTuneRun:
    """What one (task, lr, seed) run reads: its recipe, compiled steps, files and flag."""

    tuning: Tuning
    pretrained: Pretrained
    learning_rate: float
    seed: int
    config: Any
    run_dir: str
    mesh: Any
    rules: Any
    total_steps: int
    buckets: tuple[int, ...]
    sharded: sharding.ShardedState
    init_key: Any
    train_step: Any
    predict: Any
    checkpointer: checkpoints.Checkpointer
    preemption: PreemptionFlag

    @property
    def task(self) -> Any:
        return self.tuning.task

    def stop_if_requested(self, state: FineTuneState, during: str) -> None:
        """Saves this step's state (once) and stops, when a signal asked for it."""
        if not self.preemption.requested():
            return
        if self.checkpointer.latest_step() != state.step:
            self.checkpointer.save(state.step, state.train_state, {
                "task": self.task.name, "lr": self.learning_rate, "seed": self.seed,
                "final_train_loss": state.losses[-1] if state.losses else None})
        raise Stopped(f"{self.preemption.signal_name}: saved {self.task.name} "
                      f"lr={self.learning_rate:g} seed={self.seed} at step {state.step} "
                      f"({during}); rerun the same command to continue")


@dataclasses.dataclass
class FineTuneState:
    """What a run changes: its train state, the step reached, the logged losses."""

    train_state: Any
    start: int  # the step a preempted run resumes from (0: a fresh run)
    step: int = 0
    losses: list[float] = dataclasses.field(default_factory=list)
    progress: metrics.Progress | None = None  # the console's progress lines


def compile_run(tuning: Tuning, pretrained: Pretrained, num_train: int, learning_rate: float,
                seed: int, config, run_dir: str, mesh, rules,
                preemption: PreemptionFlag) -> FineTuneRun:
    model = tuning.model(pretrained.model_config)
    steps_per_epoch = math.ceil(num_train / config.batch_size)
    total_steps = max(int(math.ceil(steps_per_epoch * config.num_epochs)), 1)
    # BERT's fine-tuning recipe through pretraining's optimizer builder: AdamW, clipping
    # at 1.0, linear warm-up over warmup_fraction of the steps, then linear decay to 0.
    optimizer, schedule = make_optimizer(ml_collections.ConfigDict(dict(
        name="adamw", learning_rate=learning_rate, schedule="linear",
        warmup_steps=int(config.warmup_fraction * total_steps), b1=0.9, b2=0.999, eps=1e-6,
        weight_decay=config.weight_decay, grad_clip_norm=1.0)), total_steps)

    def init_state(rng):
        ids = jnp.zeros((1, config.max_seq_length), jnp.int32)
        params = model.init(rng, ids, ids, ids)["params"]
        return {"step": jnp.zeros((), jnp.int32), "params": params,
                "opt_state": optimizer.init(params)}

    init_key = jax.random.key(seed)
    if pretrained.bert_params is None:  # init=scratch: one stream per pretraining seed
        init_key = jax.random.fold_in(init_key, pretrained.init_stream)
    sharded = sharding.ShardedState(init_state, mesh, rules, init_key)
    # Dropout keys fold the step into key(seed + 1), apart from the init key above.
    train_step = sharded.jit_step(steps.make_train_step(
        model, optimizer, schedule, seed + 1, prepare_params=sharded.gather,
        objective=tuning.objective,
        dropout_prng=config.get("dropout_prng", steps.DEFAULT_DROPOUT_PRNG)))
    with mesh, nn.logical_axis_rules(rules):
        predict = jax.jit(tuning.predict_step(model, sharded.gather))
    checkpointer = checkpoints.Checkpointer(os.path.join(run_dir, "checkpoints"), keep_last=1)
    return FineTuneRun(tuning, pretrained, learning_rate, seed, config, run_dir, mesh, rules,
                       total_steps, length_buckets(config.length_buckets, config.max_seq_length),
                       sharded, init_key, train_step, predict, checkpointer, preemption)


def restore_or_init_run(run: FineTuneRun) -> FineTuneState:
    """A preempted run left a checkpoint: continue from its step (same batches, same
    dropout keys, since both are functions of (seed, step))."""
    if run.checkpointer.latest_step() is not None:
        train_state, saved, start = run.checkpointer.restore(run.sharded.abstract)
        state = FineTuneState(train_state, start)
        if saved.get("final_train_loss") is not None:  # stopped after its last log step
            state.losses.append(float(saved["final_train_loss"]))
        return state
    with run.mesh, nn.logical_axis_rules(run.rules):
        train_state = run.sharded.init(run.init_key)
    if run.pretrained.bert_params is not None:  # init=scratch keeps the fresh encoder
        train_state["params"] = with_pretrained_encoder(
            train_state["params"], run.pretrained.bert_params, run.sharded.shardings["params"])
    return FineTuneState(train_state, 0)


def train_epochs(run: FineTuneRun, state: FineTuneState, train: dict[str, np.ndarray],
                 writer: metrics.MetricWriter) -> None:
    """Every step to total_steps, skipping (without computing) those a resume has done."""
    config = run.config
    for epoch in range(math.ceil(config.num_epochs)):
        order = epoch_order(train["attention_mask"].sum(axis=1), run.seed, epoch,
                            config.batch_size, config.group_by_length)
        for batch in batches(train, order, config.batch_size, run.buckets,
                             run.tuning.label_keys):
            if state.step >= run.total_steps:
                break
            if state.step < state.start:
                state.step += 1
                continue
            with run.mesh, nn.logical_axis_rules(run.rules):
                state.train_state, step_metrics = run.train_step(
                    state.train_state, on_mesh(batch, run.mesh, run.rules))
            state.step += 1
            if state.step % config.log_every_steps == 0 or state.step == run.total_steps:
                log_train_step(run, state, step_metrics, writer)
            run.stop_if_requested(state, "training")


def log_train_step(run: FineTuneRun, state: FineTuneState, step_metrics: Any,
                   writer: metrics.MetricWriter) -> None:
    m = jax.device_get(step_metrics)
    loss = float(m["loss_sum"]) / max(float(m["weight"]), 1.0)
    if not bool(m["finite"]):
        raise RuntimeError(f"{run.task.name} lr={run.learning_rate} seed={run.seed}: "
                           f"non-finite loss at step {state.step}")
    state.losses.append(loss)
    writer.scalars(state.step, {"train_loss": loss, "learning_rate": float(m["learning_rate"])})
    if state.progress is not None:
        state.progress.log(state.step, {"loss": loss})


def evaluate_run(run: FineTuneRun, state: FineTuneState, data, writer: metrics.MetricWriter
                 ) -> dict[str, dict[str, float]]:
    """Dev scores per split, and test predictions; process 0 keeps every split's scores in
    RUN_DIR/SPLIT_predictions.npy (dev ones too: per-example comparisons of runs)."""
    params, tuning, task = state.train_state["params"], run.tuning, run.task

    def predictions_of(split: str) -> np.ndarray:
        """Every process scores (the batches span them)."""
        scores = predict_split(run.predict, params, data[split], run.config.eval_batch_size,
                               run.mesh, run.rules, run.buckets, tuning.label_keys)
        if jax.process_index() == 0 and tuning.save_scores:
            np.save(os.path.join(run.run_dir, f"{split}_predictions.npy"), scores)
        return scores

    dev = {}
    for split in task.dev_splits:
        run.stop_if_requested(state, f"evaluating {split}")
        dev[split] = tuning.score(split, predictions_of(split), run.run_dir)
        writer.scalars(state.step, {f"{split}/{k}": v for k, v in dev[split].items()})
    for split in task.test_splits:
        run.stop_if_requested(state, f"predicting {split}")
        if split in data:
            predictions_of(split)
    return dev


def finish_run(run: FineTuneRun, state: FineTuneState, dev: dict[str, dict[str, float]]
               ) -> dict[str, Any]:
    task = run.task
    if run.config.save_model != "none":  # before result.json: a finished run has its model
        save_fine_tuned(run.run_dir, state.step, state.train_state["params"], run.pretrained,
                        task, run.learning_rate, run.seed)
    result = results.RunResult(
        task=task.name, learning_rate=run.learning_rate, seed=run.seed, steps=state.step,
        dev=dev, main=float(np.mean([m[task.main_metric] for m in dev.values()])),
        final_train_loss=state.losses[-1] if state.losses else None)
    if jax.process_index() == 0:
        result.write(run.run_dir)
        # Finished: the result is final, the mid-run checkpoint is no longer needed.
        shutil.rmtree(os.path.join(run.run_dir, "checkpoints"), ignore_errors=True)
    return result.to_json()


def save_fine_tuned(run_dir: str, step: int, params: Any, pretrained: Pretrained,
                    task: Any, learning_rate: float, seed: int) -> None:
    """RUN_DIR/model/: the fine-tuned parameters and what an export needs to read them (the
    model's config, the task); a verified checkpoint as pretraining's."""
    directory = os.path.join(run_dir, FINE_TUNED_MODEL)
    # Left by a run killed before its result.json: the rerun trained the same parameters.
    if jax.process_index() == 0:
        shutil.rmtree(directory, ignore_errors=True)
    if jax.process_count() > 1:
        from jax.experimental import multihost_utils

        multihost_utils.sync_global_devices(f"{directory} cleared")
    checkpointer = checkpoints.Checkpointer(directory, keep_last=1)
    try:
        checkpointer.save(step, {"params": params}, {
            "model": pretrained.model_config.to_dict(), "task": task.name,
            "learning_rate": learning_rate, "seed": seed, "init": pretrained.source})
    finally:
        checkpointer.close()


def prune_fine_tuned(task: glue.GlueTask, summary: results.TaskSummary, config,
                     workdir: str) -> None:
    """save_model=best: removes the fine-tuned models of every run but the best one."""
    best = results.glue_run_name(summary.best_learning_rate, summary.best_run)
    for lr in config.learning_rates:
        for seed in range(config.num_seeds):
            name = results.glue_run_name(lr, seed)
            if name != best:
                shutil.rmtree(os.path.join(workdir, task.name, name, FINE_TUNED_MODEL),
                              ignore_errors=True)
    if not os.path.isdir(os.path.join(workdir, task.name, best, FINE_TUNED_MODEL)):
        metrics.console(f"warning: the best {task.name} run ({best}) has no saved model "
                        f"(fine-tuned with save_model=none, or pruned when it was not the "
                        f"best); scripts/export_hf.py cannot export it")


def with_pretrained_encoder(params: dict[str, Any], bert: dict[str, Any],
                            shardings: dict[str, Any]) -> dict[str, Any]:
    """Fresh params with the pretrained encoder in, laid out as `shardings`; the
    classifier (and a pooler the checkpoint lacks) stay as initialised."""
    encoder = flax.traverse_util.flatten_dict({"bert": bert}, sep="/")
    return sharding.with_values(params, encoder, shardings)


# -- a task and the suite --------------------------------------------------------------
def run_task(task: glue.GlueTask, pretrained: Pretrained, config, workdir: str,
             mesh_and_rules=None, preemption: PreemptionFlag | None = None
             ) -> results.TaskSummary:
    data = load_task_data(task, config, pretrained.tokenizer)
    runs = []
    total = len(config.learning_rates) * config.num_seeds
    for lr in config.learning_rates:
        for seed in range(config.num_seeds):
            run_dir = os.path.join(workdir, task.name, results.glue_run_name(lr, seed))
            result = finetune_run(task, pretrained, data, float(lr), seed, config, run_dir,
                                  mesh_and_rules, preemption)
            runs.append(result)
            metrics.console(f"{task.name} [{len(runs)}/{total}] lr={lr:g} seed={seed}: "
                            + " ".join(f"{s}:{glue.main_score(task, m):.2f}"
                                       for s, m in result["dev"].items()))
    majority = {glue.score_name(task, split): glue.majority_baseline(
        task, data["train"]["labels"], data[split]["labels"]) for split in task.dev_splits}
    summary = results.TaskSummary.from_runs(task, [results.RunResult.from_json(r) for r in runs],
                                            majority)
    if config.save_model == "best" and jax.process_index() == 0:
        prune_fine_tuned(task, summary, config, workdir)
    if config.write_test_predictions:
        best_dir = os.path.join(
            workdir, task.name, results.glue_run_name(summary.best_learning_rate,
                                                      summary.best_run))
        for split in task.test_splits:
            path = os.path.join(best_dir, f"{split}_predictions.npy")
            if split not in data:
                continue  # no test file: announced when the data was read
            if not os.path.exists(path):
                metrics.console(f"warning: {path} is missing: no GLUE submission for "
                                f"{task.name} {split} (delete its result.json to redo the run)")
                continue
            glue.write_submission(task, split, list(data[split]["guids"]),
                                  read_predictions(path), os.path.join(workdir, "submission"))
    return summary


def read_predictions(path: str) -> np.ndarray:
    """A run's saved test predictions; a damaged file is one error naming it."""
    try:
        return np.load(path)
    except (OSError, ValueError, EOFError) as e:
        raise results.ResultsError(f"{path}: cannot be read ({type(e).__name__}: {e}); delete "
                                   f"the run's result.json to redo it") from None


def run(config: ml_collections.ConfigDict, workdir: str, devices=None) -> dict[str, Any]:
    """Every task of config.task on the mesh of config.mesh (over `devices`, default all)."""
    names = list(glue.TASKS) if str(config.task).lower() == "all" else str(config.task).split("/")
    unknown = [name for name in names if not glue.is_task(name)]
    if unknown:
        raise ValueError(f"task={config.task}: unknown GLUE task {unknown[0]!r}; use all or a "
                         f"list of {', '.join(glue.task_keys())} joined by '/'")
    tasks = [glue.get_task(name) for name in names]
    length_buckets(config.length_buckets, config.max_seq_length)  # a bad spec: fail first
    if config.save_model not in SAVE_MODEL:
        raise ValueError(f"save_model={config.save_model!r} is unknown; choose one of "
                         f"{', '.join(SAVE_MODEL)}")
    mesh_and_rules = make_mesh(config, devices)  # bad mesh or batch sizes: fail first
    # A second eval_glue.py on a live workdir is refused; a signal at any moment of the
    # run (reading data, fine-tuning, evaluating, writing) stops it resumably.
    with workdir_lib.started(workdir), WorkdirLock(workdir), PreemptionFlag() as preemption:
        return _run(config, workdir, tasks, mesh_and_rules, preemption)


def _run(config: ml_collections.ConfigDict, workdir: str, tasks: list,
         mesh_and_rules, preemption: PreemptionFlag) -> dict[str, Any]:
    pretrained = load_pretrained(config)
    check_workdir_identity(workdir, pretrained, config)
    tokenizer_dir = os.path.join(workdir, TOKENIZER)
    if jax.process_index() == 0 and not os.path.exists(os.path.join(tokenizer_dir,
                                                                    "tokenizer.json")):
        input_pipeline.save_tokenizer(pretrained.tokenizer, tokenizer_dir)
    # Tasks fine-tuned (or skipped) by earlier invocations in this workdir stay in the table.
    suite = results.GlueResults.continued(pretrained.source, results.GlueResults.read(workdir))
    for task in tasks:
        if preemption.requested():
            raise Stopped(f"{preemption.signal_name}: stopped before {task.name} (finished "
                          f"runs are saved); rerun the same command to continue")
        try:
            summary = run_task(task, pretrained, config, workdir, mesh_and_rules, preemption)
        except glue.GlueDataError as e:
            if len(tasks) == 1:
                raise
            metrics.console(f"skipping {task.name}: {e}")
            suite.record(task.name, skipped=str(e))
            continue
        missing = missing_test_files(task, config)
        suite.record(task.name, summary,
                     no_submission="; ".join(f"{p} is missing" for p in missing))
    label = f"{pretrained.model_config.attention} ({pretrained.model_config.size})"
    suite.write(workdir)
    metrics.console(report.write_markdown(workdir, suite, label))
    metrics.console(where_results_went(workdir, suite, config,
                                       pretrained.model_config.attention))
    return suite.to_json()


def where_results_went(workdir: str, suite: results.GlueResults, config,
                       attention: str = "multi_head") -> str:
    """The line after the table: the files written, and how to export a model (of a
    variant transformers can compute)."""
    workdir = os.path.normpath(workdir)
    line = f"wrote {os.path.join(workdir, results.GLUE_RESULTS)} and " \
           f"{os.path.join(workdir, results.GLUE_MARKDOWN)}"
    submission = os.path.join(workdir, "submission")
    if os.path.isdir(submission):
        line += f"; GLUE submission files in {submission}/"
    if config.save_model != "none" and suite.tasks and attention in EXPORTABLE_ATTENTION:
        task = next(iter(suite.tasks))
        line += (f"; export a fine-tuned model: python scripts/export_hf.py --workdir "
                 f"{workdir} --task {glue.get_task(task).name.lower().replace('-', '')} "
                 f"--out {workdir}_{task}_hf")
    return line


def check_workdir_identity(workdir: str, pretrained: Pretrained, config) -> None:
    """A GLUE workdir belongs to one pretrained model and one protocol."""
    model = pretrained.model_config.to_dict()
    if not model["scan_layers"]:  # unrolled, as every workdir written before the field
        del model["scan_layers"]
    identity = {
        "init": pretrained.source,
        "model": model,
        "max_seq_length": config.max_seq_length, "batch_size": config.batch_size,
        "num_epochs": config.num_epochs, "max_train_examples": config.max_train_examples,
    }
    if config.get("group_by_length"):  # only when set: older workdirs keep their identity
        identity["group_by_length"] = True
    # Only when not threefry (threefry_gpu_kernel draws its bits): older workdirs keep
    # their identity. An unknown one: a ValueError naming the field, before anything runs.
    dropout_prng = steps.dropout_prng_identity(config.get("dropout_prng"))
    if dropout_prng != steps.DEFAULT_DROPOUT_PRNG:
        identity["dropout_prng"] = dropout_prng
    for window in ("doc_stride", "max_query_length"):  # SQuAD's windows
        if window in config:
            identity[window] = config[window]
    path = os.path.join(workdir, "glue_identity.json")
    if os.path.exists(path):
        saved = results.read_json(path)  # a damaged one: ResultsError naming it
        if not isinstance(saved, dict):
            raise ValueError(f"{path}: holds no JSON object; use a new --workdir")
        saved_json = json.dumps(saved, sort_keys=True, default=str)
        if saved_json != json.dumps(identity, sort_keys=True, default=str):
            changed = sorted(k for k in set(identity) | set(saved) if json.dumps(
                saved.get(k), default=str) != json.dumps(identity.get(k), default=str))
            raise ValueError(
                f"{workdir} holds GLUE runs of a different setup ({', '.join(changed)} "
                f"changed); use a new --workdir"
            )
        return
    write_json_atomic(path, json.loads(json.dumps(identity, default=str)))
