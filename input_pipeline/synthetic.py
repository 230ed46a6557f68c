"""Synthetic MLM corpora whose masked tokens can only be recovered by attention that
picks positions by their content: the diagnostic tasks of the low-rank bottleneck
(Bhojanapalli et al. 2020, Theorem 1: a head whose key size is below the number of
positions cannot produce every attention pattern). `recall` and `find` need one
position among many (a one-hot pattern); `mode` needs an even spread over a query-
dependent set of positions (a dense pattern). docs/SYNTHETIC.md has the recipes and
pilots.

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

  mode    x_1 ... x_m query q_j a_v
          Each x_i is one word `k{t}v{u}`: an item of type t (of `keys` types) holding
          value u (of `values`). A fixed relation of the corpus (its seed) gives each of
          the `keys` query types q_j a set S_j of half the item types (a random 0/1
          matrix, `relation()`); the answer is the value held most often by the items
          whose type is in S_j (the members). Every value is held by exactly R = m /
          values items of the list (`mode_count`), so the list's own value counts say
          nothing; m/2 items are members, all R holders of the answer among them and at
          most R - 2 holders of any other value (the mode is unique by 2). One query
          per sequence. The attention that answers it spreads evenly over
          the members: a logit matrix (query type x item type) of the relation's rank
          (about `keys`), which a head of smaller key size cannot form; going around the
          attention needs the list's whole type x value histogram (keys x values
          numbers) carried in the values.

Sequence lengths with [CLS] and [SEP]: recall 2m + 2Q + 3, find and mode m + 2Q + 3.
Chance: 1/m for recall and find (recall's values are distinct, so the list's values
alone give no better guess), 1/values for mode.
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

import collections
import dataclasses
import functools
import hashlib
import json
import re
from collections.abc import Iterator, Sequence
from pathlib import Path

import numpy as np
from tokenizers import Tokenizer

from input_pipeline import cache
from input_pipeline import tokenizer as tokenizer_lib
from input_pipeline.documents import DEFAULT_CHUNK_CHARS, Document, DocumentSink, TextChunk
from input_pipeline.errors import CorpusError, InputPipelineError

PREFIX = "synthetic:"
TASKS = ("recall", "find", "mode")
# Parameter -> default. Sizes are counts of distinct tokens or positions.
PARAMS = {"pairs": 16, "keys": 64, "values": 16, "queries": 4, "n": 20000, "seed": 0}
TASK_PARAMS = {"recall": tuple(PARAMS), "find": ("pairs", "queries", "n", "seed"),
               "mode": ("pairs", "keys", "values", "n", "seed")}
# The mode task's relation is drawn from its own stream of the corpus seed (blocks use
# [seed, block]), so it is the same for every block and for the held-out split.
RELATION_STREAM = (1, 0)
QUERY = "query"  # the word between the list and the queries
ANSWER_PATTERN = "a[0-9]+"  # data.mask_targets for every task
BLOCK = 1000  # sequences drawn per generator
# Bump when the same spec would give other text, so caches keyed on identity() rebuild.
VERSION = 2

_USAGE = ("expected synthetic:TASK[:KEY=VALUE,...] with TASK one of "
          f"{', '.join(TASKS)} and KEY one of {', '.join(PARAMS)}")


@dataclasses.dataclass(frozen=True)
class SyntheticCorpus:
    """A synthetic corpus (see the module docstring); build it with `parse_spec`."""

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
        if self.task == "mode":
            if self.queries != 1:
                raise bad(f"queries={self.queries}: mode asks one query per sequence")
            r = self.mode_count
            if self.pairs % 2 or self.pairs % self.values or r < 3:
                raise bad(f"pairs={self.pairs} must be even and 3 or more times values="
                          f"{self.values} (half are members; each value is held equally often)")
            if (self.values - 1) * (r - 2) < self.pairs // 2 - r:
                raise bad(f"pairs={self.pairs} values={self.values}: the other "
                          f"{self.pairs // 2 - r} members cannot hold the other values at "
                          f"most {r - 2} times each")
            if self.keys % 2 or self.keys < 4:
                raise bad(f"keys={self.keys} must be even and >= 4 (each query type takes "
                          "half the item types)")

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
    def mode_count(self) -> int:
        """mode: how many items of a list hold each value, R = m / values (all R holders
        of the answer are members)."""
        return self.pairs // self.values

    def relation(self) -> np.ndarray:
        """mode: bool [keys, keys], row j the item types S_j of query type j (half)."""
        rng = np.random.default_rng([self.seed, *RELATION_STREAM])
        chosen = np.argsort(rng.random((self.keys, self.keys)), axis=1)[:, :self.keys // 2]
        relation = np.zeros((self.keys, self.keys), bool)
        np.put_along_axis(relation, chosen, True, axis=1)
        return relation

    @property
    def sequence_length(self) -> int:
        """Tokens per sequence, [CLS] and [SEP] included."""
        listed = 2 * self.pairs if self.task == "recall" else self.pairs
        return listed + 2 * self.queries + 3

    @functools.cached_property
    def _words(self) -> dict[str, np.ndarray]:
        if self.task == "mode":
            return {"k": np.array([[f"k{t}v{u}" for u in range(self.values)]
                                   for t in range(self.keys)], object),
                    "q": np.array([f"q{j}" for j in range(self.keys)], object),
                    "a": np.array([f"a{u}" for u in range(self.values)], object)}
        answers = self.values if self.task == "recall" else self.pairs
        keys = self.keys if self.task == "recall" else self.pairs
        return {"k": np.array([f"k{i}" for i in range(keys)], object),
                "v": np.array([f"v{j}" for j in range(self.values)], object),
                "a": np.array([f"a{j}" for j in range(answers)], object)}

    def vocabulary(self) -> list[str]:
        """The tokens in id order: BERT's specials, then the task's words."""
        w = self._words
        if self.task == "mode":
            return [*tokenizer_lib.SPECIAL_TOKENS, QUERY, *w["k"].ravel().tolist(),
                    *w["q"].tolist(), *w["a"].tolist()]
        values = w["v"].tolist() if self.task == "recall" else []
        return [*tokenizer_lib.SPECIAL_TOKENS, QUERY, *w["k"].tolist(), *values,
                *w["a"].tolist()]

    def draw(self, start: int, stop: int) -> dict[str, np.ndarray]:
        """Sequences start..stop-1 as arrays: keys [N, m], values [N, m] (ints; find's
        values are the places 0..m-1) and queried [N, Q] (places in the list; mode:
        the query type, with its answer in answer [N, Q])."""
        if self.task == "mode":
            return self._draw("mode", start, stop)
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
            lo, hi = max(start - block * BLOCK, 0), min(stop - block * BLOCK, size)
            if task == "mode":
                parts.append({k: v[lo:hi] for k, v in self._draw_mode(rng, size).items()})
                continue
            if task == "recall":
                keys = np.argsort(rng.random((size, self.keys)), axis=1)[:, :self.pairs]
                values = np.argsort(rng.random((size, self.values)), axis=1)[:, :self.pairs]
            else:  # find: a permutation of k0..k{m-1}; the values are the places
                keys = np.argsort(rng.random((size, self.pairs)), axis=1)
                values = np.broadcast_to(np.arange(self.pairs), (size, self.pairs))
            queried = np.argsort(rng.random((size, self.pairs)), axis=1)[:, :self.queries]
            parts.append({"keys": keys[lo:hi], "values": values[lo:hi],
                          "queried": queried[lo:hi]})
        if not parts:
            empty = np.zeros((0, self.pairs), np.int64)
            none = {"keys": empty, "values": empty,
                    "queried": np.zeros((0, self.queries), np.int64)}
            return {**none, "answer": none["queried"]} if task == "mode" else none
        return {key: np.concatenate([p[key] for p in parts]) for key in parts[0]}

    def _draw_mode(self, rng: np.random.Generator, size: int) -> dict[str, np.ndarray]:
        """One block of the mode task (see the module docstring)."""
        m, members, r, half = self.pairs, self.pairs // 2, self.mode_count, self.keys // 2
        relation = self.relation()
        member_types = np.argsort(~relation, axis=1, kind="stable")[:, :half]  # [K, K/2]
        other_types = np.argsort(relation, axis=1, kind="stable")[:, :half]
        query = rng.integers(self.keys, size=size)
        answer = rng.integers(self.values, size=size)

        def without_replacement(pool: np.ndarray, count: int) -> np.ndarray:
            order = np.argsort(rng.random((size, len(pool))), axis=1)[:, :count]
            return pool[order]

        # Members: the answer R times, the others from a pool of each other value R - 2
        # times (indices 0..V-2, shifted past the answer), so the mode is unique by 2.
        others = without_replacement(np.repeat(np.arange(self.values - 1), r - 2), members - r)
        others += others >= answer[:, None]
        member_values = np.concatenate([np.repeat(answer[:, None], r, axis=1), others], axis=1)
        # The rest: what each value lacks of its R holders, so every value is held R times.
        held = (member_values[:, :, None] == np.arange(self.values)).sum(axis=1)  # [N, V]
        lacking = r - held  # every row sums to m - members, so one flat repeat splits evenly
        rest_values = np.repeat(np.tile(np.arange(self.values), size), lacking.ravel())
        rest_values = rest_values.reshape(size, m - members)
        rows = np.arange(size)[:, None]
        types = np.concatenate(
            [member_types[query[:, None], rng.integers(half, size=(size, members))],
             other_types[query[:, None], rng.integers(half, size=(size, m - members))]], axis=1)
        values = np.concatenate([member_values, rest_values], axis=1)
        order = np.argsort(rng.random((size, m)), axis=1)
        return {"keys": types[rows, order], "values": values[rows, order],
                "queried": query[:, None], "answer": answer[:, None]}

    def sequences(self, start: int, stop: int) -> list[list[str]]:
        """The words of sequences start..stop-1 (without [CLS] and [SEP])."""
        d, w = self.draw(start, stop), self._words
        rows = np.arange(len(d["keys"]))[:, None]
        if self.task == "mode":
            listed = w["k"][d["keys"], d["values"]]
            asked = np.concatenate([w["q"][d["queried"]], w["a"][d["answer"]]], axis=1)
            query = np.full((len(d["keys"]), 1), QUERY, object)
            return np.concatenate([listed, query, asked], axis=1).tolist()
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


def oracle(words: Sequence[str], relation: np.ndarray | None = None) -> list[str]:
    """The answers of one sequence of any task, read off its list by a lookup table
    (mode: by counting the members' values, which needs the corpus's `relation()`):
    the answer words themselves may be hidden ([MASK] or anything else)."""
    words = list(words)
    if QUERY not in words:
        raise InputPipelineError("synthetic: no 'query' word in the sequence")
    cut = words.index(QUERY)
    listed, asked = words[:cut], words[cut + 1:]
    items = [re.fullmatch(r"k([0-9]+)v([0-9]+)", word) for word in listed]
    if items and all(items):  # mode
        if relation is None:
            raise InputPipelineError("synthetic: a mode sequence needs the corpus's relation")
        answers = []
        for query in asked[::2]:
            members = relation[int(query[1:])]
            counts = collections.Counter(m.group(2) for m in items if members[int(m.group(1))])
            answers.append(f"a{counts.most_common(1)[0][0]}")
        return answers
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
    if task == "mode":
        params["queries"] = 1
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
