"""Builders shared by the test files: tiny models, corpora, pretraining runs, GLUE folders.

Each builder lives here once and is imported by name (`from helpers import ...`); test
files never import each other. The environment (8 fake CPU devices, fp32 matmuls) and
the pytest fixtures are in conftest.py.

- Models:      tiny_model_config, ATTENTION_VARIANTS (every registered variant),
               shipped_variants, random_batch, init_params
- Corpora:     ENGLISH_SENTENCES, write_one_file_corpus, write_multi_file_corpus
- Pretraining: RUN_SENTENCES, write_run_corpus, tiny_run_args, tiny_run_config,
               final_params; run_script (python scripts/NAME)
- GLUE:        SST2_POSITIVE/NEGATIVE/FILLER, write_sst2 (a learnable SST-2 folder);
               OFFICIAL_GLUE_FILES, write_glue_file, write_official_glue_dir (every
               task's files exactly as the official download lays them out)
- Sharding:    sharding_config, mlm_batch, run_mlm_steps, one_device_mlm_run (the same
               steps on a mesh of the 8 fake devices and on one device)
- SQuAD:       SQUAD_NAMES/SQUAD_WORDS/SQUAD_FILLER, squad_articles (a learnable rule: the answer is
               the word after "is"), write_squad_dir (train-v1.1.json, dev-v1.1.json)
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np

import attention
from attention.talking_heads import TalkingHeadsConfig
from configs import pretrain
from configs.overrides import apply_overrides
from models import ModelConfig
from training import results
from training.checkpoint_reader import restore_run
from training.metrics import MetricWriter

REPO = Path(__file__).resolve().parents[1]

# ---------------------------------------------------------------------------------------
# Models
# ---------------------------------------------------------------------------------------


def tiny_model_config(**overrides) -> ModelConfig:
    """A 2-layer, width-32 BERT ModelConfig; talking_heads fields go in
    `talking_heads=dict(...)`."""
    fields = dict(
        vocab_size=97, num_layers=2, hidden_size=32, num_heads=4, mlp_dim=64,
        max_position_embeddings=64, dropout_rate=0.0, attention_dropout_rate=0.0,
        size="test", sparse_final_layer=False,  # dense unless a test asks
    )
    th = overrides.pop("talking_heads", {})
    fields.update(overrides)
    return ModelConfig(**fields, talking_heads=TalkingHeadsConfig(**th))


# Every attention code path, as tiny_model_config overrides.
ATTENTION_VARIANTS = {
    "multi_head": {},
    "multi_head_large_key": {"key_size": 24},
    "multi_head_fixed_head": {"key_size": 16, "value_size": 16},
    "multi_head_fused": {"attention_impl": "fused", "key_size": 12},
    "talking_heads": {"attention": "talking_heads"},
    "talking_heads_hk_hv": {
        "attention": "talking_heads", "key_size": 16,
        "talking_heads": {"num_logit_heads": 6, "num_value_heads": 2},
    },
    "talking_heads_logits_only": {"attention": "talking_heads",
                                  "talking_heads": {"projections": "logits"}},
    "talking_heads_weights_only": {"attention": "talking_heads",
                                   "talking_heads": {"projections": "weights"}},
    "talking_heads_chunked": {"attention": "talking_heads",
                              "talking_heads": {"impl": "chunked", "query_chunk_size": 5}},
    # every dynamic projection, at a scale where they matter (the default 1e-2 barely does)
    "talking_heads_dynamic": {"attention": "talking_heads", "talking_heads": {
        "dynamic_projections": "x2l+m2l+x2w+m2w", "dynamic_init_scale": 1.0}},
    "general_bilinear": {"attention": "general_bilinear", "num_heads": 3},
}
# A registered variant without an entry above (one added since, or a plug-in from
# ATTENTION_PLUGINS) still runs every test over ATTENTION_VARIANTS, with its defaults.
ATTENTION_VARIANTS.update({
    name: {"attention": name} for name in attention.names()
    if name not in {over.get("attention", "multi_head") for over in ATTENTION_VARIANTS.values()}})


def shipped_variants() -> tuple[str, ...]:
    """The registered variants defined in attention/ (plug-ins left out), sorted."""
    return tuple(name for name in attention.names() if attention.registry.variant(name).shipped)


def random_batch(key, batch=3, length=12, vocab=97, pad_from=None):
    """(input ids, token types, attention mask); padded from position `pad_from` on."""
    ids = jax.random.randint(key, (batch, length), 1, vocab)
    mask = jnp.ones((batch, length), jnp.int32)
    if pad_from is not None:
        mask = mask.at[:, pad_from:].set(0)
    return ids, jnp.zeros_like(ids), mask


def init_params(module, *args, seed=0):
    """A module's unboxed parameters."""
    variables = module.init(jax.random.key(seed), *args)
    return nn.unbox(variables)["params"]


