"""`keras_vit.layers.kernels`: both attention paths and the 2D dense against
NumPy, gradients, and the Keras-layer fallback for quantized/LoRA projections."""

import contextlib

import keras
import numpy as np
import pytest

from conftest import TINY, to_numpy
from keras_vit import ViT, layers
from keras_vit.execution import tf_xla
from keras_vit.layers import kernels, onednn


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


class _Shape:
    def __init__(self, *shape):
        self.shape = shape


def test_trace_switches_nest_and_are_restored_after_an_error():
    with kernels.export_mode():
        with kernels.export_mode():
            assert kernels.exporting()
        assert kernels.exporting()  # the inner context restores the outer one's state
    assert not kernels.exporting()
    with pytest.raises(RuntimeError, match="traced"):
        with kernels.xla_compiled():
            assert kernels._XLA_COMPILED.on
            raise RuntimeError("failed while traced")
    assert not kernels._XLA_COMPILED.on
    assert not kernels.exporting()


def test_xla_attention_takes_large_logits_a_group_of_heads_at_a_time():
    """Heads are grouped under XLA only (jax; tensorflow inside `xla_compiled`),
    only past the logits size, in groups that fit the budget."""
    backend = keras.backend.backend()
    group = kernels._head_group(_Shape(1, 1370, 12, 64), _Shape(1, 1370, 12, 64))
    assert kernels.compiled_by_xla() == (backend == "jax")
    if backend != "jax":
        assert group is None
    with kernels.xla_compiled():
        assert kernels.compiled_by_xla() == (backend in ("jax", "tensorflow"))
        group = kernels._head_group(_Shape(1, 1370, 12, 64), _Shape(1, 1370, 12, 64))
        if backend == "torch":
            assert group is None
            return
        assert group == 2  # B/14 at 518 px: 12 heads of 7.2 MiB logits, 2 fit in 16 MiB
        assert kernels._head_group(_Shape(8, 577, 12, 64), _Shape(8, 577, 12, 64)) == 12
        assert kernels._head_group(_Shape(1, 577, 12, 64), _Shape(1, 577, 12, 64)) is None
        assert kernels._head_group(_Shape(None, 1370, 12, 64), _Shape(None, 1370, 12, 64)) is None
        # One head's logits over the group budget: one at a time.
        assert kernels._head_group(_Shape(1, 2500, 12, 64), _Shape(1, 2500, 12, 64)) == 1
    assert not kernels._XLA_COMPILED.on


def _xla_attention(backend, dtype, gradients):
    """`kernels.attention` compiled by XLA: its output (and q, k, v gradients)."""
    def loss(q, k, v):
        out = kernels.attention(*(keras.ops.cast(a, dtype) for a in (q, k, v)), scale=0.4)
        return keras.ops.sum(keras.ops.cast(out, "float32") ** 2), out

    if backend == "jax":
        import jax
        import jax.numpy as jnp

        if not gradients:
            return lambda q, k, v: [jax.jit(loss)(*map(jnp.asarray, (q, k, v)))[1]]
        step = jax.jit(jax.value_and_grad(loss, argnums=(0, 1, 2), has_aux=True))
        return lambda q, k, v: (lambda r: [r[0][1], *r[1]])(step(*map(jnp.asarray, (q, k, v))))
    import tensorflow as tf

    def step(q, k, v):
        with tf.GradientTape() as tape:
            tape.watch([q, k, v])
            value, out = loss(q, k, v)
        return [out, *tape.gradient(value, [q, k, v])] if gradients else [out]

    compiled = tf.function(step, jit_compile=True)
    return lambda q, k, v: compiled(*map(tf.constant, (q, k, v)))


