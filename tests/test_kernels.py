"""`keras_vit.kernels`: every attention path and the dense forms against NumPy,
gradients, the switches, and the Keras-layer fallback for quantized/LoRA
projections."""

import contextlib

import keras
import numpy as np
import pytest

import reference
from conftest import TINY, inference, to_numpy
from kernel_helpers import (
    BACKEND, onednn_by_default, onednn_computes_here, only, taken, value_and_grads,
)
from keras_vit import ViT, kernels, layers
from keras_vit.execution import tf_xla
from keras_vit.kernels import portable, registry, switches, torch_backend, xla

ATTENTION_PATHS = [o.name for o in registry.registered("attention", BACKEND)] + ["portable"]


def np_attention(q, k, v, scale):
    logits = np.einsum("bqhk,bthk->bhqt", q, k) * scale
    probs = np.exp(logits - logits.max(-1, keepdims=True))
    probs /= probs.sum(-1, keepdims=True)
    return np.einsum("bhqt,bthk->bqhk", probs, v)


@pytest.fixture(params=ATTENTION_PATHS)
def attention_path(request):
    """Runs a test once through each attention implementation of the backend."""
    with only(request.param):
        yield request.param


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


def test_model_outputs_and_gradients_agree_across_attention_paths(rng):
    """The whole model gives the same logits and loss gradients on every path."""
    model = ViT(**TINY, classes=5, classifier_activation=None)
    for variable in model.trainable_variables:
        variable.assign(rng.normal(scale=0.2, size=variable.shape).astype("float32"))
    x = rng.normal(size=(2, 32, 32, 3)).astype("float32")
    results = {}
    for name in ATTENTION_PATHS:
        with only(name):  # (jax traces the model's call inside it)
            logits, grads = inference(lambda x: (model(x), _gradients(model, x)), x)
        results[name] = (logits, np.array([np.linalg.norm(g) for g in grads]))
    for name, (logits, norms) in results.items():
        np.testing.assert_allclose(logits, results["portable"][0], atol=1e-4, err_msg=name)
        np.testing.assert_allclose(norms, results["portable"][1], rtol=1e-3, atol=1e-6, err_msg=name)


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
            assert switches._XLA_COMPILED.value
            raise RuntimeError("failed while traced")
    assert not switches._XLA_COMPILED.value
    assert not kernels.exporting()


def test_fast_path_switches_nest_and_name_their_paths():
    assert kernels.is_enabled("onednn") and kernels.is_enabled("xla_attention")
    with kernels.disabled("onednn"):
        assert not kernels.is_enabled("onednn") and kernels.is_enabled("sdpa")
        with kernels.portable_only():
            assert not any(kernels.is_enabled(name) for name in registry.names())
        assert kernels.is_enabled("sdpa")
        with kernels.disabled("sdpa"):
            assert not kernels.is_enabled("onednn") and not kernels.is_enabled("sdpa")
        assert kernels.is_enabled("sdpa")
    assert kernels.is_enabled("onednn")
    with pytest.raises(RuntimeError):
        with kernels.forced("sdpa"):
            assert switches.is_forced("sdpa")
            raise RuntimeError
    assert not switches.is_forced("sdpa")
    with pytest.raises(ValueError, match="Received: 'onedn'. Did you mean 'onednn'"):
        kernels.disabled("onedn")


def test_every_backend_registers_its_fast_paths_by_name():
    """The registry lists every backend's paths on any backend (the libraries
    are imported only when a path runs)."""
    names = {(o.backend, o.op, o.name) for o in registry.registered()}
    assert {("torch", "dense", "onednn"), ("torch", "dense", "torch_linear"),
            ("torch", "attention", "sdpa"), ("torch", "call_sublayer", "half_layer_norm"),
            ("torch", "call_sublayer", "direct_calls"), ("jax", "dense", "xla_dense"),
            ("jax", "attention", "xla_attention"), ("tensorflow", "dense", "fused_bias_gelu"),
            ("tensorflow", "gelu", "erf_gelu"), ("jax", "call_sublayer", "xla_convolutions"),
            ("tensorflow", "call_sublayer", "xla_convolutions"),
            ("torch", "decomposed_attention", "chunked_decomposed_attention"),
            ("torch", "mlp", "row_chunked_mlp"),
            ("torch", "conv_relu_conv", "row_blocked_convs"),
            ("jax", "decomposed_attention", "xla_decomposed_attention"),
            ("tensorflow", "decomposed_attention", "xla_decomposed_attention")} <= names
    with pytest.raises(ValueError, match="already registered"):
        registry.register("dense", "torch", "onednn")(lambda *a: None)
    with pytest.raises(ValueError, match="Unknown op"):
        registry.register("softmax", "torch", "mine")


