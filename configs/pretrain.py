"""MLM pretraining config.

  python train.py --config configs/pretrain.py --workdir /tmp/bert_mini
  python train.py --config configs/pretrain.py:size=mini,attention=talking_heads,steps=2000 \
      --config.data.corpus=../shared/data/corpus --workdir runs/th_mini

`arg` takes the model keys of configs/model.py (size, attention, heads,
key_size, row, ...) plus the short keys in PRETRAIN_ARGS; any field can also be
set with --config.FIELD=VALUE. The defaults are a small run that works offline
(the Python standard library's own documentation as the corpus) and shows the
MLM loss falling within minutes on a laptop CPU; the papers' runs set the size,
corpus, steps and batch.
"""

from __future__ import annotations

import ml_collections

from configs import model as model_configs

# Short arg -> config field.
PRETRAIN_ARGS = {
    "steps": "num_train_steps",
    "batch": "batch_size",
    "seq_len": "data.max_seq_length",
    "lr": "optimizer.learning_rate",
    "optimizer": "optimizer.name",
    "corpus": "data.corpus",
    "seed": "seed",
    "preds": "data.max_predictions_per_seq",
    "init_from": "init_from",
    "dropout_prng": "dropout_prng",
}


def get_config(arg: str | None = None) -> ml_collections.ConfigDict:
    args = model_configs.parse_arg(arg)
    model_args = model_configs.split_args(args, set(PRETRAIN_ARGS))

    config = ml_collections.ConfigDict()
    config.seed = 0  # drives init, data order, masking and dropout
    # The PRNG of the dropout masks: threefry | threefry_gpu_kernel | rbg | unsafe_rbg
    # (training/steps.py). Part of the run: a resume with another is refused. threefry by
    # measurement (docs/PERFORMANCE.md (i), BERT-base 8x128): rbg and unsafe_rbg step no
    # faster on CPU (0.98x, 0.99x paired) nor compile consistently faster, and only
    # threefry draws the same masks on every backend. On GPU choose threefry_gpu_kernel:
    # threefry's bits (it resumes threefry runs), a 28% smaller program, compiled in 21%
    # and 61% less time at batch 8 and 64 on an H200 (one compile each); not the default
    # while its memory cost on GPU (JAX's flag warns of one) is unmeasured.
    config.dropout_prng = "threefry"
    # Warm start (training/warm_start.py): a pretraining workdir or a Hugging Face BERT (hub
    # id or directory). A new run takes its architecture (model.* settings other than
    # dropout, dtype, remat and the attention implementation are not used), tokenizer and
    # weights, with a fresh optimizer and schedule; BERT's phase 2 is phase 1's workdir
    # at seq_len=512 (README). None: random init.
    config.init_from = ml_collections.config_dict.placeholder(str)
    config.init_from_step = ml_collections.config_dict.placeholder(int)  # None: the newest

    config.model = model_configs.model_defaults()
    model_configs.apply_size(config.model, "mini")
    model_configs.apply_model_args(config.model, model_args)

    config.data = data = ml_collections.ConfigDict()
    # None: the installed Python standard library's docstrings (offline, English).
    # 'hf:NAME[:CONFIG[:SPLIT]]': a Hugging Face hub dataset, e.g.
    # hf:Salesforce/wikitext:wikitext-103-raw-v1:train. Otherwise: files, dirs or
    # globs, comma separated (Project Gutenberg boilerplate is stripped).
    data.corpus = ml_collections.config_dict.placeholder(str)
    data.text_column = "text"  # column of a hub dataset holding the text
    # Encoding of local text files: utf-8 (a BOM is dropped) | latin-1, cp1252, ... (any
    # Python codec). Part of the corpus identity: a resume with another one is refused.
    data.encoding = "utf-8"
    data.max_corpus_chars = ml_collections.config_dict.placeholder(int)  # cap; None = all
    # An existing vocab.txt / tokenizer.json; None trains WordPiece on the corpus.
    data.tokenizer = ml_collections.config_dict.placeholder(str)
    data.vocab_size = 8192  # WordPiece vocabulary size when training the tokenizer
    # Share of the corpus (evenly spread chunks) the WordPiece trainer reads; 1.0 = all.
    # 0.25 trains ~3x faster on a large corpus for ~0.6% more tokens (docs/INGEST.md).
    data.tokenizer_sample = 1.0
    data.lowercase = True  # uncased WordPiece, as bert-base-uncased
    data.max_seq_length = 128  # tokens per packed sequence, [CLS] and [SEP] included
    # Warm starts only: a max_seq_length beyond the source's positions adds the missing
    # position embeddings (initialised as BERT's, with a warning) instead of an error.
    data.extend_positions = False
    data.sentence_pairs = False  # [CLS] A [SEP] B [SEP] with token types
    data.max_predictions_per_seq = 20  # static number of MLM targets per sequence
    data.mask_prob = 0.15  # fraction of tokens predicted (80% [MASK], 10% random, 10% kept)
    data.whole_word_mask = False  # mask all WordPieces of a word together
    # A regex: only tokens whose vocabulary entry matches it in full are masked (a
    # synthetic task's answers, docs/SYNTHETIC.md); None: any token but the specials.
    data.mask_targets = ml_collections.config_dict.placeholder(str)
    data.mask_token_prob = 0.8  # of the masked tokens: -> [MASK] (BERT: 0.8)
    data.random_token_prob = 0.1  # of the masked tokens: -> a random token (BERT: 0.1)
    # device: masking inside the jitted step (the host only gathers rows; keeps 8
    # accelerators fed) | host: numpy on the host, the reference (input_pipeline/masking.py)
    data.masking = "device"
    data.eval_fraction = 0.02  # held-out share of documents for the MLM eval
    data.cache_dir = ml_collections.config_dict.placeholder(str)  # None = WORKDIR/data_cache

    config.batch_size = 32  # global batch (sequences per optimizer step)
    config.grad_accum_steps = 1  # micro-batches per step (batch_size must divide)
    config.num_train_steps = 300  # optimizer steps (the schedule spans these)
    # A resume with another num_train_steps (or peak rate, schedule, warm-up) runs another
    # learning-rate schedule from step 0 on: refused unless this is true (then one warning
    # gives the new rate), e.g. to extend a finished run to more steps.
    config.extend_schedule = False
    # End this invocation at this step (checkpointed); rerun to continue. None = run to the end.
    config.stop_after_steps = ml_collections.config_dict.placeholder(int)

    config.optimizer = opt = ml_collections.ConfigDict()
    # adamw (optax/Hugging Face: bias-corrected) | bert_adamw (google-research/bert's
    # AdamWeightDecayOptimizer: no bias correction; the papers' runs) | lamb (trust ratio on
    # the decayed weights only). See training/optimizer.py.
    opt.name = "adamw"
    opt.learning_rate = 5e-4  # peak learning rate
    # linear (Hugging Face: warmup, then decay to 0 over the steps after it) | bert_linear
    # (google-research/bert: decay to 0 over all steps, warmup in its place) | cosine | constant
    opt.schedule = "linear"
    opt.warmup_steps = 30  # linear warmup from 0
    opt.b1 = 0.9
    opt.b2 = 0.999
    opt.eps = 1e-6
    opt.weight_decay = 0.01  # not applied to biases and LayerNorm
    opt.grad_clip_norm = 1.0  # global-norm clipping; 0 disables

    # Mesh axes sizes; -1 takes the remaining devices. (data, fsdp, tensor).
    config.mesh = ml_collections.ConfigDict({"data": -1, "fsdp": 1, "tensor": 1})
    # Logical axis -> mesh axes; empty uses training/sharding.py's DEFAULT_RULES.
    config.logical_axis_rules = ()

    config.log_every_steps = 10  # console + TensorBoard train metrics
    config.eval_every_steps = 100  # held-out MLM eval; also at the last step
    config.eval_batches = 8  # batches in each eval (fixed masking)
    config.checkpoint_every_steps = 100  # also at the last step
    config.keep_checkpoints = 2  # last K kept, plus the best by eval loss
    config.nonfinite = "error"  # error: stop naming the step | skip: drop that update
    config.peak_flops_per_device = ml_collections.config_dict.placeholder(float)  # None: look up
    # Compiled programs kept across processes (common/compile_cache.py); never part of a run.
    config.jax_cache = "auto"  # auto: $JAX_COMPILATION_CACHE_DIR or ~/.cache/... | none | DIR

    for key, value in args.items():
        if key in PRETRAIN_ARGS:
            model_configs.set_field(config, PRETRAIN_ARGS[key], value)
    return config