# ---------------------------------------------------------------------------------------
# Corpora for the input pipeline
# ---------------------------------------------------------------------------------------

ENGLISH_SENTENCES = [
    "The quick brown fox jumps over the lazy dog.",
    "A journey of a thousand miles begins with a single step.",
    "All that glitters is not gold, and not all those who wander are lost.",
    "The function returns a list of the items in the order they were added.",
    "It was the best of times, it was the worst of times.",
    "Call me Ishmael. Some years ago I went to sea to see the watery part of the world.",
]


def write_one_file_corpus(directory: Path, num_docs: int = 40, seed: int = 0) -> Path:
    """DIRECTORY/corpus.txt in BERT's format: a sentence per line, a blank line between
    documents of 6 sentences."""
    directory.mkdir(parents=True, exist_ok=True)
    rng = np.random.default_rng(seed)
    docs = ["\n".join(ENGLISH_SENTENCES[int(i)]
                      for i in rng.integers(0, len(ENGLISH_SENTENCES), 6))
            for _ in range(num_docs)]
    path = directory / "corpus.txt"
    path.write_text("\n\n".join(docs) + "\n")
    return path


def write_multi_file_corpus(directory: Path, num_files: int = 3,
                            docs_per_file: int = 4) -> list[Path]:
    """DIRECTORY/part{0,1,..}.txt in BERT's format, documents of 2 to 8 sentences."""
    directory.mkdir(parents=True, exist_ok=True)
    rng = np.random.default_rng(0)
    paths = []
    for f in range(num_files):
        docs = []
        for _ in range(docs_per_file):
            n = int(rng.integers(2, 9))
            docs.append("\n".join(ENGLISH_SENTENCES[int(i)]
                                  for i in rng.integers(0, len(ENGLISH_SENTENCES), n)))
        path = directory / f"part{f}.txt"
        path.write_text("\n\n".join(docs) + "\n")
        paths.append(path)
    return paths


# ---------------------------------------------------------------------------------------
# Tiny pretraining runs (train.py / training.pretrain.train_and_evaluate)
# ---------------------------------------------------------------------------------------

RUN_SENTENCES = [
    "The cat sat on the mat and looked at the garden.",
    "A small dog ran across the green field after the ball.",
    "The old man walked to the market to buy fresh bread.",
    "Children played in the park while their parents talked.",
    "The river flows quietly past the village in the valley.",
    "She opened the window and the cold wind came into the room.",
    "The teacher wrote a long sentence on the black board.",
    "Birds sing in the trees early in the morning.",
]

SST2_POSITIVE = ["good", "great", "lovely", "fine", "happy"]
SST2_NEGATIVE = ["bad", "awful", "sad", "poor", "ugly"]
SST2_FILLER = ["the", "cat", "sat", "on", "mat", "a", "dog", "ran", "in", "park", "old", "man"]