def test_a_path_that_cannot_compute_a_call_hands_it_on(rng):
    """The dispatcher tries the next path, then the portable form, when a path
    returns NotImplemented; a disabled path is never called."""
    seen = []

    def declines(x, approximate):
        seen.append("declines")
        return NotImplemented

    registry.register("gelu", BACKEND, "test_declines")(declines)
    try:
        x = rng.normal(size=(3,)).astype("float32")
        np.testing.assert_allclose(to_numpy(kernels.gelu(x)), to_numpy(keras.ops.gelu(x)), atol=1e-7)
        assert seen == ["declines"]
        with kernels.disabled("test_declines"):
            kernels.gelu(x)
        assert seen == ["declines"]
    finally:
        registry.unregister("gelu", BACKEND, "test_declines")


def test_xla_attention_takes_large_logits_a_group_of_heads_at_a_time():
    """Heads are grouped under XLA only (jax; tensorflow inside `xla_compiled`),
    only past the logits size, in groups that fit the budget."""
    backend = keras.backend.backend()
    group = xla.head_group(_Shape(1, 1370, 12, 64), _Shape(1, 1370, 12, 64))
    assert kernels.compiled_by_xla() == (backend == "jax")
    if backend != "jax":
        assert group is None
    with kernels.xla_compiled():
        assert kernels.compiled_by_xla() == (backend in ("jax", "tensorflow"))
        group = xla.head_group(_Shape(1, 1370, 12, 64), _Shape(1, 1370, 12, 64))
        if backend == "torch":
            assert group is None
            return
        assert group == 2  # B/14 at 518 px: 12 heads of 7.2 MiB logits, 2 fit in 16 MiB
        assert xla.head_group(_Shape(8, 577, 12, 64), _Shape(8, 577, 12, 64)) == 12
        assert xla.head_group(_Shape(1, 577, 12, 64), _Shape(1, 577, 12, 64)) is None
        assert xla.head_group(_Shape(None, 1370, 12, 64), _Shape(None, 1370, 12, 64)) is None
        # One head's logits over the group budget: one at a time.
        assert xla.head_group(_Shape(1, 2500, 12, 64), _Shape(1, 2500, 12, 64)) == 1
    assert not switches._XLA_COMPILED.value


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
        monkeypatch.setattr(xla, "GROUPED_ATTENTION_BYTES", 0)
        with kernels.xla_compiled():
            assert xla.head_group(q, k) is None
        return
    calls = []
    grouped_attention = xla._grouped_attention
    monkeypatch.setattr(xla, "_grouped_attention", lambda *a: calls.append(a[-2]) or grouped_attention(*a))

    def run(grouped):
        monkeypatch.setattr(xla, "GROUPED_ATTENTION_BYTES", 0 if grouped else 2**40)
        monkeypatch.setattr(xla, "ATTENTION_GROUP_BYTES", 2 * 4 * 9 * 9)
        with kernels.xla_compiled(), only("xla_attention"):
            assert xla.head_group(q, k) == (2 if grouped else None)  # 6 heads, 3 groups
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


def np_decomposed_attention(q, k, v, scale, rows, columns):
    logits = np.einsum("bqhk,bthk->bhqt", q, k) * scale
    logits = logits + (rows[..., :, None] + columns[..., None, :]).reshape(logits.shape)
    probs = np.exp(logits - logits.max(-1, keepdims=True))
    probs /= probs.sum(-1, keepdims=True)
    return np.einsum("bhqt,bthk->bqhk", probs, v)


@pytest.mark.parametrize("path", [o.name for o in registry.registered("decomposed_attention", BACKEND)] + ["portable"])
def test_decomposed_attention_matches_numpy(rng, path):
    """Each path against NumPy: the bias of the key at row y, column x is
    `rows[..., y] + columns[..., x]`, the grid row-major."""
    q = rng.normal(size=(2, 5, 3, 4)).astype("float32")
    k, v = (rng.normal(size=(2, 6, 3, 4)).astype("float32") for _ in range(2))
    rows, columns = rng.normal(size=(2, 3, 5, 2)), rng.normal(size=(2, 3, 5, 3))
    with only(path, "decomposed_attention"):
        got = to_numpy(kernels.decomposed_attention(q, k, v, rows, columns, scale=0.3))
    np.testing.assert_allclose(got, np_decomposed_attention(q, k, v, 0.3, rows, columns), atol=2e-6)
    with pytest.raises(ValueError, match="h \\* w keys"):
        kernels.decomposed_attention(q, k, v, rows, columns[..., :2])


