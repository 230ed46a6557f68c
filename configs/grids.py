"""The papers' grids as named rows of model overrides.

A row is a name plus the model-arg overrides that define it (the same keys as
`configs.model.MODEL_ARGS`), and, where the paper reports them, its numbers.
`configs/model.py:row=lowrank_2a_h8` builds one row; scripts/ iterate a grid.

Low-rank bottleneck (Bhojanapalli et al. 2020), 24 layers:
  Table 1   d=1024, h = 8/16/32, head size d/h (standard)
  Table 2A  d=512, fixed head size d_p=128, h = 8/12/16/32
  Table 2B  d=512, h=8, fixed head size d_p = 32/64/256
  Table 3   d=768, d_p=128, h = 8/12/16/20
Talking heads (Shazeer et al. 2020), BERT-base width: h = 6/12/24/48 with
key/value size 768/h, multi-head vs talking-heads; the same paper's other members of
the family at BERT-base, 12 heads: dynamic projections (each of x2l, m2l, x2w, m2w, both
of a side, all four) and general bilinear attention (h = 2, 4, 12).
"""

from __future__ import annotations

import dataclasses


@dataclasses.dataclass(frozen=True)
class Row:
    name: str
    overrides: dict[str, object]
    # What the paper reports for this row (empty when it reports nothing).
    reported: dict[str, float] = dataclasses.field(default_factory=dict)
    # configs/glue.py args of this row's fine-tuning (e.g. lr, init, insert_th); they
    # come after the sweep's --glue_args and win over them.
    glue: dict[str, object] = dataclasses.field(default_factory=dict)
    # Another (earlier) row of the grid whose pretraining, at the same seed, this row
    # fine-tunes instead of pretraining its own: rows that differ only in fine-tuning
    # share one checkpoint. Its overrides must equal that row's.
    pretrained_by: str | None = None


def _lowrank_rows() -> dict[str, list[Row]]:
    t1 = [
        Row(f"lowrank_1_h{h}", {"size": "lowrank_1024", "heads": h}, rep)
        for h, rep in [
            (8, {"params_m": 336, "squad_f1": 90.89, "mnli": 85.0}),
            (16, {"params_m": 336, "squad_f1": 90.61, "mnli": 84.5}),
            (32, {"params_m": 336, "squad_f1": 90.45, "mnli": 84.4}),
        ]
    ]
    t2a = [
        Row(f"lowrank_2a_h{h}", {"size": "lowrank_512", "heads": h, "head_size": 128}, rep)
        for h, rep in [
            (8, {"params_m": 168, "squad_f1": 89.6, "mnli": 83.5}),
            (12, {"params_m": 193, "squad_f1": 90.25, "mnli": 84.2}),
            (16, {"params_m": 218, "squad_f1": 90.43, "mnli": 83.9}),
            (32, {"params_m": 319, "squad_f1": 90.95, "mnli": 84.9}),
        ]
    ]
    t2b = [
        Row(f"lowrank_2b_dp{dp}", {"size": "lowrank_512", "heads": 8, "head_size": dp}, rep)
        for dp, rep in [
            (32, {"squad_f1": 88.53, "mnli": 82.5}),
            (64, {"squad_f1": 89.51, "mnli": 83.4}),
            (256, {"squad_f1": 90.33, "mnli": 83.9}),
        ]
    ]
    t3 = [
        Row(f"lowrank_3_h{h}", {"size": "lowrank_768", "heads": h, "head_size": 128})
        for h in (8, 12, 16, 20)
    ]
    return {"lowrank_table1": t1, "lowrank_table2a": t2a, "lowrank_table2b": t2b,
            "lowrank_table3": t3}


def _talking_heads_rows() -> dict[str, list[Row]]:
    rows = [
        Row(f"th_base_{short}_h{h}", {"size": "base", "heads": h, "attention": variant})
        for h in (6, 12, 24, 48)
        for short, variant in (("mh", "multi_head"), ("th", "talking_heads"))
    ]
    return {"talking_heads": rows, **_attention_family_rows()}