@pytest.mark.parametrize("dtype", ["float32", "bfloat16"])
def test_grouped_attention_equals_all_heads_at_once(rng, monkeypatch, dtype):
    """Under XLA, values (and on jax, gradients) of the grouped path equal the all-heads path's."""
    backend = keras.backend.backend()
    q, k, v = (rng.normal(size=(2, 9, 3, 4)).astype("float32") for _ in range(3))
    if backend == "torch":
        monkeypatch.setattr(kernels, "GROUPED_ATTENTION_BYTES", 0)
        with kernels.xla_compiled():
            assert kernels._head_group(q, k) is None
        return
    monkeypatch.setattr(kernels, "_use_fused_attention", lambda: False)
    calls = []
    grouped_attention = kernels._grouped_attention
    monkeypatch.setattr(kernels, "_grouped_attention", lambda *a: calls.append(a[-1]) or grouped_attention(*a))

    def run(grouped):
        monkeypatch.setattr(kernels, "GROUPED_ATTENTION_BYTES", 0 if grouped else 2**40)
        monkeypatch.setattr(kernels, "ATTENTION_GROUP_BYTES", 2 * 4 * 9 * 9)
        with kernels.xla_compiled():
            assert kernels._head_group(q, k) == (2 if grouped else None)  # 6 heads, 3 groups
            results = _xla_attention(backend, dtype, gradients=backend == "jax")(q, k, v)
        assert keras.backend.standardize_dtype(results[0].dtype) == dtype
        return [np.asarray(keras.ops.convert_to_numpy(keras.ops.cast(t, "float32"))) for t in results]

    grouped = run(True)
    assert calls == [2]  # traced once, through the grouped path
    whole = run(False)
    assert calls == [2]
    np.testing.assert_allclose(grouped[0], np_attention(q, k, v, 0.4), atol=0.05 if dtype == "bfloat16" else 2e-5)
    for a, b in zip(grouped, whole):
        np.testing.assert_allclose(a, b, atol=1e-6 if dtype == "float32" else 1e-2)


def test_predict_groups_heads_where_xla_compiles_it(rng, monkeypatch):
    """Tensorflow's XLA predict function traces inside `xla_compiled` (grouped
    heads), its eager call and torch do not; the predictions are the call's."""
    backend = keras.backend.backend()
    model = ViT(**TINY, classes=4, classifier_activation=None)
    x = rng.normal(size=(2, 32, 32, 3)).astype("float32")
    monkeypatch.setattr(kernels, "_use_fused_attention", lambda: False)
    monkeypatch.setattr(kernels, "GROUPED_ATTENTION_BYTES", 0)
    monkeypatch.setattr(kernels, "ATTENTION_GROUP_BYTES", 4 * 17 * 17)  # one of 17 x 17 logits
    calls = []
    grouped_attention = kernels._grouped_attention
    monkeypatch.setattr(kernels, "_grouped_attention", lambda *a: calls.append(a[-1]) or grouped_attention(*a))
    eager = to_numpy(model(x))
    assert bool(calls) == (backend == "jax")
    calls.clear()
    np.testing.assert_allclose(model.predict(x, verbose=0), eager, atol=1e-5)
    xla_predict = backend == "jax" or (backend == "tensorflow" and tf_xla.uses_xla(model))
    assert bool(calls) == xla_predict
    assert not kernels._XLA_COMPILED.on


def test_scale_multiplies_the_queries_where_no_rounding_is_added():
    """Folded into q in float32, and in bfloat16 only for a power-of-two scale."""
    f32 = keras.ops.ones((1, 2, 1, 4), "float32")
    bf16 = keras.ops.ones((1, 2, 1, 4), "bfloat16")
    assert kernels._fold_scale(f32, 0.3) and kernels._fold_scale(f32, 0.125)
    assert kernels._fold_scale(bf16, 0.125) and kernels._fold_scale(bf16, 1 / 64**0.5)
    assert not kernels._fold_scale(bf16, 0.3) and not kernels._fold_scale(bf16, 1 / 80**0.5)


@pytest.mark.parametrize("scale", [0.125, 0.3])
def test_explicit_bfloat16_attention_matches_numpy_with_either_scale(rng, monkeypatch, scale):
    """Folded (power of two) or on the logits, bfloat16 attention stays near float64."""
    monkeypatch.setattr(kernels, "_use_fused_attention", lambda: False)
    q, k, v = (rng.normal(size=(2, 6, 3, 16)).astype("float32") for _ in range(3))
    cast = lambda a: keras.ops.cast(a, "bfloat16")  # noqa: E731
    got = to_numpy(keras.ops.cast(kernels.attention(cast(q), cast(k), cast(v), scale=scale), "float32"))
    rounded = [to_numpy(keras.ops.cast(cast(a), "float32")).astype("float64") for a in (q, k, v)]
    np.testing.assert_allclose(got, np_attention(*rounded, scale), atol=0.03)


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