def test_xla_attention_takes_a_head_queries_a_chunk_at_a_time_on_jax(rng, monkeypatch):
    """Past the group budget for one head, jax takes its queries in chunks
    (the last padded): values and gradients as NumPy's and the whole head's,
    plain and decomposed; tensorflow and torch never chunk."""
    backend = keras.backend.backend()
    monkeypatch.setattr(xla, "GROUPED_ATTENTION_BYTES", 0)
    monkeypatch.setattr(xla, "ATTENTION_GROUP_BYTES", 4 * 5 * 12)  # 5 queries' logits over 12 keys
    with kernels.xla_compiled():
        assert xla.query_chunks(9, 12, 1) == (2 if backend == "jax" else 1)
        assert xla.query_chunks(9, 12, 2) == 1
    if backend != "jax":
        return
    import jax

    q = rng.normal(size=(2, 9, 3, 4)).astype("float32")
    k, v = (rng.normal(size=(2, 12, 3, 4)).astype("float32") for _ in range(2))
    rows, columns = rng.normal(size=(2, 3, 9, 3)), rng.normal(size=(2, 3, 9, 4))
    weights = rng.normal(size=q.shape).astype("float32")
    chunks = []
    in_groups = xla._in_groups
    monkeypatch.setattr(xla, "_in_groups", lambda *a: chunks.append(a[-1]) or in_groups(*a))
    for name, function, expected in (
        ("plain", lambda q, k, v: xla.attention(q, k, v, 0.3), np_attention(q, k, v, 0.3)),
        ("decomposed", lambda q, k, v: xla.decomposed_attention(q, k, v, 0.3, rows, columns),
         np_decomposed_attention(q, k, v, 0.3, rows, columns)),
    ):
        def loss(q, k, v):
            out = function(q, k, v)
            return keras.ops.sum(out * weights), out

        step = jax.jit(jax.value_and_grad(loss, argnums=(0, 1, 2), has_aux=True))
        (_, chunked), chunked_grads = step(q, k, v)
        assert chunks.pop() == 2, name
        monkeypatch.setattr(xla, "ATTENTION_GROUP_BYTES", 2**40)
        (_, whole), whole_grads = jax.jit(jax.value_and_grad(loss, argnums=(0, 1, 2), has_aux=True))(q, k, v)
        monkeypatch.setattr(xla, "ATTENTION_GROUP_BYTES", 4 * 5 * 12)
        np.testing.assert_allclose(np.asarray(chunked), expected, atol=2e-6)
        np.testing.assert_allclose(np.asarray(chunked), np.asarray(whole), atol=1e-6)
        for a, b in zip(chunked_grads, whole_grads):
            np.testing.assert_allclose(np.asarray(a), np.asarray(b), atol=1e-5)


@pytest.mark.xla_predict
def test_predict_groups_heads_where_xla_compiles_it(rng, monkeypatch):
    """Tensorflow's XLA predict function traces inside `xla_compiled` (grouped
    heads), its eager call and torch do not; the predictions are the call's."""
    backend = keras.backend.backend()
    model = ViT(**TINY, classes=4, classifier_activation=None)
    x = rng.normal(size=(2, 32, 32, 3)).astype("float32")
    monkeypatch.setattr(xla, "GROUPED_ATTENTION_BYTES", 0)
    monkeypatch.setattr(xla, "ATTENTION_GROUP_BYTES", 4 * 17 * 17)  # one of 17 x 17 logits
    calls = []
    grouped_attention = xla._grouped_attention
    monkeypatch.setattr(xla, "_grouped_attention", lambda *a: calls.append(a[-2]) or grouped_attention(*a))
    eager = to_numpy(model(x))
    assert bool(calls) == (backend == "jax")
    calls.clear()
    np.testing.assert_allclose(model.predict(x, verbose=0), eager, atol=1e-5)
    xla_predict = backend == "jax" or (backend == "tensorflow" and tf_xla.uses_xla(model))
    assert bool(calls) == xla_predict
    assert not switches._XLA_COMPILED.value


def test_scale_multiplies_the_queries_where_no_rounding_is_added():
    """Folded into q in float32, and in bfloat16 only for a power-of-two scale."""
    f32 = keras.ops.ones((1, 2, 1, 4), "float32")
    bf16 = keras.ops.ones((1, 2, 1, 4), "bfloat16")
    assert xla.fold_scale(f32, 0.3) and xla.fold_scale(f32, 0.125)
    assert xla.fold_scale(bf16, 0.125) and xla.fold_scale(bf16, 1 / 64**0.5)
    assert not xla.fold_scale(bf16, 0.3) and not xla.fold_scale(bf16, 1 / 80**0.5)