# The dynamic-projection subsets the rows compare: each one alone, both terms of a side,
# all four.
DYNAMIC_SUBSETS = ("x2l", "m2l", "x2w", "m2w", "x2l+m2l", "x2w+m2w", "x2l+m2l+x2w+m2w")


def _attention_family_rows() -> dict[str, list[Row]]:
    """The rest of the talking-heads paper's family at BERT-base width and 12 heads.
    The paper ran its dynamic-projection and general-bilinear experiments on T5 (an
    encoder-decoder), not BERT, so these rows carry no reported numbers. General
    bilinear attention has 2 h D^2 attention parameters a layer: at h = 2 exactly
    multi-head's 4 D^2 (the equal-parameter row), at 12 heads 6x as many."""
    base = {"size": "base", "heads": 12}
    th = {**base, "attention": "talking_heads"}
    dynamic = [Row("fam_base_mh_h12", base), Row("fam_base_th_h12", th)]
    dynamic += [Row(f"fam_base_th_{subset.replace('+', '_')}_h12", {**th, "th_dynamic": subset})
                for subset in DYNAMIC_SUBSETS]
    bilinear = [Row("fam_base_mh_h12", base)] + [
        Row(f"fam_base_gb_h{h}", {"size": "base", "heads": h, "attention": "general_bilinear"})
        for h in (2, 4, 12)]
    return {"talking_heads_dynamic": dynamic, "general_bilinear": bilinear}


def _cpu_rows() -> dict[str, list[Row]]:
    """CPU-scale studies: width 256, 4 layers (see docs/RESULTS.md)."""
    small = {"layers": 4, "hidden": 256, "mlp": 1024, "max_len": 128}
    th = [
        Row(f"th_cpu_{short}_h{h}", {**small, "heads": h, "attention": variant})
        for h in (4, 8, 16, 32)
        for short, variant in (("mh", "multi_head"), ("th", "talking_heads"))
    ]
    ks = [Row(f"ks_cpu_k{k}", {**small, "heads": 8, "key_size": k}) for k in (32, 64, 128)]
    ks.append(Row("ks_cpu_fixed128", {**small, "heads": 8, "head_size": 128}))
    return {"talking_heads_cpu": th, "key_size_cpu": ks}


def _synthetic_rows() -> dict[str, list[Row]]:
    """The diagnostic task of docs/SYNTHETIC.md (scripts/synthetic_study.sh): width 64,
    one pre-LN layer, no dropout; h = 2, 8, 32 heads take the key size 64/h from 32
    down to 2, against about 47 positions. At 8 and 32 heads: multi-head with key size
    32 (value size stays 64/h), the fixed head size 32 (key = value = 32), and talking
    heads (key = value = 64/h, h x h mixing before and after the softmax). Weights start
    at stddev 0.1: at BERT's 0.02 the attention logits start so flat that most runs sit
    on the chance plateau for thousands of steps (docs/SYNTHETIC.md, the pilot)."""
    small = {"layers": 1, "hidden": 64, "mlp": 256, "max_len": 48, "norm": "pre",
             "dropout": 0.0, "attention_dropout": 0.0, "init_std": 0.1}
    rows = [Row(f"syn_mh_h{h}", {**small, "heads": h}) for h in (2, 8, 32)]
    for h in (8, 32):
        rows += [Row(f"syn_mh_k32_h{h}", {**small, "heads": h, "key_size": 32}),
                 Row(f"syn_fixed32_h{h}", {**small, "heads": h, "head_size": 32}),
                 Row(f"syn_th_h{h}", {**small, "heads": h, "attention": "talking_heads"})]
    # The dense task (`mode`, docs/SYNTHETIC.md): its answer spreads the attention over
    # the members of a query-dependent set whose pattern has rank about 16, so the key
    # size runs from 32 (above it) through 8 to 2 (below it); two layers, since the query
    # must first reach the answer's position. The paper's pair at fixed parameters
    # (2 x 32 against 32 x 2), its fix (32 x 32) and talking heads at 32 heads.
    dense = {**small, "layers": 2, "max_len": 40}
    mode = [Row(f"mode_mh_h{h}", {**dense, "heads": h}) for h in (2, 8, 32)]
    mode += [Row("mode_mh_k32_h32", {**dense, "heads": 32, "key_size": 32}),
             Row("mode_th_h32", {**dense, "heads": 32, "attention": "talking_heads"})]
    return {"synthetic_find": rows, "synthetic_mode": mode}