def write_run_corpus(directory, sst2_words: bool = False, squad_words: bool = False) -> str:
    """DIRECTORY/corpus.txt, the tiny runs' English: 120 documents of 6 shuffled
    RUN_SENTENCES. sst2_words (squad_words) appends write_sst2's (squad_articles') words,
    so that a tokenizer trained on it knows them (pretraining before GLUE, SQuAD)."""
    rng = np.random.default_rng(0)
    docs = []
    for _ in range(120):
        docs.append("\n".join(rng.choice(RUN_SENTENCES, size=6)))
    path = os.path.join(directory, "corpus.txt")
    with open(path, "w") as f:
        f.write("\n\n".join(docs) + "\n")
    if sst2_words:
        with open(path, "a") as f:
            f.write("\n\n" + "\n".join(" ".join(SST2_POSITIVE + SST2_NEGATIVE + SST2_FILLER)
                                       for _ in range(50)))
    if squad_words:
        words = SQUAD_NAMES + SQUAD_WORDS + SQUAD_FILLER + [f"place{q}" for q in range(4)] + [
            "what", "is", "the", "of", "people", "walk", "near", "every", "day", ".", "?"]
        with open(path, "a") as f:
            f.write("\n\n" + "\n".join(" ".join(words) for _ in range(50)))
    return path


def tiny_run_args(corpus: str, cache: str, steps: int, **extra) -> list[str]:
    """--config overrides for a one-layer, width-32 run on the tiny corpus (train.py's
    flags; `extra` adds or replaces FIELD=VALUE pairs)."""
    fields = {
        "model.num_layers": 1, "model.hidden_size": 32, "model.num_heads": 4,
        "model.mlp_dim": 64, "model.dropout_rate": 0.0, "model.attention_dropout_rate": 0.0,
        "data.corpus": corpus, "data.cache_dir": cache, "data.vocab_size": 200,
        "data.max_seq_length": 32, "data.max_predictions_per_seq": 5,
        "data.eval_fraction": 0.1, "batch_size": 16, "num_train_steps": steps,
        "optimizer.learning_rate": 3e-3, "optimizer.warmup_steps": 5,
        "log_every_steps": 5, "eval_every_steps": 10, "eval_batches": 2,
        "checkpoint_every_steps": 10,
    }
    fields.update(extra)
    return [f"--config.{k}={v}" for k, v in fields.items()]


def tiny_run_config(corpus: str, cache: str, steps: int, **extra):
    """The pretraining ConfigDict of tiny_run_args (size=micro plus those overrides)."""
    config = pretrain.get_config("size=micro")
    apply_overrides(config, tiny_run_args(corpus, cache, steps, **extra))
    return config


def final_params(workdir: str):
    """(step, params) of a pretraining workdir's latest checkpoint."""
    restored = restore_run(workdir)
    return restored.step, restored.state["params"]


def write_pretraining(study, name: str, rate: float, loss: float | None = None,
                      steps: int = 100, seed: int = 0, at_step: int | None = None,
                      logged: dict[int, float] | None = None,
                      accuracy: float | None = None) -> str:
    """STUDY/NAME as train.py leaves it (configs/pretrain.py's config, the project's own
    record writers): finished with eval loss `loss` (and top-1 `accuracy`); loss=None:
    stopped at a non-finite step 60 with checkpoint 50 (diverged.json); with at_step,
    still running with a checkpoint there and `logged` eval losses in its TensorBoard
    events."""
    workdir = os.path.join(study, name)
    config = tiny_run_config("corpus.txt", "cache", steps=steps,
                             **{"optimizer.learning_rate": rate, "seed": seed})
    os.makedirs(workdir)
    with open(os.path.join(workdir, results.RUN_CONFIG), "w") as f:
        json.dump(config.to_dict(), f)
    if at_step is not None:
        checkpoint = at_step
    elif loss is None:
        checkpoint = 50
        results.Diverged(step=60, seen_at=60).write(workdir)
    else:
        checkpoint = steps
        evaluated = {"eval_loss": loss}
        if accuracy is not None:
            evaluated["eval_accuracy"] = accuracy
        results.FinalMetrics(step=steps, train_loss=6.0, eval=evaluated).write(workdir)
    os.makedirs(os.path.join(workdir, results.CHECKPOINTS, str(checkpoint)))
    if logged:
        writer = MetricWriter(workdir, enabled=True)
        for logged_step, value in logged.items():
            writer.scalars(logged_step, {"eval_loss": value})
        writer.close()
    return workdir