@pytest.mark.parametrize("scale", [0.125, 0.3])
def test_explicit_bfloat16_attention_matches_numpy_with_either_scale(rng, scale):
    """Folded (power of two) or on the logits, XLA's bfloat16 attention stays near float64."""
    q, k, v = (rng.normal(size=(2, 6, 3, 16)).astype("float32") for _ in range(3))
    cast = lambda a: keras.ops.cast(a, "bfloat16")  # noqa: E731
    got = to_numpy(keras.ops.cast(xla.attention(cast(q), cast(k), cast(v), scale), "float32"))
    rounded = [to_numpy(keras.ops.cast(cast(a), "float32")).astype("float64") for a in (q, k, v)]
    np.testing.assert_allclose(got, np_attention(*rounded, scale), atol=0.03)


def _gradients(model, x):
    """Per-variable gradients of the logits' squared sum."""
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
    return grads


def test_lora_projections_take_the_keras_layer_path(rng):
    """LoRA-enabled projections are called as Keras layers (their LoRA terms count)."""
    layer = layers.MultiHeadSelfAttention(num_heads=2, head_dim=4)
    layer.build((2, 5, 8))  # before the call compiled on jax
    x = rng.normal(size=(2, 5, 8)).astype("float32")
    before = inference(layer, x)
    layer.query.enable_lora(2)
    assert not kernels.runs_plain(layer.query) and kernels.runs_plain(layer.key)
    layer.query.lora_kernel_b.assign(np.ones(layer.query.lora_kernel_b.shape, "float32"))
    after = inference(layer, x)
    assert np.abs(after - before).max() > 1e-3


def test_quantized_model_stays_close_to_float(rng):
    """int8 projections are called as the Keras layers they became."""
    model = ViT(**TINY, include_top=False, pooling="avg")
    x = rng.normal(size=(2, 32, 32, 3)).astype("float32")
    expected = inference(model, x)
    model.quantize("int8")
    block = model.encoder_blocks[0]
    assert block.attention.query.quantization_mode == "int8"
    assert not kernels.runs_plain(block.attention.query)
    got = inference(model, x)
    scale = np.abs(expected).max()
    assert np.abs(got - expected).max() < 0.05 * scale


@pytest.mark.parametrize("shape", [(6, 8), (2, 5, 8)])
@pytest.mark.parametrize("with_bias", [True, False])
def test_dense_fast_path_matches_plain_ops(rng, shape, with_bias):
    """`dense`, on the path the backend takes here, against `keras.ops.matmul`
    + bias, forward and gradients; export mode takes no fast path."""
    x = rng.normal(size=shape).astype("float32")
    kernel = rng.normal(size=(8, 12)).astype("float32")
    arrays = [x, kernel] + ([rng.normal(size=(12,)).astype("float32")] if with_bias else [])
    weights = rng.normal(size=(*shape[:-1], 12)).astype("float32")

    def plain(x, kernel, bias=None):
        y = keras.ops.matmul(x, kernel)
        return y if bias is None else y + bias

    with taken() as paths:
        got, got_grads = value_and_grads(kernels.dense, arrays, weights)
    expected, expected_grads = value_and_grads(plain, arrays, weights)
    np.testing.assert_allclose(got, expected, atol=1e-5, rtol=1e-5)
    for g, e in zip(got_grads, expected_grads):
        np.testing.assert_allclose(g, e, atol=1e-5, rtol=1e-5)
    default = {"jax": "xla_dense", "tensorflow": "fused_bias_gelu"}.get(BACKEND)
    if BACKEND == "torch":
        default = "onednn" if onednn_by_default() else "torch_linear"
    assert set(paths) == {default}  # (jax calls it twice: once more for the gradients)
    with taken() as paths, kernels.export_mode():
        kernels.dense(x, kernel)
    assert paths == []


