"""Fine-tuning tasks, one file each; every module here registers its tasks with the
fine-tuning core (finetuning/registry.py lists this folder: a new file is found without
an import anywhere else).

  glue_tasks.py   GLUE's nine tasks (eval_glue.py); glue_report.py its results.md table
  squad_task.py   SQuAD v1.1 (eval_squad.py)
"""
