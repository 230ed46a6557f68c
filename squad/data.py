"""SQuAD v1.1 questions from the official JSON files or the Hugging Face hub.

Official layout: DIR/train-v1.1.json and DIR/dev-v1.1.json, each
{"version": "1.1", "data": [{"title", "paragraphs": [{"context", "qas": [{"id",
"question", "answers": [{"answer_start", "text"}]}]}]}]}. Hub layout
(`rajpurkar/squad`): one row per question with id, title, context, question and
answers {"text": [...], "answer_start": [...]}; splits train and validation.

What is refused (SquadDataError, one line naming the file or hub split, the article and
the question id): a file that is not JSON or not this layout, an empty context or
question, a question without answers, an answer_start outside its context, a question id
seen twice (predictions are scored by id). What is counted and skipped, as BERT's
run_squad.py skips it: a training answer whose text is not the context's characters at
answer_start. On dev only the answer texts are scored, so such an answer stays (counted).
A question id in both train and dev (a dev question that may have been trained on) is a
one-line warning naming both sources, the number of shared ids and a few of them
(`warn_shared_ids`, called by eval_squad.py once it has read both).
"""

from __future__ import annotations

import dataclasses
import json
import os
from collections.abc import Iterable, Iterator
from typing import Any

from common.console import console

TRAIN, DEV = "train", "dev"
SPLIT_FILES = {TRAIN: "train-v1.1.json", DEV: "dev-v1.1.json"}
HUB_DATASET = "rajpurkar/squad"
HUB_SPLITS = {TRAIN: "train", DEV: "validation"}


class SquadDataError(ValueError):
    """Bad SQuAD input: the message names the file (or hub split), article and question."""


@dataclasses.dataclass(frozen=True)
class Answer:
    text: str
    start: int  # character offset in the context


@dataclasses.dataclass(frozen=True)
class SquadExample:
    qid: str
    title: str
    question: str
    context: str
    answers: tuple[Answer, ...]

    @property
    def answer(self) -> Answer:
        """The answer a training window learns (the first, as BERT's run_squad.py)."""
        return self.answers[0]

    def matches(self, answer: Answer) -> bool:
        return self.context[answer.start:answer.start + len(answer.text)] == answer.text


@dataclasses.dataclass
class Loaded:
    examples: list[SquadExample]
    mismatched: int  # answers whose text is not the context at answer_start (counted)
    skipped: int  # training questions dropped for it
    source: str = ""  # the file or hub split it was read from


SHARED_EXAMPLES = 3  # ids a leakage warning names


def shared_ids(train: Loaded, dev: Loaded) -> list[str]:
    """Question ids of `dev` also in `train`, in dev's order."""
    train_ids = {e.qid for e in train.examples}
    return [e.qid for e in dev.examples if e.qid in train_ids]


def warn_shared_ids(train: Loaded, dev: Loaded) -> int:
    """One warning line when train and dev share question ids (leakage); their number."""
    shared = shared_ids(train, dev)
    if shared:
        sources = (train.source if train.source == dev.source
                   else f"{train.source or TRAIN} and {dev.source or DEV}")
        examples = ", ".join(repr(q) for q in shared[:SHARED_EXAMPLES])
        more = ", ..." if len(shared) > SHARED_EXAMPLES else ""
        console(f"warning: {sources}: {len(shared)} question ids are in both the train and "
                f"the dev split ({examples}{more}); leakage: those dev questions may have "
                f"been trained on")
    return len(shared)


def split_path(squad_dir: str, split: str) -> str:
    return os.path.join(squad_dir, SPLIT_FILES[split])


def read_split(squad_dir: str, split: str) -> Loaded:
    return read_json_file(split_path(squad_dir, split), training=split == TRAIN)


def read_json_file(path: str, *, training: bool) -> Loaded:
    try:
        with open(path, encoding="utf-8") as f:
            document = json.load(f)
    except FileNotFoundError:
        raise SquadDataError(f"{path}: no such file (SQuAD v1.1 needs {SPLIT_FILES[TRAIN]} "
                             f"and {SPLIT_FILES[DEV]} in --config.squad_dir)") from None
    except (json.JSONDecodeError, UnicodeDecodeError) as e:
        raise SquadDataError(f"{path}: not a JSON file ({e})") from None
    if not isinstance(document, dict) or not isinstance(document.get("data"), list):
        raise SquadDataError(f"{path}: no 'data' list of articles (not SQuAD's layout)")
    return checked(_rows_of_json(document["data"], path), path, training)