def child_xla_flags(devices: int = 1) -> str:
    """XLA_FLAGS for a process a test starts: conftest's compile-time flags on `devices`
    CPU devices (conftest's 8 fake devices only slow a small run down)."""
    flags = [f for f in os.environ.get("XLA_FLAGS", "").split()
             if not f.startswith("--xla_force_host_platform_device_count")]
    if devices > 1:
        flags.append(f"--xla_force_host_platform_device_count={devices}")
    return " ".join(flags)


def run_script(name: str, args: list[str], timeout: int = 300) -> subprocess.CompletedProcess:
    """python scripts/NAME ARGS from the repository root (one CPU device), output captured."""
    env = dict(os.environ)
    env["XLA_FLAGS"] = child_xla_flags()
    return subprocess.run([sys.executable, os.path.join("scripts", name), *args], cwd=REPO,
                          env=env, capture_output=True, text=True, timeout=timeout)


# ---------------------------------------------------------------------------------------
# GLUE folders
# ---------------------------------------------------------------------------------------


def write_sst2(directory: str, rng: np.random.Generator) -> None:
    """A learnable SST-2 in its layout (400 train, 100 dev, 20 test rows): a sentiment
    word decides the label; the filler is noise."""
    os.makedirs(directory, exist_ok=True)
    for split, size in (("train", 400), ("dev", 100), ("test", 20)):
        lines = ["index\tsentence" if split == "test" else "sentence\tlabel"]
        for i in range(size):
            label = int(rng.integers(2))
            words = list(rng.choice(SST2_FILLER, size=6))
            words.insert(int(rng.integers(7)),
                         rng.choice(SST2_POSITIVE if label else SST2_NEGATIVE))
            text = " ".join(words)
            lines.append(f"{i}\t{text}" if split == "test" else f"{text}\t{label}")
        with open(os.path.join(directory, f"{split}.tsv"), "w") as f:
            f.write("\n".join(lines) + "\n")


STSB_HEADER = "index\tgenre\tfilename\tyear\told_index\tsource1\tsource2\tsentence1\tsentence2"
MNLI_TEXT_HEADER = (
    "index\tpromptID\tpairID\tgenre\tsentence1_binary_parse\tsentence2_binary_parse\t"
    "sentence1_parse\tsentence2_parse\tsentence1\tsentence2"
)


def mnli_row(i: int, a: str, b: str, labels: str = "") -> str:
    """One row of an MNLI file (parses filled in), labels tab-separated."""
    parses = "\t".join(["( x )", "( y )", "(ROOT x)", "(ROOT y)"])
    row = f"{i}\t{1000 + i}\t{1000 + i}e\tfiction\t{parses}\t{a}\t{b}"
    return row + (f"\t{labels}" if labels else "")