def _value_and_grads(fn, arrays, weights):
    """`fn(*arrays)` and the gradients of `sum(fn(*arrays) * weights)` wrt each array."""
    backend = keras.backend.backend()
    if backend == "jax":
        import jax

        out = fn(*arrays)
        grads = jax.grad(lambda *a: (fn(*a) * weights).sum(), argnums=tuple(range(len(arrays))))(*arrays)
    elif backend == "tensorflow":
        import tensorflow as tf

        tensors = [tf.convert_to_tensor(a) for a in arrays]
        with tf.GradientTape() as tape:
            tape.watch(tensors)
            out = fn(*tensors)
            loss = tf.reduce_sum(out * weights)
        grads = tape.gradient(loss, tensors)
    else:
        import torch

        tensors = [torch.tensor(a, requires_grad=True) for a in arrays]
        out = fn(*tensors)
        (out * torch.from_numpy(weights)).sum().backward()
        grads = [t.grad for t in tensors]
    return to_numpy(out), [to_numpy(g) for g in grads]


@pytest.mark.parametrize("shape", [(6, 8), (2, 5, 8)])
@pytest.mark.parametrize("with_bias", [True, False])
def test_dense_fast_path_matches_plain_ops(rng, monkeypatch, shape, with_bias):
    """torch's oneDNN `dense` against `keras.ops.matmul` + bias, forward and
    gradients; every other backend (and export mode) keeps the portable path."""
    taken = []
    applies = onednn.applies
    monkeypatch.setattr(
        onednn, "applies", lambda *a: taken.append(applies(*a)) or taken[-1]
    )
    x = rng.normal(size=shape).astype("float32")
    kernel = rng.normal(size=(8, 12)).astype("float32")
    arrays = [x, kernel] + ([rng.normal(size=(12,)).astype("float32")] if with_bias else [])
    weights = rng.normal(size=(*shape[:-1], 12)).astype("float32")

    def plain(x, kernel, bias=None):
        y = keras.ops.matmul(x, kernel)
        return y if bias is None else y + bias

    got, got_grads = _value_and_grads(kernels.dense, arrays, weights)
    expected, expected_grads = _value_and_grads(plain, arrays, weights)
    np.testing.assert_allclose(got, expected, atol=1e-5, rtol=1e-5)
    for g, e in zip(got_grads, expected_grads):
        np.testing.assert_allclose(g, e, atol=1e-5, rtol=1e-5)
    if keras.backend.backend() == "torch":
        import torch

        assert taken and all(taken) == torch.backends.mkldnn.is_available()
    else:
        assert taken == []
    del taken[:]
    with kernels.export_mode():
        kernels.dense(x, kernel)
    assert taken == []


def test_training_step_is_the_same_on_both_dense_paths(rng, monkeypatch):
    """One `fit` step moves the weights identically with and without oneDNN
    (the weight is never prepacked, so an update is seen at the next call)."""
    x = rng.normal(size=(4, 32, 32, 3)).astype("float32")
    y = rng.integers(0, 5, size=(4,))
    results = []
    for fast in (True, False):
        monkeypatch.setattr(onednn, "ENABLED", [fast])
        keras.utils.set_random_seed(1)
        model = ViT(**TINY, classes=5, classifier_activation=None)
        model.compile(keras.optimizers.SGD(0.1), keras.losses.SparseCategoricalCrossentropy(from_logits=True))
        init = np.random.default_rng(3)
        for variable in model.trainable_variables:
            variable.assign(init.normal(scale=0.2, size=variable.shape).astype("float32"))
        initial = [to_numpy(v) for v in model.trainable_variables]
        model.fit(x, y, batch_size=4, epochs=2, verbose=0)
        results.append((initial, [to_numpy(v) for v in model.trainable_variables], model.predict(x, verbose=0)))
    (init_a, after_a, pred_a), (init_b, after_b, pred_b) = results
    for a, b in zip(init_a, init_b):
        np.testing.assert_array_equal(a, b)
    for a, b in zip(after_a, after_b):
        np.testing.assert_allclose(a, b, atol=1e-5)
    np.testing.assert_allclose(pred_a, pred_b, atol=1e-4)


