"""GLUE's nine tasks as fine-tuning tasks (eval_glue.py, configs/glue.py).

Data and metrics are the glue package's (TSV folder or hub, encoding, scores,
submissions); here is what a fine-tuning run adds: the classifier (or STS-B's
regression head) on [CLS], per-example scores kept as RUN_DIR/SPLIT_predictions.npy,
the majority-class baseline beside each summary, the best run's test predictions as
GLUE submission files, and results.md as the BERT paper's table (tasks/glue_report.py).
"""

from __future__ import annotations

import os

import ml_collections
import numpy as np

import glue
from finetuning import register
from finetuning.task import Task, TaskData
from models import BertForSequenceClassification
from models.hf_export import EXPORTABLE_ATTENTION
from tasks import glue_report
from training import metrics, results, steps


class GlueFineTuning(Task):
    """One GLUE task (`spec`: its glue.GlueTask)."""

    in_all = True
    data_errors = (glue.GlueDataError,)
    config_fields = {
        # GLUE TSV folder as download_glue_data.py leaves it; None loads nyu-mll/glue
        # from the hub.
        "glue_dir": ml_collections.config_dict.placeholder(str),
        "write_test_predictions": True,  # GLUE submission files for the best run
    }
    short_args = {"glue_dir": "glue_dir"}

    def __init__(self, spec: glue.GlueTask):
        self.spec = spec
        self.key = spec.name.lower().replace("-", "")
        self.name = spec.name
        self.main_metric = spec.main_metric
        self.metric_names = spec.metric_names
        self.dev_splits = spec.dev_splits
        self.test_splits = spec.test_splits

    @property
    def num_labels(self) -> int:
        return self.spec.num_labels

    @property
    def is_regression(self) -> bool:
        return self.spec.is_regression

    # -- data -------------------------------------------------------------------------
    def encode(self, read, config, tokenizer) -> TaskData:
        """Train, the dev splits and whichever test splits exist (none when
        write_test_predictions is off). A missing test file is announced (there is then
        no submission for it); duplicate test ids are refused here, before any
        fine-tuning, since GLUE scores by id."""
        task, data = self.spec, {}
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
                        raise glue.GlueDataError(f"{where}: id {e.guid!r} appears twice; "
                                                 f"GLUE scores a submission by id")
                    seen.add(e.guid)
            if split == "train" and config.max_train_examples:
                examples = examples[: config.max_train_examples]
            encoded = glue.encode_examples(tokenizer, examples, config.max_seq_length, task)
            encoded["guids"] = np.asarray([e.guid for e in examples])
            data[split] = encoded
        return TaskData(data)

    # -- model, objective, scores -----------------------------------------------------
    def model(self, model_config):
        return BertForSequenceClassification(model_config, self.num_labels)

    def objective(self):
        return steps.ClassifierObjective(self.is_regression)

    def predict_step(self, model, gather):
        return steps.make_predict_step(model, self.is_regression, gather)

    def score(self, data: TaskData, split: str, predictions: np.ndarray,
              run_dir: str) -> dict[str, float]:
        return glue.compute_metrics(self.spec, predictions, data[split]["labels"])

    def score_name(self, split: str) -> str:
        return glue.score_name(self.spec, split)

    def baselines(self, data: TaskData) -> dict[str, float]:
        return {self.score_name(split): glue.majority_baseline(
            self.spec, data["train"]["labels"], data[split]["labels"])
            for split in self.dev_splits}

    # -- results ----------------------------------------------------------------------
    def after_grid(self, summary: results.TaskSummary, data: TaskData, config,
                   workdir: str) -> None:
        """The best run's test predictions as GLUE submission files."""
        if not config.write_test_predictions:
            return
        best_dir = os.path.join(workdir, self.name, results.run_name(
            summary.best_learning_rate, summary.best_run))
        for split in self.test_splits:
            path = os.path.join(best_dir, f"{split}_predictions.npy")
            if split not in data:
                continue  # no test file: announced when the data was read
            if not os.path.exists(path):
                metrics.console(f"warning: {path} is missing: no GLUE submission for "
                                f"{self.name} {split} (delete its result.json to redo "
                                f"the run)")
                continue
            glue.write_submission(self.spec, split, list(data[split]["guids"]),
                                  read_predictions(path), os.path.join(workdir, "submission"))

    def no_submission(self, config) -> str:
        return "; ".join(f"{path} is missing" for path in missing_test_files(self, config))

    def report(self, suite, summary, workdir: str, label: str, source: str) -> str:
        return glue_report.write_markdown(workdir, suite, label)

    def files_line(self, workdir: str, suite, config, attention: str) -> str:
        """The files written, and how to export a model (of a variant transformers can
        compute)."""
        workdir = os.path.normpath(workdir)
        line = f"wrote {os.path.join(workdir, results.RESULTS_JSON)} and " \
               f"{os.path.join(workdir, results.RESULTS_MARKDOWN)}"
        submission = os.path.join(workdir, "submission")
        if os.path.isdir(submission):
            line += f"; GLUE submission files in {submission}/"
        if config.save_model != "none" and suite.tasks and attention in EXPORTABLE_ATTENTION:
            task = next(iter(suite.tasks))
            line += (f"; export a fine-tuned model: python scripts/export_hf.py --workdir "
                     f"{workdir} --task {glue.get_task(task).name.lower().replace('-', '')} "
                     f"--out {workdir}_{task}_hf")
        return line


def missing_test_files(task: GlueFineTuning, config) -> list[str]:
    if not config.glue_dir or not config.write_test_predictions:
        return []
    paths = [glue.split_path(task.spec, config.glue_dir, s) for s in task.test_splits]
    return [str(p) for p in paths if not p.exists()]


def read_predictions(path: str) -> np.ndarray:
    """A run's saved test predictions; a damaged file is one error naming it."""
    try:
        return np.load(path)
    except (OSError, ValueError, EOFError) as e:
        raise results.ResultsError(f"{path}: cannot be read ({type(e).__name__}: {e}); delete "
                                   f"the run's result.json to redo it") from None


TASKS = {name: register(GlueFineTuning(spec)) for name, spec in glue.TASKS.items()}
