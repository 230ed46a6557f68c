"""Synthetic MLM corpora whose masked tokens can only be recovered by attention that
picks one position among many by its content: the diagnostic task of the low-rank
bottleneck (Bhojanapalli et al. 2020, Theorem 1: a head whose key size is below the
number of positions cannot produce every attention pattern). docs/SYNTHETIC.md has
the recipe and a pilot.

Spec (data.corpus): `synthetic:TASK[:KEY=VALUE,...]`, for example
`synthetic:recall:pairs=16,keys=64,values=16,queries=4,n=20000,seed=0`. Parameters may
also be separated by ':' (`synthetic:recall:pairs=16:keys=64`), which survives comma-
separated arg lists such as a sweep row's `corpus=...`. Left-out parameters take the
defaults in PARAMS; `describe()` spells every one, so equal corpora have equal specs.

Every sequence is one document of one sentence, so it packs into exactly one row
`[CLS] ... [SEP]` (data.sentence_pairs must be False and data.max_seq_length at least
`sequence_length`; the pipeline checks both). Words (each one token of the corpus's own
fixed vocabulary, `vocabulary()`; the pipeline builds the tokenizer from it, no WordPiece):

  recall  k_1 v_1 k_2 v_2 ... k_m v_m query k_q1 a_q1 ... k_qQ a_qQ
          m = pairs distinct keys `k0..k{keys-1}`, each followed by its value, m
          distinct values of `v0..v{values-1}`; then Q = queries distinct keys of the
          list, each followed by its value spelt as an answer token `a{j}` (for `v{j}`).
          Two hops: the answer lies one position after the matching key (the model
          must bring k_q to the answer's position, match it against the keys and read
          the next token: an induction circuit).
  find    x_1 x_2 ... x_m query k0 a_0 k1 a_1 ... k{Q-1} a_{Q-1}
          the list is a random permutation of the keys k0..k{m-1}; the queries are
          k0, k1, ... in this order, and the answer `a{i}` is the place i (0..m-1) of
          the queried key in the list. One hop: the answer's own position says which
          key it asks for, and the answer is readable from the matching key's own
          position (its position embedding); nothing has to be moved first. `keys` and
          `values` do not apply (the keys are k0..k{m-1}).

Sequence lengths with [CLS] and [SEP]: recall 2m + 2Q + 3, find m + 2Q + 3. Chance:
1/m for both (recall's values are distinct, so the list's values alone give no better
guess).
Only the answer tokens `a{j}` are to be predicted: train with
data.mask_targets='a[0-9]+', data.mask_prob=1.0, data.mask_token_prob=1.0,
data.random_token_prob=0.0 and data.max_predictions_per_seq=Q (every answer becomes
[MASK]; nothing else is masked), so the MLM accuracy on the held-out split is the
accuracy on the masked values of held-out sequences; chance is 1/values.

Determinism: sequence i is a pure function of (seed, the other parameters, i): block
i // BLOCK is drawn from numpy's default_rng([seed, block]). The held-out split is by
document (the pipeline's stratified draw), so eval sequences are never trained on.
`oracle` solves any sequence from its words (answers hidden or not): the task is
solvable by construction.
"""

from __future__ import annotations

import dataclasses
import functools
import hashlib
import json
from collections.abc import Iterator, Sequence
from pathlib import Path

import numpy as np
from tokenizers import Tokenizer

from input_pipeline import cache
from input_pipeline import tokenizer as tokenizer_lib
from input_pipeline.documents import DEFAULT_CHUNK_CHARS, Document, DocumentSink, TextChunk
from input_pipeline.errors import CorpusError, InputPipelineError

PREFIX = "synthetic:"
TASKS = ("recall", "find")
# Parameter -> default. Sizes are counts of distinct tokens or positions.
PARAMS = {"pairs": 16, "keys": 64, "values": 16, "queries": 4, "n": 20000, "seed": 0}
TASK_PARAMS = {"recall": tuple(PARAMS), "find": ("pairs", "queries", "n", "seed")}
QUERY = "query"  # the word between the list and the queries
ANSWER_PATTERN = "a[0-9]+"  # data.mask_targets for every task
BLOCK = 1000  # sequences drawn per generator
# Bump when the same spec would give other text, so caches keyed on identity() rebuild.
VERSION = 2

_USAGE = ("expected synthetic:TASK[:KEY=VALUE,...] with TASK one of "
          f"{', '.join(TASKS)} and KEY one of {', '.join(PARAMS)}")