@pytest.mark.parametrize("export", [False, True])
@pytest.mark.parametrize("with_bias", [True, False])
def test_dense_takes_multi_axis_kernels_as_the_attention_layout(rng, export, with_bias):
    """`(D, heads, head_dim)` kernels give `(..., heads, head_dim)`, and `axes=2`
    contracts `(heads, head_dim)` with `(heads, head_dim, D)`, as `einsum` does."""
    x = rng.normal(size=(2, 5, 6)).astype("float32")
    qkv = rng.normal(size=(6, 2, 3)).astype("float32")
    out = rng.normal(size=(2, 3, 6)).astype("float32")
    qkv_bias = rng.normal(size=(2, 3)).astype("float32") if with_bias else None
    out_bias = rng.normal(size=(6,)).astype("float32") if with_bias else None
    with kernels.export_mode() if export else contextlib.nullcontext():
        heads = to_numpy(kernels.dense(x, qkv, qkv_bias))
        back = to_numpy(kernels.dense(heads, out, out_bias, axes=2))
    expected_heads = np.einsum("btd,dhk->bthk", x, qkv) + (0 if qkv_bias is None else qkv_bias)
    np.testing.assert_allclose(heads, expected_heads, atol=1e-5, rtol=1e-5)
    expected_back = np.einsum("bthk,hkd->btd", heads, out) + (0 if out_bias is None else out_bias)
    np.testing.assert_allclose(back, expected_back, atol=1e-5, rtol=1e-5)


def test_dense_multi_axis_gradients(rng):
    """Gradients through the multi-axis forms equal those of the einsums."""
    x = rng.normal(size=(2, 4, 2, 3)).astype("float32")
    kernel = rng.normal(size=(2, 3, 5)).astype("float32")
    bias = rng.normal(size=(5,)).astype("float32")
    weights = rng.normal(size=(2, 4, 5)).astype("float32")
    got, got_grads = _value_and_grads(
        lambda x, k, b: kernels.dense(x, k, b, axes=2), [x, kernel, bias], weights
    )
    expected, expected_grads = _value_and_grads(
        lambda x, k, b: keras.ops.einsum("bthk,hkd->btd", x, k) + b, [x, kernel, bias], weights
    )
    np.testing.assert_allclose(got, expected, atol=1e-5, rtol=1e-5)
    for g, e in zip(got_grads, expected_grads):
        np.testing.assert_allclose(g, e, atol=1e-5, rtol=1e-5)


def test_torch_inference_dense_skips_the_autograd_function(rng, monkeypatch):
    """Without gradients to record, torch's oneDNN `dense` calls the GEMM
    directly (the same numbers) instead of through its autograd function."""
    if keras.backend.backend() != "torch":
        pytest.skip("the autograd function is torch's own")
    import torch

    if not onednn.applies(torch.ones(2, 2), torch.ones(2, 2), None):
        pytest.skip("torch has no oneDNN on this machine")
    made = []
    real = onednn.autograd_linear
    monkeypatch.setattr(onednn, "autograd_linear", lambda: made.append(1) or real())
    x = torch.tensor(rng.normal(size=(3, 4, 8)).astype("float32"))
    kernel = torch.tensor(rng.normal(size=(8, 2, 5)).astype("float32"), requires_grad=True)
    with torch.no_grad():
        plain = kernels.dense(x, kernel)
    assert made == []
    recorded = kernels.dense(x, kernel)
    assert made == [1] and recorded.requires_grad
    torch.testing.assert_close(plain, recorded.detach(), atol=0, rtol=0)
    np.testing.assert_allclose(
        to_numpy(plain), np.einsum("btd,dhk->bthk", x.numpy(), kernel.detach().numpy()), atol=1e-5
    )


