"""Does a workdir's checkpoint belong to this run? The checks a resume makes before it
trusts a checkpoint: the same architecture, the same token ids, the same learning-rate
schedule (or one extended on purpose)."""

from __future__ import annotations

from typing import Any

import ml_collections

import input_pipeline
from attention import registry
from models import ModelConfig
from models.config import EXECUTION_FIELDS, LEGACY_DEFAULTS
from training import metrics, steps
from training.optimizer import make_optimizer
from training.pretrain_loop import TrainingError


def flatten(tree: dict[str, Any], prefix: str = "") -> dict[str, Any]:
    """{'talking_heads': {'init': ...}} -> {'talking_heads.init': ...}."""
    out: dict[str, Any] = {}
    for key, value in tree.items():
        if isinstance(value, dict):
            out.update(flatten(value, f"{prefix}{key}."))
        else:
            out[f"{prefix}{key}"] = value
    return out


def check_same_architecture(saved: dict[str, Any], current: ModelConfig, path: str) -> None:
    """Refuses a checkpoint whose parameters mean something else (nested settings too).
    A field the saved config lacks was added to the code after the checkpoint was made:
    the checkpoint meant its default."""
    saved_model = flatten(saved.get("model", {}))
    defaults = {**flatten(type(current)().to_dict()), **LEGACY_DEFAULTS}
    ignored = set(EXECUTION_FIELDS)
    # Settings of variants other than the one in use change nothing.
    ignored |= {k for k in defaults if k.split(".")[0] in registry.with_settings()
                and k.split(".")[0] != current.attention}
    differs = {
        k: (saved_model.get(k, defaults.get(k)), v)
        for k, v in flatten(current.to_dict()).items()
        if k not in ignored and saved_model.get(k, defaults.get(k)) != v
    }
    if "scan_layers" in differs:
        old, new = differs["scan_layers"]
        layout = {True: "scanned (stacked layers)", False: "unrolled (a subtree per layer)"}
        raise TrainingError(
            f"{path} holds a checkpoint with {layout[old]} parameters and this config asks "
            f"for {layout[new]}: resume it with scan={str(old).lower()} "
            f"(model.scan_layers), or use a new --workdir (init_from converts a layout)")
    if differs:
        name, (old, new) = next(iter(sorted(differs.items())))
        raise TrainingError(
            f"{path} holds a checkpoint of a different architecture "
            f"(model.{name}: checkpoint {old!r}, config {new!r}); use a new --workdir"
        )


def data_identity(data_config: ml_collections.ConfigDict, tokenizer_dir: str | None
                  ) -> dict[str, str]:
    """What the token ids of a run mean: the corpus and the tokenizer (the local files'
    bytes or a hub dataset's fingerprint, and the vocabulary's hash). Local files also
    give the identity their checkpoints saved before content hashing (sizes and times),
    which check_same_data accepts from such a checkpoint; it is never saved."""
    source = input_pipeline.corpus.parse_corpus_spec(
        data_config.corpus, max_chars=data_config.max_corpus_chars,
        text_column=data_config.text_column,
        encoding=data_config.get("encoding", input_pipeline.textfiles.DEFAULT_ENCODING))
    identity = {"corpus": source.describe(), "corpus_identity": source.identity()}
    if hasattr(source, "legacy_identity"):
        identity[LEGACY_CORPUS_IDENTITY] = source.legacy_identity()
    if tokenizer_dir is not None:
        tokenizer = input_pipeline.load_tokenizer(tokenizer_dir)
        identity["tokenizer_hash"] = input_pipeline.tokenizer.tokenizer_hash(tokenizer)
    return identity


LEGACY_CORPUS_IDENTITY = "corpus_legacy_identity"
# What data_identity computes but a checkpoint does not keep.
UNSAVED_IDENTITY_FIELDS = ("tokenizer_dir", LEGACY_CORPUS_IDENTITY)

# config.data fields that decide which token ids the text becomes.
TOKEN_ID_FIELDS = ("tokenizer", "vocab_size", "lowercase", "tokenizer_sample")