@dataclasses.dataclass(frozen=True)
class SyntheticCorpus:
    """A recall corpus (see the module docstring); build it with `parse_spec`."""

    task: str = "recall"
    pairs: int = PARAMS["pairs"]
    keys: int = PARAMS["keys"]
    values: int = PARAMS["values"]
    queries: int = PARAMS["queries"]
    n: int = PARAMS["n"]
    seed: int = PARAMS["seed"]

    def __post_init__(self) -> None:
        def bad(why: str) -> CorpusError:
            return CorpusError(f"corpus: bad synthetic spec {self.describe()!r}: {why}")

        if self.task not in TASKS:
            raise CorpusError(f"corpus: synthetic task {self.task!r} is unknown; {_USAGE}")
        for name in PARAMS:
            value = getattr(self, name)
            if not isinstance(value, int) or isinstance(value, bool):
                raise bad(f"{name}={value!r} is not an integer")
            if value < (0 if name == "seed" else 1):
                raise bad(f"{name}={value} must be {'>= 0' if name == 'seed' else '>= 1'}")
        if self.queries > self.pairs:
            raise bad(f"queries={self.queries} > pairs={self.pairs}: queried keys are distinct")
        if self.task == "recall" and self.keys < self.pairs:
            raise bad(f"keys={self.keys} < pairs={self.pairs}: the keys of a list are distinct")
        if self.task == "recall" and self.values < self.pairs:
            raise bad(f"values={self.values} < pairs={self.pairs}: the values of a list are "
                      "distinct")

    # -- the Corpus protocol (input_pipeline.corpus) -----------------------------------
    def describe(self) -> str:
        names = TASK_PARAMS.get(self.task, PARAMS)
        params = ",".join(f"{name}={getattr(self, name)}" for name in names)
        return f"{PREFIX}{self.task}:{params}"

    def identity(self) -> str:
        blob = json.dumps(["synthetic", VERSION, self.describe()])
        return hashlib.sha256(blob.encode()).hexdigest()

    def chunks(self, chunk_chars: int = DEFAULT_CHUNK_CHARS) -> Iterator[TextChunk]:
        sink = DocumentSink()
        for start in range(0, self.n, BLOCK):
            for words in self.sequences(start, min(start + BLOCK, self.n)):
                sink.add(" ".join(words))
                sink.end_document()
            yield from sink.chunks(chunk_chars)
        while sink.sentences:
            yield sink.take(chunk_chars)

    def documents(self) -> list[Document]:
        return [[" ".join(words)] for words in self.sequences(0, self.n)]

    # -- the task ----------------------------------------------------------------------
    @property
    def sequence_length(self) -> int:
        """Tokens per sequence, [CLS] and [SEP] included."""
        listed = 2 * self.pairs if self.task == "recall" else self.pairs
        return listed + 2 * self.queries + 3

    @functools.cached_property
    def _words(self) -> dict[str, np.ndarray]:
        answers = self.values if self.task == "recall" else self.pairs
        keys = self.keys if self.task == "recall" else self.pairs
        return {"k": np.array([f"k{i}" for i in range(keys)], object),
                "v": np.array([f"v{j}" for j in range(self.values)], object),
                "a": np.array([f"a{j}" for j in range(answers)], object)}

    def vocabulary(self) -> list[str]:
        """The tokens in id order: BERT's specials, then the task's words."""
        w = self._words
        values = w["v"].tolist() if self.task == "recall" else []
        return [*tokenizer_lib.SPECIAL_TOKENS, QUERY, *w["k"].tolist(), *values,
                *w["a"].tolist()]

    def draw(self, start: int, stop: int) -> dict[str, np.ndarray]:
        """Sequences start..stop-1 as arrays: keys [N, m], values [N, m] (ints; find's
        values are the places 0..m-1) and queried [N, Q] (places in the list)."""
        if self.task == "find":  # the place of key j is the inverse permutation at j
            d = self._draw("find", start, stop)
            d["queried"] = np.argsort(d["keys"], axis=1)[:, :self.queries]
            return d
        return self._draw("recall", start, stop)

    def _draw(self, task: str, start: int, stop: int) -> dict[str, np.ndarray]:
        if not 0 <= start <= stop <= self.n:
            raise InputPipelineError(f"synthetic: sequences {start}..{stop} outside 0..{self.n}")
        parts = []
        for block in range(start // BLOCK, (stop - 1) // BLOCK + 1 if stop > start else 0):
            rng = np.random.default_rng([self.seed, block])
            size = min(BLOCK, self.n - block * BLOCK)
            if task == "recall":
                keys = np.argsort(rng.random((size, self.keys)), axis=1)[:, :self.pairs]
                values = np.argsort(rng.random((size, self.values)), axis=1)[:, :self.pairs]
            else:  # find: a permutation of k0..k{m-1}; the values are the places
                keys = np.argsort(rng.random((size, self.pairs)), axis=1)
                values = np.broadcast_to(np.arange(self.pairs), (size, self.pairs))
            queried = np.argsort(rng.random((size, self.pairs)), axis=1)[:, :self.queries]
            lo, hi = max(start - block * BLOCK, 0), min(stop - block * BLOCK, size)
            parts.append((keys[lo:hi], values[lo:hi], queried[lo:hi]))
        if not parts:
            empty = np.zeros((0, self.pairs), np.int64)
            return {"keys": empty, "values": empty,
                    "queried": np.zeros((0, self.queries), np.int64)}
        keys, values, queried = (np.concatenate(p) for p in zip(*parts, strict=True))
        return {"keys": keys, "values": values, "queried": queried}

    def sequences(self, start: int, stop: int) -> list[list[str]]:
        """The words of sequences start..stop-1 (without [CLS] and [SEP])."""
        d, w = self.draw(start, stop), self._words
        rows = np.arange(len(d["keys"]))[:, None]
        if self.task == "recall":
            listed = np.stack([w["k"][d["keys"]], w["v"][d["values"]]], axis=2)
            listed = listed.reshape(len(d["keys"]), -1)
        else:
            listed = w["k"][d["keys"]]
        asked = np.stack([w["k"][d["keys"][rows, d["queried"]]],
                          w["a"][d["values"][rows, d["queried"]]]], axis=2)
        asked = asked.reshape(len(d["keys"]), -1)
        query = np.full((len(d["keys"]), 1), QUERY, object)
        return np.concatenate([listed, query, asked], axis=1).tolist()

    def answer_positions(self) -> np.ndarray:
        """int [Q]: positions of the answers in a packed row ([CLS] is position 0)."""
        # [CLS] list query (k a) x Q [SEP]: the last answer sits right before [SEP].
        return self.sequence_length - 2 * self.queries + 2 * np.arange(self.queries)

    def check_fits(self, max_seq_length: int, pair: bool = False) -> None:
        """InputPipelineError unless each sequence packs into one row of its own."""
        if pair:
            raise InputPipelineError(f"data: {self.describe()} needs "
                                     "data.sentence_pairs=False (one sequence per row)")
        if max_seq_length < self.sequence_length:
            raise InputPipelineError(
                f"data: {self.describe()} needs data.max_seq_length >= "
                f"{self.sequence_length} (its sequences with [CLS] and [SEP]); got "
                f"{max_seq_length}")


def oracle(words: Sequence[str]) -> list[str]:
    """The answers of one sequence of either task, read off its list by a lookup
    table: the answer words themselves may be hidden ([MASK] or anything else)."""
    words = list(words)
    if QUERY not in words:
        raise InputPipelineError("synthetic: no 'query' word in the sequence")
    cut = words.index(QUERY)
    listed, asked = words[:cut], words[cut + 1:]
    if len(listed) > 1 and listed[1].startswith("v"):  # recall: 'k{i}' 'v{j}' pairs
        table = {k: v[1:] for k, v in zip(listed[::2], listed[1::2], strict=True)}
    else:  # find: the place of each key
        table = {k: str(i) for i, k in enumerate(listed)}
    return [f"a{table[key]}" for key in asked[::2]]


def parse_spec(spec: str) -> SyntheticCorpus:
    """`synthetic:TASK[:KEY=VALUE,...]` -> SyntheticCorpus; one CorpusError line if bad."""
    if not spec.startswith(PREFIX):
        raise CorpusError(f"corpus: {spec!r} is not a synthetic spec; {_USAGE}")
    task, _, rest = spec[len(PREFIX):].partition(":")
    params: dict[str, int] = {}
    for item in rest.replace(":", ",").split(","):
        item = item.strip()
        if not item:
            continue
        name, eq, text = item.partition("=")
        name = name.strip()
        if not eq or name not in PARAMS:
            what = "is not KEY=VALUE" if not eq else "has an unknown KEY"
            raise CorpusError(f"corpus: bad synthetic spec {spec!r}: {item!r} {what}; {_USAGE}")
        if name in params:
            raise CorpusError(f"corpus: bad synthetic spec {spec!r}: {name} given twice")
        try:
            params[name] = int(text.strip())
        except ValueError:
            raise CorpusError(f"corpus: bad synthetic spec {spec!r}: {name}={text.strip()!r} "
                              "is not an integer") from None
    task = task.strip()
    unused = sorted(set(params) - set(TASK_PARAMS.get(task, PARAMS)))
    if unused:
        raise CorpusError(f"corpus: bad synthetic spec {spec!r}: {task} takes no "
                          f"{', '.join(unused)} (its keys: {', '.join(TASK_PARAMS[task])})")
    return SyntheticCorpus(task, **params)


def fixed_tokenizer(source: SyntheticCorpus, cache_dir: str | Path) -> tuple[Tokenizer, Path]:
    """The tokenizer of the corpus's own vocabulary, kept in the data cache
    (tokenizer-<key>/ with vocab.txt and tokenizer.json) like a trained one."""
    vocab = source.vocabulary()
    directory = Path(cache_dir) / f"tokenizer-{cache.cache_key('tokenizer', 'fixed', vocab)}"
    if not cache.is_complete(directory):
        with cache.atomic_directory(directory) as tmp:
            with cache.writing(tmp):
                (tmp / "vocab.txt").write_text("".join(t + "\n" for t in vocab))
                tok = tokenizer_lib.load_tokenizer(tmp / "vocab.txt", lowercase=True)
                tokenizer_lib.save_tokenizer(tok, tmp)
    return tokenizer_lib.load_tokenizer(directory), directory