# Real text at CPU scale (docs/RESULTS.md, part 2): width 64, 2 pre-LN layers, 64
# positions, weights at stddev 0.05; the pilot in the doc picked these as the recipe that
# gets furthest below the unigram loss per CPU-minute (BERT's post-LN at stddev 0.02
# and lr 2e-3 was 0.08 nats behind at 6M tokens).
TEXT_SMALL = {"layers": 2, "hidden": 64, "mlp": 256, "max_len": 64, "norm": "pre",
              "init_std": 0.05}


def _text_rows() -> dict[str, list[Row]]:
    """Part 2: multi-head vs talking heads at 8 heads (key size 8), and the low-rank
    paper's fixes at the same heads: key size 32, and the fixed head size 32."""
    text = [Row("txt_mh_h8", {**TEXT_SMALL, "heads": 8}),
            Row("txt_th_h8", {**TEXT_SMALL, "heads": 8, "attention": "talking_heads"}),
            Row("txt_mh_k32_h8", {**TEXT_SMALL, "heads": 8, "key_size": 32}),
            Row("txt_fixed32_h8", {**TEXT_SMALL, "heads": 8, "head_size": 32})]
    return {"text_small": text, "classifier_question": _classifier_rows(text[0], text[1])}


def _classifier_rows(mh: Row, th: Row) -> list[Row]:
    """Part 3: why would talking heads do worse in a user's classifier? Each cause as
    rows beside part 2's multi-head and talking-heads rows (whose pretraining they
    share): training from scratch on the task, the fine-tuning learning rate (the same
    grid for both), the mixing matrices' init (identity vs fan-in) in pretraining and
    from scratch, and talking-heads layers inserted at identity into the multi-head
    checkpoint."""
    rows = [mh, th]
    for base, short in ((mh, "mh"), (th, "th")):
        rows.append(Row(f"cls_{short}_scratch", base.overrides, glue={"init": "scratch",
                                                                       "lr": 1e-3},
                        pretrained_by=base.name))
        rows += [Row(f"cls_{short}_lr{lr:g}", base.overrides, glue={"lr": lr},
                     pretrained_by=base.name) for lr in (1e-4, 1e-3)]
    rows.append(Row("cls_mh_insert_th", mh.overrides, glue={"insert_th": True},
                    pretrained_by=mh.name))
    identity = Row("txt_th_identity_h8", {**th.overrides, "th_init": "identity"})
    # From scratch too: the scratch rows take the checkpoint's architecture, mixing init
    # included, so this is talking heads trained on the task with identity mixing.
    rows += [identity, Row("cls_th_identity_scratch", identity.overrides,
                           glue={"init": "scratch", "lr": 1e-3}, pretrained_by=identity.name)]
    return rows


GRIDS: dict[str, list[Row]] = {**_lowrank_rows(), **_talking_heads_rows(), **_cpu_rows(),
                               **_synthetic_rows(), **_text_rows()}
ROWS: dict[str, Row] = {row.name: row for rows in GRIDS.values() for row in rows}

