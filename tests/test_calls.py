"""`keras_vit.kernels.call_sublayer`: sublayers called past Keras' `__call__` on
torch's eager path ("direct_calls"), with the same numbers, and through
`__call__` wherever it does more."""

import keras
import numpy as np
import pytest

from conftest import TINY, to_numpy
from kernel_helpers import taken
from keras_vit import ViT, kernels
from keras_vit.layers import MlpBlock, MultiHeadSelfAttention, TransformerBlock

TORCH = keras.backend.backend() == "torch"


def _direct_call_applies(layer, x):
    from keras_vit.kernels import torch_backend

    return torch_backend.direct_call_applies(layer, x)


def _through_keras():
    """A context in which every sublayer call goes through Keras' `__call__`."""
    return kernels.disabled("direct_calls", "half_layer_norm")


def _norm(dtype=None, shape=(1, 4, 8)):
    layer = keras.layers.LayerNormalization(dtype=dtype)
    layer.build(shape)
    return layer


def _tensor(rng, shape=(1, 4, 8), dtype="float32"):
    return keras.ops.cast(rng.normal(size=shape).astype("float32"), dtype)


@pytest.mark.parametrize(
    "make",
    [
        lambda: _norm(),
        lambda: MlpBlock(mlp_dim=16),
        lambda: MultiHeadSelfAttention(num_heads=2, head_dim=4),
        lambda: TransformerBlock(num_heads=2, mlp_dim=16),
    ],
    ids=["layer_norm", "mlp", "attention", "block"],
)
def test_call_sublayer_equals_the_layer_call(rng, make):
    layer = make()
    x = _tensor(rng)
    expected = to_numpy(layer(x))
    with taken() as paths:
        got = to_numpy(kernels.call_sublayer(layer, x))
    np.testing.assert_array_equal(got, expected)
    # The outer call completes last (a block's own sublayers run inside it).
    assert ("direct_calls" in paths) == TORCH and (not TORCH or paths[-1] == "direct_calls")


def test_direct_calls_are_refused_where_keras_call_does_more(rng):
    """Each condition on its own sends the call through `__call__`."""
    if not TORCH:
        pytest.skip("direct sublayer calls are torch's fast path: jax and tensorflow trace each call once")
    x = _tensor(rng)
    assert _direct_call_applies(_norm(), x)
    assert not _direct_call_applies(_norm(), keras.KerasTensor((1, 4, 8)))
    unbuilt = keras.layers.LayerNormalization()
    assert not _direct_call_applies(unbuilt, x)
    # Inputs Keras would cast first, or whose mask it would carry.
    assert not _direct_call_applies(_norm(), keras.ops.cast(x, "float16"))
    masked = _tensor(rng)
    from keras.src.backend import set_keras_mask

    set_keras_mask(masked, keras.ops.ones((1, 4), "bool"))
    assert not _direct_call_applies(_norm(), masked)
    # A mixed-precision layer outside its autocast scope.
    assert not _direct_call_applies(_norm("mixed_bfloat16"), keras.ops.cast(x, "bfloat16"))
    regularized = keras.layers.LayerNormalization(activity_regularizer="l2")
    regularized.build((1, 4, 8))
    assert not _direct_call_applies(regularized, x)
    with keras.RematScope(mode="full"):
        rematerialized = _norm()
    assert not _direct_call_applies(rematerialized, x)
    quantized = keras.layers.Dense(8)
    quantized.build((1, 4, 8))
    quantized.quantize("int8")
    assert not _direct_call_applies(quantized, x)
    # While exporting, the dispatcher tries no fast path at all.
    with kernels.export_mode(), taken() as paths:
        kernels.call_sublayer(_norm(), x)
    assert paths == []


def test_torch_hooks_still_see_every_sublayer_call(rng):
    """A forward hook on a block's sublayer, or a global one, keeps firing:
    such calls go through `__call__`."""
    if not TORCH:
        pytest.skip("torch module hooks exist on torch only")
    import torch

    model = ViT(**TINY, classes=3)
    block = model.get_layer("encoderblock_0")
    seen = []
    handle = block.norm_0.register_forward_hook(lambda *a: seen.append("norm_0"))
    x = rng.normal(size=(1, 32, 32, 3)).astype("float32")
    model(x)
    handle.remove()
    assert seen == ["norm_0"]
    names = []
    handle = torch.nn.modules.module.register_module_forward_hook(
        lambda module, *a: names.append(getattr(module, "name", None))
    )
    try:
        model(x)
    finally:
        handle.remove()
    for sublayer in ("LayerNorm_0", "MultiHeadDotProductAttention_1", "LayerNorm_2", "MlpBlock_3"):
        assert names.count(sublayer) == TINY["num_layers"]


def _count_sublayer_calls(monkeypatch, model, x):
    names = []
    original = keras.layers.Layer.__call__

    def counting(self, *args, **kwargs):
        names.append(self.name)
        return original(self, *args, **kwargs)

    monkeypatch.setattr(keras.layers.Layer, "__call__", counting)
    model(x)
    monkeypatch.setattr(keras.layers.Layer, "__call__", original)
    return names


def test_eager_torch_blocks_call_their_sublayers_directly(rng, monkeypatch):
    model = ViT(**TINY, classes=3)
    x = rng.normal(size=(1, 32, 32, 3)).astype("float32")
    names = _count_sublayer_calls(monkeypatch, model, x)
    blocks = sum(name.startswith("encoderblock_") for name in names)
    assert blocks == TINY["num_layers"]
    inside = sum(name in ("LayerNorm_0", "LayerNorm_2", "MlpBlock_3") for name in names)
    assert inside == (0 if TORCH else 3 * TINY["num_layers"])


@pytest.mark.parametrize("policy", ["float32", "mixed_bfloat16", "bfloat16"])
def test_model_outputs_equal_with_and_without_direct_calls(rng, policy):
    keras.config.set_dtype_policy(policy)
    try:
        keras.utils.set_random_seed(0)
        model = ViT(**TINY, classes=3, classifier_activation=None)
        x = rng.normal(size=(2, 32, 32, 3)).astype("float32")
        direct = to_numpy(keras.ops.cast(model(x), "float32"))
        with _through_keras():
            through_keras = to_numpy(keras.ops.cast(model(x), "float32"))
    finally:
        keras.config.set_dtype_policy("float32")
    np.testing.assert_array_equal(direct, through_keras)


def test_training_with_dropout_is_the_same_with_and_without_direct_calls(rng):
    """Dropout masks, stochastic depth and the weight updates of two `fit`
    steps are those of the `__call__` path (same seeds, same draws)."""
    x = rng.normal(size=(4, 32, 32, 3)).astype("float32")
    y = rng.integers(0, 3, size=(4,))
    results = []
    for switch in (kernels.disabled(), _through_keras()):
        with switch:
            keras.utils.set_random_seed(2)
            model = ViT(
                **TINY, classes=3, classifier_activation=None, dropout_rate=0.2,
                attention_dropout_rate=0.1, stochastic_depth_rate=0.1, seed=5,
            )
            model.compile(
                keras.optimizers.SGD(0.1), keras.losses.SparseCategoricalCrossentropy(from_logits=True)
            )
            model.fit(x, y, batch_size=2, epochs=1, verbose=0, shuffle=False)
        results.append([to_numpy(v) for v in model.trainable_variables])
    for a, b in zip(*results):
        np.testing.assert_allclose(a, b, atol=1e-6)