@pytest.mark.parametrize("dtype", ["float32", "bfloat16"])
@pytest.mark.parametrize("name", ["gelu_tanh", "gelu", "quick_gelu"])
def test_dense_with_activation_equals_the_activation_after_it(rng, monkeypatch, dtype, name):
    """`dense(..., activation=name)` against the product and then
    `activation`; on torch's oneDNN path the tanh GELU is the GEMM's post-op."""
    post_ops = []
    real = onednn.linear_pointwise
    monkeypatch.setattr(
        onednn, "linear_pointwise", lambda *a: post_ops.append(a[3:]) or real(*a)
    )
    x = keras.ops.cast(rng.normal(size=(2, 9, 16)).astype("float32"), dtype)
    kernel = keras.ops.cast(rng.normal(scale=0.3, size=(16, 24)).astype("float32"), dtype)
    bias = keras.ops.cast(rng.normal(size=(24,)).astype("float32"), dtype)
    got = kernels.dense(x, kernel, bias, activation=name)
    post_ops_taken = list(post_ops)
    expected = kernels.activation(kernels.dense(x, kernel, bias), name)
    assert keras.backend.standardize_dtype(got.dtype) == dtype
    got, expected = (to_numpy(keras.ops.cast(t, "float32")) for t in (got, expected))
    if dtype == "float32":
        np.testing.assert_allclose(got, expected, atol=1e-6, rtol=1e-6)
    else:
        # One bfloat16 rounding apart at most (the fused GELU rounds once).
        np.testing.assert_allclose(got, expected, atol=2e-2, rtol=1e-2)
    on_onednn = keras.backend.backend() == "torch" and onednn.applies(
        *(keras.ops.convert_to_tensor(t) for t in (x, kernel, bias))
    )
    if on_onednn and name == "gelu_tanh":
        assert post_ops_taken == [("gelu", "tanh")]
    else:
        assert ("gelu", "tanh") not in post_ops_taken


def test_dense_with_activation_keeps_gradients(rng):
    """With gradients to record the activation is a separate op, differentiable."""
    x = rng.normal(size=(2, 5, 8)).astype("float32")
    kernel = rng.normal(scale=0.3, size=(8, 6)).astype("float32")
    bias = rng.normal(size=(6,)).astype("float32")
    weights = rng.normal(size=(2, 5, 6)).astype("float32")
    got, got_grads = _value_and_grads(
        lambda x, k, b: kernels.dense(x, k, b, activation="gelu_tanh"), [x, kernel, bias], weights
    )
    expected, expected_grads = _value_and_grads(
        lambda x, k, b: keras.ops.gelu(keras.ops.matmul(x, k) + b, approximate=True),
        [x, kernel, bias],
        weights,
    )
    np.testing.assert_allclose(got, expected, atol=1e-5, rtol=1e-5)
    for g, e in zip(got_grads, expected_grads):
        np.testing.assert_allclose(g, e, atol=1e-5, rtol=1e-5)


def _packings(model):
    """The oneDNN packings of a model's kernels: {path: `onednn.Packing`}."""
    out = {}
    for variable in model.weights:
        packing = getattr(variable.value, onednn.PACKING, None)
        if packing is not None:
            out[variable.path] = packing
    return out


def _onednn_here(dtype="float32"):
    if keras.backend.backend() != "torch":
        return False
    import torch

    t = torch.ones(2, 2, dtype=getattr(torch, dtype))
    return onednn.applies(t, t, None)


@pytest.mark.parametrize("dtype", ["float32", "bfloat16"])
def test_for_inference_packs_kernels_once_and_follows_assignments(rng, dtype):
    """A `for_inference` copy keeps its projection kernels in oneDNN's layout on
    torch: outputs bit-equal to the original's, one packing per projection,
    made on first use and remade after the kernel is assigned (never stale)."""
    model = ViT(**TINY, classes=5, classifier_activation=None, dtype=dtype)
    other = ViT(**TINY, classes=5, classifier_activation=None, dtype=dtype)
    x = rng.normal(size=(3, 32, 32, 3)).astype("float32")
    fast = model.for_inference()
    packings = _packings(fast)
    got = fast.predict(x, verbose=0)
    expected = model.predict(x, verbose=0)
    if not _onednn_here(dtype):
        assert not any(p.packed is not None for p in packings.values())
        np.testing.assert_allclose(got, expected, atol=1e-5)
        return
    np.testing.assert_array_equal(got, expected)
    # Six products a block (query, key, value, out, two MLP layers), the head's
    # plain Dense is not among them.
    used = {path: p for path, p in packings.items() if p.packed is not None}
    assert len(used) == 6 * TINY["num_layers"], sorted(used)
    first = {path: p.packed for path, p in used.items()}
    fast.predict(x, verbose=0)
    assert all(used[path].packed is first[path] for path in used)  # packed once
    fast.set_weights(other.get_weights())
    np.testing.assert_array_equal(fast.predict(x, verbose=0), other.predict(x, verbose=0))
    assert all(used[path].packed is not first[path] for path in used)
    # One kernel assigned alone is seen too.
    block = fast.get_layer("encoderblock_0")
    kernel = block.mlp.dense_0.kernel
    kernel.assign(to_numpy(kernel) * 2)
    other.get_layer("encoderblock_0").mlp.dense_0.kernel.assign(to_numpy(kernel))
    np.testing.assert_array_equal(fast.predict(x, verbose=0), other.predict(x, verbose=0))