# task -> {file name: exact file text}, as the official files (download_glue_data.py) look.
OFFICIAL_GLUE_FILES: dict[str, dict[str, str]] = {
    "CoLA": {
        # No header; columns: source, label, original label ('*' = unacceptable), sentence.
        "train.tsv": "gj04\t1\t\tOur friends won't buy this.\ngj04\t0\t*\tThe more we study.\n",
        # The official dev.tsv has no final newline.
        "dev.tsv": "gj04\t1\t\tThe sailors rode the breeze.",
        "test.tsv": "index\tsentence\n0\tBill whistled past the house.\n1\tThe car honked.\n",
    },
    "SST-2": {
        "train.tsv": "sentence\tlabel\nhide new secretions \t0\ncharming and affecting \t1\n",
        "dev.tsv": "sentence\tlabel\nunflinchingly bleak \t0\n",
        "test.tsv": "index\tsentence\n0\tuneasy mishmash .\n",
    },
    "MRPC": {
        # BOM from the MSRP source; an unbalanced quote that QUOTE_NONE must keep verbatim.
        "train.tsv": "\ufeffQuality\t#1 ID\t#2 ID\t#1 String\t#2 String\n"
        '1\t702876\t702977\t"The witness", he said.\tThe witness.\n'
        "0\t2108705\t2108831\tYucaipa owned it.\tYucaipa bought it.\n",
        "dev.tsv": "\ufeffQuality\t#1 ID\t#2 ID\t#1 String\t#2 String\n"
        '1\t1355540\t1355592\tThe pie business.\t"The pie business.\n',
        "test.tsv": "index\t#1 ID\t#2 ID\t#1 String\t#2 String\n"
        "0\t1089874\t1089925\tPCCW's officer.\tThe officer.\n",
    },
    "STS-B": {
        "train.tsv": f"{STSB_HEADER}\tscore\n"
        "0\tmain-captions\tMSRvid\t2012test\t0001\tnone\tnone\tA plane.\tAn air plane.\t5.000\n"
        "1\tmain-captions\tMSRvid\t2012test\t0004\tnone\tnone\tA man.\tA flute.\t0.250\n",
        "dev.tsv": f"{STSB_HEADER}\tscore\n"
        "0\tmain-captions\tMSRvid\t2012test\t0000\tnone\tnone\tA hat.\tA hard hat.\t3.8\n",
        "test.tsv": f"{STSB_HEADER}\n"
        "0\tmain-captions\tMSRvid\t2012test\t0024\tnone\tnone\tA girl.\tA girl is.\n",
    },
    "QQP": {
        "train.tsv": "id\tqid1\tqid2\tquestion1\tquestion2\tis_duplicate\n"
        "133273\t213221\t213222\tHow is the life?\tHow is life?\t1\n",
        "dev.tsv": "id\tqid1\tqid2\tquestion1\tquestion2\tis_duplicate\n"
        "201359\t303345\t303346\tWhy are people?\tWhy do people?\t0\n",
        "test.tsv": "id\tquestion1\tquestion2\n0\tWhy ask?\tWhy not?\n7\tHow?\tWhat?\n",
    },
    "MNLI": {
        # train: label1 + gold_label; dev: label1..label5 + gold_label; test: no labels.
        "train.tsv": f"{MNLI_TEXT_HEADER}\tlabel1\tgold_label\n"
        + mnli_row(0, "Conceptually cream.", "Product and geography.", "neutral\tneutral")
        + "\n",
        "dev_matched.tsv": f"{MNLI_TEXT_HEADER}\tlabel1\tlabel2\tlabel3\tlabel4\tlabel5"
        "\tgold_label\n"
        + mnli_row(
            0,
            "The new rights.",
            "Everyone likes.",
            "neutral\tentailment\tneutral\tneutral\tneutral\tneutral",
        )
        + "\n",
        "dev_mismatched.tsv": f"{MNLI_TEXT_HEADER}\tlabel1\tlabel2\tlabel3\tlabel4\tlabel5"
        "\tgold_label\n"
        + mnli_row(
            0,
            "Your gift.",
            "Hundreds.",
            "contradiction\tcontradiction\tentailment\tcontradiction\tcontradiction\tcontradiction",
        )
        + "\n",
        "test_matched.tsv": f"{MNLI_TEXT_HEADER}\n"
        + mnli_row(0, "Hierbas.", "Hierbas is.")
        + "\n",
        "test_mismatched.tsv": f"{MNLI_TEXT_HEADER}\n" + mnli_row(0, "What.", "Who.") + "\n",
    },
    "QNLI": {
        "train.tsv": "index\tquestion\tsentence\tlabel\n0\tWhen?\tIn 1990.\tentailment\n",
        "dev.tsv": "index\tquestion\tsentence\tlabel\n0\tWhat?\tAs of that day.\tnot_entailment\n",
        "test.tsv": 'index\tquestion\tsentence\n0\tWho?\tThe Brotherhood "quiescent.\n',
    },
    "RTE": {
        "train.tsv": "index\tsentence1\tsentence2\tlabel\n0\tNo weapons found.\tWeapons found."
        "\tnot_entailment\n1\tA place of sorrow.\tPope is leader.\tentailment\n",
        "dev.tsv": "index\tsentence1\tsentence2\tlabel\n0\tDana Reeve died.\tReeve.\tentailment\n",
        "test.tsv": "index\tsentence1\tsentence2\n0\tMangla was summoned.\tShukla.\n",
    },
    "WNLI": {
        "train.tsv": "index\tsentence1\tsentence2\tlabel\n0\tI stuck a pin.\tIt had a hole.\t1\n",
        "dev.tsv": "index\tsentence1\tsentence2\tlabel\n0\tThe drain is clogged.\tHair.\t0\n",
        "test.tsv": "index\tsentence1\tsentence2\n0\tMaude and Dora.\tHorses ran.\n",
    },
}


