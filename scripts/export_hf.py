"""Export a run's model as a Hugging Face transformers directory (PyTorch, safetensors).

  python scripts/export_hf.py --workdir runs/mini --out exports/mini [--step 300]
  python scripts/export_hf.py --workdir runs/mini_glue --task sst2 --out exports/mini_sst2

--workdir is a pretraining run (BertForMaskedLM; --step N, best or latest, default best:
the lowest eval loss saved), a GLUE workdir (the task's best run, as GLUE's submission;
eval_glue.py keeps its model unless save_model=none) or one GLUE run directory
(BertForSequenceClassification with the task's label names). The directory holds
config.json, model.safetensors and the run's tokenizer (tokenizer.json, vocab.txt,
tokenizer_config.json, special_tokens_map.json):

  from transformers import AutoModelForMaskedLM, AutoTokenizer
  model = AutoModelForMaskedLM.from_pretrained("exports/mini")   # a plain BERT row
  model = AutoModelForMaskedLM.from_pretrained("exports/th", trust_remote_code=True)

Rows plain BERT cannot express (key or value size other than hidden/heads, talking
heads, pre-LN) also get modeling_bert_ablation.py, the PyTorch classes transformers
builds with trust_remote_code=True. The export is written to a temporary directory and
renamed when complete; an existing --out is replaced only with --overwrite.
"""

from __future__ import annotations

import os
import sys

from absl import app, flags, logging

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from training import cli  # noqa: E402

FLAGS = flags.FLAGS


def define_flags() -> None:
    """The command line's flags, defined when run as a script only (see
    tests/test_scripts_import.py)."""
    flags.DEFINE_string("workdir", None, "a pretraining run, a GLUE workdir or a GLUE run")
    flags.DEFINE_string("out", None, "the directory to write")
    flags.DEFINE_string("step", "best", "pretraining runs: a step, best or latest")
    flags.DEFINE_string("task", None, "GLUE workdirs holding several tasks: which one")
    flags.DEFINE_bool("overwrite", False, "replace an existing --out")
    flags.mark_flags_as_required(["workdir", "out"])


def main(argv: list[str]) -> None:
    if len(argv) > 1:
        cli.fail(f"unexpected arguments: {argv[1:]}", cli.EXIT_USAGE)
    if FLAGS["verbosity"].present == 0:
        logging.set_verbosity(logging.WARNING)
    step = cli.checkpoint_step("step", FLAGS.step)

    def job() -> None:
        from models.hf_export import is_plain_bert
        from training.export import export

        model = export(FLAGS.workdir, FLAGS.out, step, FLAGS.task, FLAGS.overwrite)
        head = "SequenceClassification" if model.task else "MaskedLM"
        how = ("plain BERT" if is_plain_bert(model.model_config)
               else "needs trust_remote_code=True")
        print(f"exported {model.source} ({model.model_config.attention}"
              f"{', ' + model.task.name if model.task else ''}) to {FLAGS.out}: "
              f"AutoModelFor{head}.from_pretrained({FLAGS.out!r}) ({how})", flush=True)

    cli.run(job)


if __name__ == "__main__":
    define_flags()
    app.run(main, flags_parser=cli.parse_flags)