def _rows_of_json(articles: list[Any], path: str) -> Iterator[dict[str, Any]]:
    for a, article in enumerate(articles):
        if not isinstance(article, dict) or not isinstance(article.get("paragraphs"), list):
            raise SquadDataError(f"{path}: article {a}: no 'paragraphs' list")
        title = str(article.get("title", a))
        for p, paragraph in enumerate(article["paragraphs"]):
            where = f"article {title!r} paragraph {p}"
            if not isinstance(paragraph, dict) or not isinstance(paragraph.get("qas"), list):
                raise SquadDataError(f"{path}: {where}: no 'qas' list")
            for q, qa in enumerate(paragraph["qas"]):
                if not isinstance(qa, dict):
                    raise SquadDataError(f"{path}: {where} question {q}: not an object")
                answers = qa.get("answers")
                if not isinstance(answers, list) or not all(isinstance(x, dict)
                                                            for x in answers):
                    raise SquadDataError(f"{path}: {where} question {qa.get('id', q)!r}: "
                                         f"'answers' is not a list of objects")
                yield {"id": qa.get("id"), "title": title, "context": paragraph.get("context"),
                       "question": qa.get("question"),
                       "answers": [(x.get("text"), x.get("answer_start")) for x in answers],
                       "where": where}


def examples_from_hub(dataset: Iterable[dict[str, Any]], split_name: str,
                      training: bool) -> Loaded:
    """Rows of a hub split (a `datasets.Dataset` or any rows with its columns)."""
    def rows():
        for i, row in enumerate(dataset):
            answers = row.get("answers") or {}
            texts, starts = answers.get("text") or [], answers.get("answer_start") or []
            if len(texts) != len(starts):
                raise SquadDataError(f"{split_name}: row {i} (id {row.get('id')!r}): "
                                     f"{len(texts)} answer texts, {len(starts)} starts")
            yield {"id": row.get("id"), "title": row.get("title", ""),
                   "context": row.get("context"), "question": row.get("question"),
                   "answers": list(zip(texts, starts, strict=True)),
                   "where": f"row {i} article {row.get('title', '')!r}"}
    return checked(rows(), split_name, training)


def checked(rows: Iterable[dict[str, Any]], source: str, training: bool) -> Loaded:
    examples, seen = [], set()
    mismatched = skipped = 0
    for row in rows:
        qid = row["id"]
        where = f"{source}: {row['where']} question {qid!r}"
        if not isinstance(qid, str) or not qid:
            raise SquadDataError(f"{where}: no question id")
        if qid in seen:
            raise SquadDataError(f"{where}: the id appears twice; SQuAD scores predictions "
                                 f"by id")
        seen.add(qid)
        context, question = row["context"], row["question"]
        if not isinstance(context, str) or not context.strip():
            raise SquadDataError(f"{where}: empty context")
        if not isinstance(question, str) or not question.strip():
            raise SquadDataError(f"{where}: empty question")
        if not row["answers"]:
            raise SquadDataError(f"{where}: no answers (SQuAD v1.1 answers every question)")
        answers = []
        for text, start in row["answers"]:
            if not isinstance(text, str) or not text.strip():
                raise SquadDataError(f"{where}: an answer without text")
            if isinstance(start, bool) or not isinstance(start, int) \
                    or not 0 <= start < len(context):
                raise SquadDataError(f"{where}: answer_start={start!r} is not a character "
                                     f"offset in its context of {len(context)} characters")
            answers.append(Answer(text, start))
        example = SquadExample(qid, str(row["title"]), question, context, tuple(answers))
        if not all(example.matches(a) for a in answers):
            mismatched += 1
            if training and not example.matches(example.answer):
                skipped += 1  # BERT: "Could not find answer"; the span cannot be trained
                continue
        examples.append(example)
    if not examples:
        raise SquadDataError(f"{source}: no questions")
    return Loaded(examples, mismatched, skipped, source)


def load_split(split: str, squad_dir: str | None, *, cache_dir: str | None = None) -> Loaded:
    """One split from --config.squad_dir, or from the hub when it is empty."""
    if split not in SPLIT_FILES:
        raise ValueError(f"split={split!r}: SQuAD v1.1 has {TRAIN} and {DEV}")
    if squad_dir:
        return read_split(squad_dir, split)
    import datasets  # the hub stack only when it is used

    from common import hub

    name = f"hub {HUB_DATASET} split {HUB_SPLITS[split]!r}"
    try:
        with hub.quiet_retries():
            dataset = datasets.load_dataset(HUB_DATASET, split=HUB_SPLITS[split],
                                            cache_dir=cache_dir)
    except Exception as e:
        hint = hub.unreachable_hint(e, "--config.squad_dir=DIR of train-v1.1.json and "
                                       "dev-v1.1.json")
        if not hint:
            raise
        raise SquadDataError(f"{name}: cannot load ({type(e).__name__}: {e}){hint}") from e
    return examples_from_hub(dataset, name, training=split == TRAIN)
