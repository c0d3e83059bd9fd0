"""`keras_vit.layers.kernels`: both attention paths and the 2D dense against
NumPy, gradients, and the Keras-layer fallback for quantized/LoRA projections."""

import keras
import numpy as np
import pytest

from conftest import TINY, to_numpy
from keras_vit import ViT, layers
from keras_vit.layers import kernels


def np_attention(q, k, v, scale):
    logits = np.einsum("bqhk,bthk->bhqt", q, k) * scale
    probs = np.exp(logits - logits.max(-1, keepdims=True))
    probs /= probs.sum(-1, keepdims=True)
    return np.einsum("bhqt,bthk->bqhk", probs, v)


@pytest.fixture(params=["fused", "explicit"])
def attention_path(request, monkeypatch):
    """Runs a test once through each attention implementation."""
    fused = request.param == "fused"
    monkeypatch.setattr(kernels, "_use_fused_attention", lambda: fused)
    return request.param


@pytest.mark.parametrize("shape", [(2, 5, 3, 4), (1, 7, 1, 8)])
def test_attention_matches_numpy(rng, attention_path, shape):
    q, k, v = (rng.normal(size=shape).astype("float32") for _ in range(3))
    got = to_numpy(kernels.attention(q, k, v, scale=0.3))
    expected = np_attention(*(a.astype("float64") for a in (q, k, v)), 0.3)
    np.testing.assert_allclose(got, expected, atol=2e-5, rtol=1e-5)


def test_attention_default_scale(rng, attention_path):
    q = rng.normal(size=(1, 4, 2, 16)).astype("float32")
    np.testing.assert_allclose(
        to_numpy(kernels.attention(q, q, q)),
        np_attention(q.astype("float64"), q, q, 0.25),
        atol=2e-5,
    )


def test_attention_paths_agree_under_bfloat16(rng):
    """The explicit path keeps the softmax in float32, like the fused one."""
    q, k, v = (rng.normal(size=(2, 6, 2, 8)).astype("float32") for _ in range(3))
    cast = lambda a: keras.ops.cast(a, "bfloat16")  # noqa: E731
    expected = np_attention(q, k, v, 0.35)
    out = kernels.attention(cast(q), cast(k), cast(v), scale=0.35)
    assert keras.backend.standardize_dtype(out.dtype) == "bfloat16"
    np.testing.assert_allclose(to_numpy(keras.ops.cast(out, "float32")), expected, atol=0.05)


@pytest.mark.parametrize("shape", [(6, 4), (2, 3, 4), (2, 2, 3, 4)])
def test_dense_matches_numpy(rng, shape):
    x = rng.normal(size=shape).astype("float32")
    kernel = rng.normal(size=(4, 5)).astype("float32")
    bias = rng.normal(size=(5,)).astype("float32")
    np.testing.assert_allclose(
        to_numpy(kernels.dense(x, kernel, bias)), x @ kernel + bias, atol=1e-5
    )
    np.testing.assert_allclose(to_numpy(kernels.dense(x, kernel)), x @ kernel, atol=1e-5)


def test_dense_in_a_symbolic_model():
    """Unknown batch and token axes, as in a functional model with None dims."""
    inputs = keras.Input((None, 4))
    kernel = np.ones((4, 3), "float32")
    model = keras.Model(inputs, keras.layers.Lambda(lambda t: kernels.dense(t, kernel))(inputs))
    assert tuple(model(np.ones((2, 7, 4), "float32")).shape) == (2, 7, 3)


def test_model_outputs_and_gradients_agree_across_attention_paths(rng, monkeypatch):
    """The whole model gives the same logits and loss gradients on both paths."""
    model = ViT(**TINY, classes=5, classifier_activation=None)
    for variable in model.trainable_variables:
        variable.assign(rng.normal(scale=0.2, size=variable.shape).astype("float32"))
    x = rng.normal(size=(2, 32, 32, 3)).astype("float32")
    results = {}
    for fused in (True, False):
        monkeypatch.setattr(kernels, "_use_fused_attention", lambda fused=fused: fused)
        results[fused] = (to_numpy(model(x)), _gradient_norms(model, x))
    np.testing.assert_allclose(results[True][0], results[False][0], atol=1e-4)
    np.testing.assert_allclose(results[True][1], results[False][1], rtol=1e-3, atol=1e-6)


def _gradient_norms(model, x):
    """Per-variable gradient norms of the logits' squared sum."""
    backend = keras.backend.backend()
    if backend == "jax":
        import jax

        def loss(values):
            out, _ = model.stateless_call(values, [v.value for v in model.non_trainable_variables], x)
            return (out**2).sum()

        grads = jax.grad(loss)([v.value for v in model.trainable_variables])
    elif backend == "tensorflow":
        import tensorflow as tf

        with tf.GradientTape() as tape:
            loss = tf.reduce_sum(model(x, training=True) ** 2)
        grads = tape.gradient(loss, model.trainable_variables)
    else:
        for v in model.trainable_variables:
            v.value.grad = None
        loss = (model(x, training=True) ** 2).sum()
        loss.backward()
        grads = [v.value.grad for v in model.trainable_variables]
    return np.array([np.linalg.norm(to_numpy(g)) for g in grads])


def test_lora_projections_take_the_keras_layer_path(rng):
    """LoRA-enabled projections are called as Keras layers (their LoRA terms count)."""
    layer = layers.MultiHeadSelfAttention(num_heads=2, head_dim=4)
    x = rng.normal(size=(2, 5, 8)).astype("float32")
    before = to_numpy(layer(x))
    layer.query.enable_lora(2)
    assert not layer._plain_projections()
    layer.query.lora_kernel_b.assign(np.ones(layer.query.lora_kernel_b.shape, "float32"))
    after = to_numpy(layer(x))
    assert np.abs(after - before).max() > 1e-3


def test_quantized_model_stays_close_to_float(rng):
    """int8 projections are called as the Keras layers they became."""
    model = ViT(**TINY, include_top=False, pooling="avg")
    x = rng.normal(size=(2, 32, 32, 3)).astype("float32")
    expected = to_numpy(model(x))
    model.quantize("int8")
    block = model.encoder_blocks[0]
    assert block.attention.query.quantization_mode == "int8"
    assert not block.attention._plain_projections()
    got = to_numpy(model(x))
    scale = np.abs(expected).max()
    assert np.abs(got - expected).max() < 0.05 * scale
