"""config.dropout_prng (training/steps.py): the PRNG of the dropout masks is part of a
run. rbg draws other masks than threefry (threefry_gpu_kernel: threefry's); a resume with
another is refused in one line naming the field, one without the field means threefry,
and a run on a non-default PRNG resumes bit-exactly. Fine-tuning: the workdir identity."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from helpers import final_params, mlm_batch, tiny_model_config, tiny_run_config

from configs import glue as glue_configs
from finetuning import pretrained as starts
from finetuning import suite
from training import steps
from training.pretrain import train_and_evaluate, validate
from training.pretrain_loop import TrainingError
from training.resume import check_same_dropout_prng


def one_step(dropout_prng: str, seed: int = 0, seed_at_run_time: bool = False):
    """(loss_sum, new params) of one train step of a one-layer model with dropout 0.1;
    seed_at_run_time: the dropout seed comes with the batch (make_train_step(seed=None))."""
    import flax.linen as nn

    from configs import pretrain
    from models import BertForMaskedLM
    from training.optimizer import make_optimizer

    model = BertForMaskedLM(tiny_model_config(num_layers=1, dropout_rate=0.1,
                                              attention_dropout_rate=0.1))
    optimizer, schedule = make_optimizer(pretrain.get_config().optimizer, 100)
    batch = mlm_batch(2, 12, 3, 97)
    params = nn.unbox(model.init(jax.random.key(0), batch["input_ids"], batch["token_type_ids"],
                                 batch["attention_mask"], batch["masked_positions"])["params"])
    state = {"step": jnp.zeros((), jnp.int32), "params": params,
             "opt_state": optimizer.init(params)}
    step = jax.jit(steps.make_train_step(model, optimizer, schedule,
                                         None if seed_at_run_time else seed,
                                         dropout_prng=dropout_prng))
    if seed_at_run_time:
        batch = {**batch, steps.DROPOUT_SEED: np.int32(seed)}
    new_state, metrics = step(state, batch)
    return float(metrics["loss_sum"]), new_state["params"]


@pytest.mark.slow  # compiles two train steps
def test_another_prng_draws_other_masks():
    assert one_step("rbg")[0] != one_step("threefry")[0]  # other masks, another loss


@pytest.mark.parametrize("dropout_prng", ["threefry", "rbg"])
def test_a_seed_given_at_run_time_draws_the_constant_seeds_masks_bit_for_bit(dropout_prng):
    """Fine-tuning passes the dropout seed with each batch so one compiled step serves every
    seed of a grid; it must be the same run as with the seed compiled in."""
    loss, params = one_step(dropout_prng, seed=3)
    loss_rt, params_rt = one_step(dropout_prng, seed=3, seed_at_run_time=True)
    assert loss_rt == loss
    assert all(np.array_equal(a, b) for a, b in zip(jax.tree.leaves(params),
                                                     jax.tree.leaves(params_rt), strict=True))
    assert one_step(dropout_prng, seed=4, seed_at_run_time=True)[0] != loss  # other masks


def test_a_run_time_seed_missing_from_the_batch_is_refused():
    step = steps.make_train_step(None, None, None, None)
    with pytest.raises(ValueError, match="the batch has no dropout_seed"):
        step({"step": 0}, {"input_ids": np.zeros((1, 2), np.int32)})


def test_the_gpu_kernel_choice_is_threefry_lowered_as_a_kernel_and_others_are_refused():
    """threefry_gpu_kernel keys are threefry keys (so its masks are threefry's on every
    backend: the flag changes only how GPU code computes the hash) and it turns the
    lowering on for the process; an unknown name is one error naming the field."""
    before = jax.config.jax_threefry_gpu_kernel_lowering
    try:
        jax.config.update("jax_threefry_gpu_kernel_lowering", False)
        assert steps.use_dropout_prng("threefry") == "threefry2x32"
        assert not jax.config.jax_threefry_gpu_kernel_lowering
        assert steps.use_dropout_prng("threefry_gpu_kernel") == "threefry2x32"
        assert jax.config.jax_threefry_gpu_kernel_lowering
    finally:
        jax.config.update("jax_threefry_gpu_kernel_lowering", before)
    assert [steps.use_dropout_prng(name) for name in ("rbg", "unsafe_rbg")] == [
        "rbg", "unsafe_rbg"]
    with pytest.raises(ValueError, match="dropout_prng='philox' is unknown; choose one of "
                                         "threefry | threefry_gpu_kernel | rbg | unsafe_rbg"):
        steps.make_train_step(None, None, None, 0, dropout_prng="philox")


def test_the_resume_check_names_the_field_and_reads_a_missing_one_as_threefry():
    def config(name):
        return tiny_run_config("corpus.txt", "cache", steps=4, dropout_prng=name)

    check_same_dropout_prng({}, config("threefry"), "RUN")  # saved before the field
    check_same_dropout_prng({"dropout_prng": "threefry"}, config("threefry_gpu_kernel"), "RUN")
    check_same_dropout_prng({"dropout_prng": "threefry_gpu_kernel"}, config("threefry"), "RUN")
    with pytest.raises(TrainingError, match="RUN was trained with dropout_prng='threefry', not "
                                            "'rbg': .* --config.dropout_prng=threefry or use a "
                                            "new --workdir"):
        check_same_dropout_prng({}, config("rbg"), "RUN")
    with pytest.raises(TrainingError, match="dropout_prng='unsafe_rbg', not 'rbg'"):
        check_same_dropout_prng({"dropout_prng": "unsafe_rbg"}, config("rbg"), "RUN")
    with pytest.raises(ValueError, match="dropout_prng='Threefry' is unknown"):
        validate(config("Threefry"))


def test_a_fine_tuning_workdir_refuses_another_prng_and_keeps_its_old_identity(tmp_path):
    """threefry (and threefry_gpu_kernel) add nothing to glue_identity.json: a workdir made
    before the field goes on as it was; another PRNG is another setup."""
    pretrained = starts.Pretrained(tiny_model_config(), None, None, "somewhere@10")
    workdir = str(tmp_path)

    def config(name):
        config = glue_configs.get_config("task=rte")
        config.dropout_prng = name
        return config

    suite.check_workdir_identity(workdir, pretrained, config("threefry"))
    assert "dropout_prng" not in (tmp_path / "glue_identity.json").read_text()
    suite.check_workdir_identity(workdir, pretrained, config("threefry_gpu_kernel"))
    with pytest.raises(ValueError, match=r"different setup \(dropout_prng changed\)"):
        suite.check_workdir_identity(workdir, pretrained, config("rbg"))
    other = str(tmp_path / "rbg")
    suite.check_workdir_identity(other, pretrained, config("rbg"))
    with pytest.raises(ValueError, match=r"different setup \(dropout_prng changed\)"):
        suite.check_workdir_identity(other, pretrained, config("threefry"))
    with pytest.raises(ValueError, match="dropout_prng='rbg2' is unknown"):
        suite.check_workdir_identity(str(tmp_path / "x"), pretrained, config("rbg2"))


@pytest.mark.slow
def test_a_run_on_unsafe_rbg_resumes_bit_exactly_and_refuses_threefry(run_corpus, tmp_path):
    """unsafe_rbg derives the step's key and draws its masks with XLA's RngBitGenerator:
    still a function of (seed, step), so 4 + 4 steps end where 8 do."""
    from test_workdir import snapshot

    def config(**extra):
        fields = {"dropout_prng": "unsafe_rbg", "model.dropout_rate": 0.1,
                  "model.attention_dropout_rate": 0.1, **extra}
        return tiny_run_config(*run_corpus, steps=8, log_every_steps=4, eval_every_steps=8,
                               checkpoint_every_steps=4, **fields)

    straight, split = str(tmp_path / "straight"), str(tmp_path / "split")
    train_and_evaluate(config(), straight)
    train_and_evaluate(config(stop_after_steps=4), split)
    before = snapshot(split)
    with pytest.raises(TrainingError, match="dropout_prng='unsafe_rbg', not 'threefry'"):
        train_and_evaluate(config(dropout_prng="threefry"), split)
    assert snapshot(split) == before  # refused before anything was written
    train_and_evaluate(config(), split)
    (step_a, params_a), (step_b, params_b) = final_params(straight), final_params(split)
    assert step_a == step_b == 8
    jax.tree.map(np.testing.assert_array_equal, params_a, params_b)