def write_glue_file(root: Path, task: str, name: str, text: str | bytes) -> Path:
    """ROOT/TASK/NAME with exactly these bytes (text is written as UTF-8)."""
    path = root / task / name
    path.parent.mkdir(parents=True, exist_ok=True)
    data = text if isinstance(text, bytes) else text.encode("utf-8")
    path.write_bytes(data)
    return path


def write_official_glue_dir(root: Path) -> Path:
    """A GLUE folder holding OFFICIAL_GLUE_FILES: all nine tasks, every split."""
    for task, files in OFFICIAL_GLUE_FILES.items():
        for name, text in files.items():
            write_glue_file(root, task, name, text)
    return root


# ---------------------------------------------------------------------------------------
# SQuAD
# ---------------------------------------------------------------------------------------

SQUAD_NAMES = ["paris", "berlin", "rome", "oslo", "lima", "cairo", "delhi", "tokyo",
               "madrid", "vienna", "prague", "dublin"]
SQUAD_WORDS = ["river", "market", "bridge", "garden", "tower", "harbor", "castle",
               "museum", "station", "library", "temple", "forest"]
SQUAD_FILLER = ["road", "wall", "gate", "shop", "park", "hill"]  # never an answer


def squad_articles(rng: np.random.Generator, num_articles: int, questions_per: int = 3,
                   filler: int = 4, prefix: str = "q") -> list[dict]:
    """Articles in the official layout whose every answer is the word after "is": each
    paragraph one sentence "the placeQ of CITY is WORD ." among up to `filler` sentences
    on either side (no "is", no answer word), and one question on it."""
    def fillers():
        return [f"people walk near the {rng.choice(SQUAD_FILLER)} every day ."
                for _ in range(int(rng.integers(0, filler + 1)))]

    articles = []
    for a in range(num_articles):
        city = SQUAD_NAMES[a % len(SQUAD_NAMES)]
        paragraphs = []
        for q in range(questions_per):
            before = " ".join(fillers())
            answer = str(rng.choice(SQUAD_WORDS))
            sentence = f"the place{q} of {city} is {answer} ."
            context = " ".join(x for x in (before, sentence, " ".join(fillers())) if x)
            start = context.index(" is ") + 4
            paragraphs.append({"context": context, "qas": [{
                "id": f"{prefix}{a}_{q}", "question": f"what is the place{q} of {city} ?",
                "answers": [{"text": answer, "answer_start": start}]}]})
        articles.append({"title": city, "paragraphs": paragraphs})
    return articles