# The GLUE protocol of the CPU-scale grids (configs/glue.py args; the study scripts
# scripts/cpu_study.sh and text_study.sh pass the same): scripts/sweep.py uses it when
# --glue_args is not given. Without it a CPU grid's fine-tuning would run the papers'
# full protocol (4 learning rates x 3 seeds x 3 epochs of every example at 128 tokens).
GLUE_PROTOCOLS: dict[str, str] = {
    "talking_heads_cpu": "seeds=3,lr=2e-4,epochs=1,max_train=2000,seq_len=64",
    "key_size_cpu": "seeds=3,lr=2e-4,epochs=1,max_train=2000,seq_len=64",
    "text_small": "seeds=3,lr=3e-4,epochs=2,max_train=4000,seq_len=64",
    "classifier_question": "seeds=3,lr=3e-4,epochs=2,max_train=4000,seq_len=64",
}

# The comparisons a grid was built for, as (A, B) row pairs that scripts/tables.py tests
# (B - A) unless --pairs or --baseline says otherwise. Grids without an entry get
# tables.py's default (multi-head vs the other attentions at an equal model), which
# would pair every multi-head row of classifier_question with every talking-heads row.
PAIRS: dict[str, list[tuple[str, str]]] = {
    # Static talking heads against multi-head, then each dynamic subset against static.
    "talking_heads_dynamic": [("fam_base_mh_h12", "fam_base_th_h12")] + [
        ("fam_base_th_h12", f"fam_base_th_{subset.replace('+', '_')}_h12")
        for subset in DYNAMIC_SUBSETS],
    # Multi-head against general bilinear at equal attention parameters (h = 2) and more.
    "general_bilinear": [("fam_base_mh_h12", f"fam_base_gb_h{h}") for h in (2, 4, 12)],
    # Each fix of the small key size at the same heads, and the key size itself.
    "synthetic_find": [
        ("syn_mh_h8", "syn_mh_k32_h8"), ("syn_mh_h8", "syn_fixed32_h8"),
        ("syn_mh_h8", "syn_th_h8"),
        ("syn_mh_h32", "syn_mh_k32_h32"), ("syn_mh_h32", "syn_fixed32_h32"),
        ("syn_mh_h32", "syn_th_h32"),
        ("syn_mh_h2", "syn_mh_h8"), ("syn_mh_h2", "syn_mh_h32"),
    ],
    # At fixed parameters (the paper's Table 1 in miniature), each smaller key size,
    # then the fixes at 32 heads.
    "synthetic_mode": [
        ("mode_mh_h2", "mode_mh_h32"), ("mode_mh_h2", "mode_mh_h8"),
        ("mode_mh_h32", "mode_mh_k32_h32"), ("mode_mh_h32", "mode_th_h32"),
    ],
    "text_small": [
        ("txt_mh_h8", "txt_th_h8"), ("txt_mh_h8", "txt_mh_k32_h8"),
        ("txt_mh_h8", "txt_fixed32_h8"),
    ],
    "classifier_question": [
        ("txt_mh_h8", "txt_th_h8"),  # pretrained, fine-tuned at 3e-4 (part 2)
        ("cls_mh_scratch", "cls_th_scratch"),  # no pretraining
        ("cls_mh_lr0.0001", "cls_th_lr0.0001"),  # the same lr grid for both
        ("cls_mh_lr0.001", "cls_th_lr0.001"),
        ("txt_th_h8", "txt_th_identity_h8"),  # mixing init: fan-in normal vs identity
        ("txt_mh_h8", "txt_th_identity_h8"),  # ... and does identity close the gap to MH?
        ("cls_th_scratch", "cls_th_identity_scratch"),  # mixing init, from scratch
        ("cls_mh_scratch", "cls_th_identity_scratch"),
        ("txt_mh_h8", "cls_mh_insert_th"),  # talking heads inserted at identity
        ("txt_th_h8", "cls_mh_insert_th"),  # ... vs talking heads pretrained
    ],
}