def test_packed_kernels_leave_gradients_and_copies_alone(rng):
    """Gradients through a `for_inference` copy (saliency) use the plain kernels,
    and copying or saving a used copy works and makes fresh packings."""
    import copy

    model = ViT(**TINY, classes=5, classifier_activation=None)
    for variable in model.weights:  # the head starts at zero: no input gradient
        variable.assign(rng.normal(scale=0.2, size=variable.shape).astype("float32"))
    fast = model.for_inference()
    x = rng.normal(size=(2, 32, 32, 3)).astype("float32")
    fast.predict(x, verbose=0)
    if keras.backend.backend() == "torch":
        import torch

        inputs = [torch.tensor(x, requires_grad=True) for _ in range(2)]
        for net, t in zip((fast, model), inputs):
            net(t).sum().backward()
        np.testing.assert_allclose(to_numpy(inputs[0].grad), to_numpy(inputs[1].grad), atol=1e-5)
        assert to_numpy(inputs[0].grad).any()
    for packing in _packings(fast).values():
        fresh = copy.deepcopy(packing)
        assert fresh.packed is None and fresh.version is None
    kernel = fast.get_layer("encoderblock_0").mlp.dense_0.kernel
    if keras.backend.backend() == "torch":
        twin = copy.deepcopy(kernel.value)
        packing = getattr(twin, onednn.PACKING, None)
        assert packing is None or packing.packed is None
        torch.testing.assert_close(twin, kernel.value, atol=0, rtol=0)


def test_pack_for_inference_marks_only_torch_kernels():
    layer = keras.layers.Dense(4)
    layer.build((None, 3))
    onednn.pack_for_inference(layer.weights)
    marked = [getattr(v.value, onednn.PACKING, None) is not None for v in layer.weights]
    assert marked == ([True, False] if keras.backend.backend() == "torch" else [False, False])


@pytest.mark.parametrize("name", ["gelu_tanh", "gelu"])
def test_dense_with_a_gelu_matches_numpy_and_is_fusable_on_tensorflow(rng, name):
    """`dense(..., activation=GELU)` against NumPy on every backend; on
    tensorflow the bias is a `BiasAdd` on the GEMM's output and the GELU
    `tf.nn.gelu` on that, the form TensorFlow's graph optimizer folds into
    oneDNN's GEMM."""
    x = rng.normal(size=(2, 5, 8)).astype("float32")
    kernel = rng.normal(scale=0.3, size=(8, 12)).astype("float32")
    bias = rng.normal(size=(12,)).astype("float32")
    if keras.backend.backend() == "tensorflow":
        import tensorflow as tf

        graph = tf.function(lambda *a: kernels.dense(*a, activation=name)).get_concrete_function(
            *(tf.TensorSpec(a.shape, a.dtype) for a in (x, kernel, bias))
        ).graph
        (matmul,) = [op for op in graph.get_operations() if op.type == "MatMul"]
        assert [c.type for c in matmul.outputs[0].consumers()] == ["BiasAdd"]
    got = to_numpy(kernels.dense(x, kernel, bias, activation=name))
    pre = x @ kernel + bias
    if name == "gelu_tanh":
        expected = 0.5 * pre * (1 + np.tanh(np.sqrt(2 / np.pi) * (pre + 0.044715 * pre**3)))
    else:
        from scipy.special import erf

        expected = 0.5 * pre * (1 + erf(pre / np.sqrt(2)))
    np.testing.assert_allclose(got, expected, atol=1e-5, rtol=1e-5)