def test_training_step_is_the_same_on_both_dense_paths(rng):
    """Two `fit` steps move the weights identically with and without oneDNN
    (the weight is never prepacked, so an update is seen at the next call)."""
    if not onednn_computes_here():
        pytest.skip("torch's oneDNN GEMM cannot run here (not torch, or no oneDNN)")
    x = rng.normal(size=(4, 32, 32, 3)).astype("float32")
    y = rng.integers(0, 5, size=(4,))
    results = []
    for switch in (kernels.forced("onednn"), kernels.disabled("onednn")):
        with switch, taken() as paths:
            keras.utils.set_random_seed(1)
            model = ViT(**TINY, classes=5, classifier_activation=None)
            model.compile(keras.optimizers.SGD(0.1), keras.losses.SparseCategoricalCrossentropy(from_logits=True))
            init = np.random.default_rng(3)
            for variable in model.trainable_variables:
                variable.assign(init.normal(scale=0.2, size=variable.shape).astype("float32"))
            initial = [to_numpy(v) for v in model.trainable_variables]
            model.fit(x, y, batch_size=4, epochs=2, verbose=0)
            after = [to_numpy(v) for v in model.trainable_variables]
            results.append((initial, after, model.predict(x, verbose=0), set(paths) & {"onednn", "torch_linear"}))
    (init_a, after_a, pred_a, paths_a), (init_b, after_b, pred_b, paths_b) = results
    # (Shape inference runs on torch's "meta" device, where `F.linear` computes.)
    assert "onednn" in paths_a and paths_b == {"torch_linear"}
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
    got, got_grads = value_and_grads(
        lambda x, k, b: kernels.dense(x, k, b, axes=2), [x, kernel, bias], weights
    )
    expected, expected_grads = value_and_grads(
        lambda x, k, b: keras.ops.einsum("bthk,hkd->btd", x, k) + b, [x, kernel, bias], weights
    )
    np.testing.assert_allclose(got, expected, atol=1e-5, rtol=1e-5)
    for g, e in zip(got_grads, expected_grads):
        np.testing.assert_allclose(g, e, atol=1e-5, rtol=1e-5)


def test_torch_inference_dense_skips_the_autograd_function(rng, monkeypatch):
    """Without gradients to record, torch's oneDNN `dense` calls the GEMM
    directly (the same numbers) instead of through its autograd function."""
    if not onednn_computes_here():
        pytest.skip("the autograd function is torch's own, and needs oneDNN")
    import torch

    made = []
    real = torch_backend.autograd_linear
    monkeypatch.setattr(torch_backend, "autograd_linear", lambda: made.append(1) or real())
    x = torch.tensor(rng.normal(size=(3, 4, 8)).astype("float32"))
    kernel = torch.tensor(rng.normal(size=(8, 2, 5)).astype("float32"), requires_grad=True)
    with torch.no_grad(), kernels.forced("onednn"):
        plain = kernels.dense(x, kernel)
    assert made == []
    with kernels.forced("onednn"):
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
    real = torch_backend.linear_pointwise
    monkeypatch.setattr(
        torch_backend, "linear_pointwise", lambda *a: post_ops.append(a[3:]) or real(*a)
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
    on_onednn = onednn_by_default(dtype)
    if on_onednn and name == "gelu_tanh":
        assert post_ops_taken == [("gelu", "tanh")]
    else:
        assert ("gelu", "tanh") not in post_ops_taken


@pytest.mark.parametrize("name", ["gelu_tanh", "quick_gelu"])
def test_dense_with_activation_keeps_gradients(rng, name):
    """With gradients to record the activation is a separate op, differentiable
    (torch's quick GELU is computed in place only where none is recorded)."""
    x = rng.normal(size=(2, 5, 8)).astype("float32")
    kernel = rng.normal(scale=0.3, size=(8, 6)).astype("float32")
    bias = rng.normal(size=(6,)).astype("float32")
    weights = rng.normal(size=(2, 5, 6)).astype("float32")
    got, got_grads = value_and_grads(
        lambda x, k, b: kernels.dense(x, k, b, activation=name), [x, kernel, bias], weights
    )
    expected, expected_grads = value_and_grads(
        lambda x, k, b: portable.activation(keras.ops.matmul(x, k) + b, name), [x, kernel, bias], weights
    )
    np.testing.assert_allclose(got, reference.activation(x @ kernel + bias, name), atol=1e-5, rtol=1e-5)
    np.testing.assert_allclose(got, expected, atol=1e-5, rtol=1e-5)
    for g, e in zip(got_grads, expected_grads):
        np.testing.assert_allclose(g, e, atol=1e-5, rtol=1e-5)


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


@pytest.mark.parametrize("pad_width, value", [
    (((0, 0), (2, 0), (0, 3), (0, 0)), 0.0),
    (((1, 1), (0, 0), (1, 2), (0, 1)), float("-inf")),
    (((0, 0), (0, 0), (0, 0), (0, 0)), 5.0),
])
def test_pad_matches_numpy(pad_width, value):
    x = np.random.default_rng(0).normal(size=(2, 3, 4, 5)).astype("float32")
    out = to_numpy(kernels.pad(x, pad_width, constant_values=value))
    np.testing.assert_array_equal(out, np.pad(x, pad_width, constant_values=value))
    with pytest.raises(ValueError, match=r"one \(before, after\) pair per axis"):
        kernels.pad(x, ((0, 1),))
