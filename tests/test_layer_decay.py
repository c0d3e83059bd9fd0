"""Layer-wise learning-rate decay: timm's layer ids, one update of SGD and AdamW."""

import re

import numpy as np
import pytest

import keras
import keras_vit
from conftest import TINY, spread, to_numpy
from keras_vit.training import compile_for_finetuning
from keras_vit.training.layer_decay import layer_decay_multipliers, layer_decay_optimizer

pytestmark = spread("the decay is a table of learning rates over Keras' optimizers; each case once")

DECAY = 0.5
L = TINY["num_layers"]


def _expected_multiplier(path):
    """timm's ids (`param_groups_layer_decay` with ViT's `group_matcher`),
    written from the variable's top-level layer: stem 0, block i -> i + 1,
    final norm with the last block, everything after it at the head's."""
    top = path.split("/")[0]
    block = re.fullmatch(r"encoderblock_(\d+)", top)
    if block:
        layer_id = int(block.group(1)) + 1
    elif top == "encoder_norm":
        layer_id = L
    elif top in ("embedding", "conv_root", "gn_root") or re.fullmatch(r"block\d+", top):
        layer_id = 0
    else:
        assert top in ("head", "head_dist", "fc_norm", "pre_logits"), top
        layer_id = L + 1
    return DECAY ** (L + 1 - layer_id)


MODELS = {
    "plain": lambda: keras_vit.ViT(**TINY, classes=3),
    "deit_registers_fc_norm": lambda: keras_vit.ViT(
        **TINY, classes=3, distillation_token=True, num_register_tokens=2, pooled_norm=True),
    "hybrid": lambda: keras_vit.ViTHybrid(**dict(TINY, image_size=64, patch_size=1), resnet_layers=(1,), classes=3),
}


@pytest.mark.parametrize("name", sorted(MODELS))
def test_multipliers_follow_timm(name):
    model = MODELS[name]()
    rates = layer_decay_multipliers(model, DECAY)
    assert set(rates) == {v.path for v in model.weights}
    for path, rate in rates.items():
        assert rate == pytest.approx(_expected_multiplier(path)), path
    assert len(set(rates.values())) == L + 2


def _one_update(optimizer, model, rng):
    variables = model.trainable_variables
    before = [to_numpy(v).astype("float64") for v in variables]
    grads = [rng.normal(size=v.shape).astype("float32") for v in variables]
    optimizer.apply([keras.ops.convert_to_tensor(g) for g in grads], variables)
    return variables, before, grads


def test_sgd_update_per_block(rng):
    model = MODELS["deit_registers_fc_norm"]()
    lr = 0.1
    optimizer = layer_decay_optimizer(keras.optimizers.SGD(lr, momentum=0.9), model, DECAY)
    variables, before, grads = _one_update(optimizer, model, rng)
    for variable, old, grad in zip(variables, before, grads):
        # First step with momentum: velocity = -lr * g, as plain SGD.
        expected = old - lr * _expected_multiplier(variable.path) * grad
        np.testing.assert_allclose(to_numpy(variable), expected, rtol=0, atol=1e-6, err_msg=variable.path)


def test_adamw_update_per_block_scales_the_step_and_the_decay(rng):
    model = MODELS["plain"]()
    lr, wd, b1, b2, eps = 0.01, 0.1, 0.9, 0.999, 1e-7
    base = keras.optimizers.AdamW(lr, weight_decay=wd, beta_1=b1, beta_2=b2, epsilon=eps)
    optimizer = layer_decay_optimizer(base, model, DECAY)
    variables, before, grads = _one_update(optimizer, model, rng)
    for variable, old, grad in zip(variables, before, grads):
        rate = lr * _expected_multiplier(variable.path)
        # Keras' Adam, step 1: m = (1-b1) g, v = (1-b2) g^2,
        # step = rate * sqrt(1-b2) / (1-b1) * m / (sqrt(v) + eps); the
        # decoupled decay uses the same rate. Scaling g instead would leave
        # the step unchanged (Adam is invariant to the gradient's scale).
        m, v = (1 - b1) * grad, (1 - b2) * grad.astype("float64") ** 2
        step = rate * np.sqrt(1 - b2) / (1 - b1) * m / (np.sqrt(v) + eps)
        expected = old * (1 - rate * wd) - step
        np.testing.assert_allclose(to_numpy(variable), expected, rtol=0, atol=2e-6, err_msg=variable.path)


def test_recipe_option_and_serialisation():
    model = MODELS["plain"]()
    compile_for_finetuning(model, total_steps=10, warmup_steps=2, layer_decay=0.75)
    optimizer = model.optimizer
    assert type(optimizer).__name__ == "LayerDecaySGD"
    assert optimizer.lr_multipliers["encoderblock_0/LayerNorm_0/gamma"] == pytest.approx(0.75 ** L)
    copy = keras.optimizers.deserialize(keras.optimizers.serialize(optimizer))
    assert type(copy).__name__ == "LayerDecaySGD" and copy.lr_multipliers == optimizer.lr_multipliers
    model.train_on_batch(np.zeros((2, 32, 32, 3), "float32"), np.array([0, 1]))


@pytest.mark.parametrize("decay", [0, 1.5, "0.75", -1])
def test_bad_decay_is_named(decay):
    with pytest.raises(ValueError, match="layer_decay"):
        compile_for_finetuning(MODELS["plain"](), total_steps=10, layer_decay=decay)