def write_squad_dir(directory, rng: np.random.Generator, train_articles: int = 24,
                    dev_articles: int = 8, filler: int = 4) -> str:
    import json

    os.makedirs(directory, exist_ok=True)
    for name, count, prefix in (("train-v1.1.json", train_articles, "t"),
                                ("dev-v1.1.json", dev_articles, "d")):
        with open(os.path.join(directory, name), "w", encoding="utf-8") as f:
            json.dump({"version": "1.1", "data": squad_articles(rng, count, filler=filler,
                                                                prefix=prefix)}, f)
    return str(directory)


# ---------------------------------------------------------------------------------------
# Sharded MLM steps (a mesh of the 8 fake devices against one device)
# ---------------------------------------------------------------------------------------


def sharding_config(attention: str):
    config = pretrain.get_config(f"size=micro,attention={attention}")
    config.model.update(num_layers=2, hidden_size=32, num_heads=4, mlp_dim=64, vocab_size=64,
                        max_position_embeddings=16, dropout_rate=0.0,
                        attention_dropout_rate=0.0)
    config.data.max_seq_length = 16
    config.data.max_predictions_per_seq = 4
    config.batch_size = 8
    config.num_train_steps = 10
    config.optimizer.warmup_steps = 0
    return config


def mlm_batch(batch: int, length: int, predictions: int, vocab: int) -> dict:
    rng = np.random.default_rng(0)
    mask = np.ones((batch, length), np.int32)
    mask[::2, 12:] = 0
    return {
        "input_ids": rng.integers(5, vocab, (batch, length)).astype(np.int32),
        "token_type_ids": np.zeros((batch, length), np.int32),
        "attention_mask": mask,
        "masked_positions": rng.integers(1, 10, (batch, predictions)).astype(np.int32),
        "masked_ids": rng.integers(5, vocab, (batch, predictions)).astype(np.int32),
        "masked_weights": np.ones((batch, predictions), np.float32),
    }


def run_mlm_steps(config, mesh_spec, devices, num_steps=2, device_masking=False):
    from input_pipeline.device_masking import DeviceMasker
    from input_pipeline.tokenizer import SpecialIds
    from models import BertForMaskedLM
    from training import sharding
    from training.optimizer import make_optimizer
    from training.pretrain import compile_for_mesh

    model = BertForMaskedLM(ModelConfig.from_config(config.model))
    optimizer, schedule = make_optimizer(config.optimizer, config.num_train_steps)
    mesh = sharding.make_mesh(mesh_spec, devices)
    rules = sharding.DEFAULT_RULES
    masker = None
    batch = mlm_batch(8, 16, 4, 64)
    if device_masking:  # unmasked rows; the step masks them from each row's stream
        masker = DeviceMasker(SpecialIds(pad=0, unk=1, cls=2, sep=3, mask=4), 64, 4)
        batch = {k: batch[k] for k in ("input_ids", "token_type_ids", "attention_mask")}
        batch["mask_stream"] = np.stack([np.zeros(8), np.ones(8), np.full(8, 3),
                                         np.arange(8)], axis=1).astype(np.int32)
    compiled = compile_for_mesh(model, optimizer, schedule, config, mesh, rules, masker)
    with mesh:
        state = compiled.init_fn(jax.random.key(0))
    history = []
    for _ in range(num_steps):
        global_batch = sharding.host_batch_to_global(batch, mesh, rules)
        with mesh:
            state, metrics = compiled.train_step(state, global_batch)
        history.append(jax.device_get(metrics))
    return state, history


_ONE_DEVICE_RUNS: dict = {}


def one_device_mlm_run(config, device_masking=False):
    """run_steps on one device, once per (config, masking) in a session: the multi-head
    sharding test and the accumulation test compare against the same one-device run,
    and both device-masking cases against its masking twin; each is trained once."""
    key = (config.to_json(), device_masking)
    if key not in _ONE_DEVICE_RUNS:
        _ONE_DEVICE_RUNS[key] = run_mlm_steps(config, {"data": 1}, jax.devices()[:1],
                                          device_masking=device_masking)
    return _ONE_DEVICE_RUNS[key]