def check_same_data(saved: dict[str, Any], identity: dict[str, str],
                    data_config: ml_collections.ConfigDict, path: str) -> None:
    """Refuses to continue a run on other text or other token ids."""
    saved_data = saved.get("data", {})
    for name in TOKEN_ID_FIELDS:
        if name in saved_data and saved_data[name] != data_config[name]:
            raise TrainingError(
                f"{path} was trained with data.{name}={saved_data[name]!r}, not "
                f"{data_config[name]!r}: its token ids would change meaning; use a new "
                f"--workdir")
    saved_identity = saved.get("data_identity")
    if saved_identity is None:
        metrics.console(f"warning: {path} predates data identity checks; resuming unchecked")
        return
    saved_corpus = saved_identity.get("corpus_identity")
    accepted = [identity["corpus_identity"]]
    legacy = identity.get(LEGACY_CORPUS_IDENTITY)
    if legacy is not None:  # local files: a checkpoint may predate content hashing
        accepted.append(legacy)
    if saved_corpus is None or saved_corpus not in accepted:
        # A checkpoint from before content hashing knows its files' sizes and times only.
        by_times = ("" if legacy is None or saved_corpus is None or str(saved_corpus)
                    .startswith(input_pipeline.corpus.CONTENT_IDENTITY)
                    else " (this checkpoint predates content checks: it knows the files' "
                         "sizes and times, so a copy with new times differs too)")
        raise TrainingError(
            f"{path} was trained on another corpus ({saved_identity.get('corpus')}, as it was "
            f"then) than data.corpus={identity['corpus']} is now{by_times}; resume with the "
            f"same unchanged corpus or use a new --workdir")
    if saved_identity.get("tokenizer_hash") != identity.get("tokenizer_hash"):
        raise TrainingError(
            f"{path} was trained with another tokenizer than {identity.get('tokenizer_dir')}; "
            f"resume with the run's own tokenizer/ or use a new --workdir")


def check_same_dropout_prng(saved: dict[str, Any], config: ml_collections.ConfigDict,
                            path: str) -> None:
    """Refuses to continue a run with dropout masks from another PRNG (config.dropout_prng):
    from the resumed step on it would be another run than the one its checkpoints began.
    A checkpoint saved before the field drew them with threefry; threefry_gpu_kernel draws
    threefry's bits (training/steps.py), so the two resume each other."""
    before = saved.get("dropout_prng", steps.DEFAULT_DROPOUT_PRNG)
    now = config.get("dropout_prng", steps.DEFAULT_DROPOUT_PRNG)
    if steps.dropout_prng_identity(before) != steps.dropout_prng_identity(now):
        raise TrainingError(
            f"{path} was trained with dropout_prng={before!r}, not {now!r}: its dropout masks "
            f"would change from the resumed step on; resume with --config.dropout_prng="
            f"{before} or use a new --workdir")


# Fields that define the learning rate at every step: a resume with other values runs
# another schedule from step 0 on (training/optimizer.py).
SCHEDULE_FIELDS = ("num_train_steps", "optimizer.learning_rate", "optimizer.schedule",
                   "optimizer.warmup_steps")


def check_schedule(saved: dict[str, Any], config: ml_collections.ConfigDict, start: int,
                   workdir: str) -> None:
    """A resume that changes the schedule (extending training to more steps, say) must
    say so: refused unless extend_schedule=true, then one warning with the new rate."""
    before, now = flatten(saved), flatten(config.to_dict())
    changed = {k: (before.get(k), now[k]) for k in SCHEDULE_FIELDS
               if k in before and before[k] != now[k]}
    if not changed:
        return
    what = ", ".join(f"{k}={old!r} -> {new!r}" for k, (old, new) in changed.items())
    old_config = ml_collections.ConfigDict(config.to_dict())
    for k, (old, _) in changed.items():
        *parents, field = k.split(".")
        node = old_config
        for parent in parents:
            node = node[parent]
        node[field] = old
    _, old_schedule = make_optimizer(old_config.optimizer, old_config.num_train_steps)
    _, new_schedule = make_optimizer(config.optimizer, config.num_train_steps)
    rates = (f"the learning rate at step {start} becomes {float(new_schedule(start)):.3g} "
             f"(was {float(old_schedule(start)):.3g})")
    if not config.extend_schedule:
        raise TrainingError(
            f"{workdir} was trained on another learning-rate schedule ({what}): {rates} and "
            f"differs from step 0 on; pass --config.extend_schedule=true to continue on the "
            f"new one, or use a new --workdir")
    metrics.console(f"warning: extend_schedule: {what}; {rates}")
