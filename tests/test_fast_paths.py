"""The measured fast paths of `keras_vit.layers.kernels`, per backend: which
path runs (bfloat16 projections on oneDNN or with float32 accumulation, the
fused attention kernel at high-resolution token counts, tensorflow's bfloat16
inference outside XLA) and that it computes what the plain float32 path does,
within bfloat16's precision."""

import keras
import numpy as np
import pytest

import keras_vit
from conftest import DEIT_NPZ, TINY, imagenet_preprocess, requires_shared, to_numpy
from keras_vit.execution import tf_xla
from keras_vit.layers import kernels, onednn

# 8 mantissa bits: a relative error of 2^-8 per rounding, a few roundings deep.
BF16_RTOL = 3e-2


def _bf16_onednn_available():
    import torch

    return torch.ops.mkldnn._is_mkldnn_bf16_supported()


def _dense_path(x, kernel, bias):
    """A string naming the product `kernels.dense` runs for these operands."""
    backend = keras.backend.backend()
    if backend == "torch":
        tensors = [keras.ops.convert_to_tensor(t) for t in (x, kernel, bias)]
        return "onednn" if onednn.applies(*tensors) else "F.linear"
    if backend == "jax":
        import jax

        # A fresh function: jax reuses the trace of one it has seen.
        text = str(jax.make_jaxpr(lambda *a: kernels.dense(*a))(x, kernel, bias))
        return "float32 accumulation" if "preferred_element_type=float32" in text else "matmul"
    return "matmul"


@pytest.mark.parametrize("shape", [(6, 64), (2, 9, 64)])
def test_bfloat16_dense_close_to_float32_on_its_fast_path(rng, shape):
    x = rng.normal(size=shape).astype("float32")
    kernel = rng.normal(size=(64, 48)).astype("float32") / 8
    bias = rng.normal(size=(48,)).astype("float32")
    expected = x @ kernel + bias
    bf16 = [keras.ops.cast(t, "bfloat16") for t in (x, kernel, bias)]
    out = kernels.dense(*bf16)
    assert keras.backend.standardize_dtype(out.dtype) == "bfloat16"
    got = to_numpy(keras.ops.cast(out, "float32"))
    np.testing.assert_allclose(got, expected, rtol=BF16_RTOL, atol=BF16_RTOL * np.abs(expected).max())
    expected_path = {"jax": "float32 accumulation", "tensorflow": "matmul"}.get(keras.backend.backend())
    if keras.backend.backend() == "torch":
        expected_path = "onednn" if _bf16_onednn_available() else "F.linear"
    assert _dense_path(*bf16) == expected_path


def test_jax_bfloat16_products_keep_bfloat16_results_off_the_cpu(rng, monkeypatch):
    """The float32 result is for XLA's CPU backend; on an accelerator (here
    forced) the product stays bfloat16 and computes the same within its precision."""
    if keras.backend.backend() != "jax":
        pytest.skip("the product's result type is a jax choice; torch and tensorflow keep bfloat16 operands' type")
    import jax

    assert kernels._wide_bfloat16() == (jax.default_backend() == "cpu")
    x = rng.normal(size=(2, 9, 64)).astype("float32")
    kernel = rng.normal(size=(64, 48)).astype("float32") / 8
    bias = rng.normal(size=(48,)).astype("float32")
    bf16 = [keras.ops.cast(t, "bfloat16") for t in (x, kernel, bias)]
    wide = to_numpy(keras.ops.cast(kernels.dense(*bf16, activation="gelu_tanh"), "float32"))
    monkeypatch.setattr(kernels, "_wide_bfloat16", lambda: False)
    assert _dense_path(*bf16) == "matmul"
    out = kernels.dense(*bf16, activation="gelu_tanh")
    assert keras.backend.standardize_dtype(out.dtype) == "bfloat16"
    narrow = to_numpy(keras.ops.cast(out, "float32"))
    np.testing.assert_allclose(narrow, wide, rtol=BF16_RTOL, atol=BF16_RTOL * np.abs(wide).max())
    assert np.abs(narrow - wide).max() > 0  # the two forms round differently: both ran


def test_bfloat16_onednn_gradients_match_plain_ops(rng):
    """torch only (the one backend with its own backward): the oneDNN
    gradients in bfloat16 against float32 `keras.ops` gradients."""
    if keras.backend.backend() != "torch":
        pytest.skip("the custom oneDNN backward exists on torch only; jax and tensorflow differentiate keras.ops")
    import torch

    if not _bf16_onednn_available():
        pytest.skip("this CPU has no bf16 instructions, so dense keeps F.linear in bfloat16")
    x = rng.normal(size=(3, 5, 32)).astype("float32")
    kernel = rng.normal(size=(32, 24)).astype("float32") / 6
    bias = rng.normal(size=(24,)).astype("float32")
    weights = torch.from_numpy(rng.normal(size=(3, 5, 24)).astype("float32"))
    grads = {}
    for dtype in (torch.float32, torch.bfloat16):
        tensors = [torch.tensor(a, dtype=dtype, requires_grad=True) for a in (x, kernel, bias)]
        fn = kernels.dense if dtype == torch.bfloat16 else (lambda a, k, b: a @ k + b)
        (fn(*tensors).float() * weights).sum().backward()
        grads[dtype] = [t.grad.float().numpy() for t in tensors]
    for got, expected in zip(grads[torch.bfloat16], grads[torch.float32]):
        np.testing.assert_allclose(got, expected, rtol=BF16_RTOL, atol=BF16_RTOL * np.abs(expected).max())


@pytest.mark.parametrize("tokens", [577, 1370])
@pytest.mark.parametrize("dtype", ["float32", "bfloat16"])
def test_attention_path_at_high_resolution_token_counts(rng, tokens, dtype):
    """The attention of ViT-B/16 at 384 px (577 tokens) and of a /14 model at
    518 px (1370 tokens) takes the same path as at 224 px: torch's fused flash
    kernel, never its math fallback; on jax and tensorflow CPUs the batched
    products (the backends' own `dot_product_attention` is an explicit
    softmax there too, so no fused kernel is given up)."""
    q = rng.normal(size=(1, tokens, 2, 8)).astype("float32")
    k = rng.normal(size=(1, tokens, 2, 8)).astype("float32")
    v = rng.normal(size=(1, tokens, 2, 8)).astype("float32")
    logits = np.einsum("bqhk,bthk->bhqt", q, k) / np.sqrt(8)
    probs = np.exp(logits - logits.max(-1, keepdims=True))
    expected = np.einsum("bhqt,bthk->bqhk", probs / probs.sum(-1, keepdims=True), v)
    tensors = [keras.ops.cast(t, dtype) for t in (q, k, v)]
    backend = keras.backend.backend()
    if backend == "torch":
        from torch.profiler import ProfilerActivity, profile

        with profile(activities=[ProfilerActivity.CPU]) as prof:
            out = kernels.attention(*tensors)
        ops = {e.key for e in prof.key_averages()}
        assert "aten::_scaled_dot_product_flash_attention_for_cpu" in ops, sorted(ops)
        assert "aten::_scaled_dot_product_attention_math" not in ops
    else:
        assert not kernels._use_fused_attention()
        out = kernels.attention(*tensors)
        if backend == "jax":
            import jax

            fused = str(jax.make_jaxpr(lambda a: keras.ops.dot_product_attention(a, a, a))(tensors[0]))
            assert " exp " in fused or "exp[" in fused, "jax's CPU attention op is explicit"
    tol = 2e-2 if dtype == "bfloat16" else 1e-5
    got = to_numpy(keras.ops.cast(out, "float32"))
    np.testing.assert_allclose(got, expected, atol=tol)


def test_tensorflow_predicts_bfloat16_outside_xla():
    """tensorflow compiles float32 inference with XLA but runs bfloat16 in
    the graph runtime (oneDNN's bfloat16 matmuls); the other backends have
    no such switch."""
    f32 = keras_vit.ViT(**TINY, classes=5)
    bf16 = keras_vit.ViT(**TINY, classes=5, dtype="bfloat16")
    mixed = keras_vit.ViT(**TINY, classes=5, dtype="mixed_bfloat16")
    on_tf = keras.backend.backend() == "tensorflow"
    assert tf_xla.uses_xla(f32) == on_tf
    assert not tf_xla.uses_xla(bf16) and not tf_xla.uses_xla(mixed)


@pytest.mark.parametrize("policy", ["bfloat16", "mixed_bfloat16"])
def test_bfloat16_model_close_to_float32(rng, policy):
    """A tiny ViT through `predict` (each backend's inference runtime, the
    fast paths included) against its float32 twin."""
    reference = keras_vit.ViT(**TINY, classes=5)
    for w in reference.weights:
        w.assign(rng.normal(scale=0.3, size=w.shape).astype("float32"))
    x = rng.uniform(-1, 1, (4, 32, 32, 3)).astype("float32")
    expected = reference.predict(x, verbose=0)
    model = keras_vit.ViT(**TINY, classes=5, dtype=policy)
    model.set_weights(reference.get_weights())
    out = np.asarray(model.predict(x, verbose=0), "float32")
    np.testing.assert_allclose(out, expected, atol=3e-2)


@requires_shared
@pytest.mark.parametrize("policy", ["bfloat16", "mixed_bfloat16"])
def test_real_weights_keep_their_top1_in_bfloat16_predict(policy):
    import skimage.data

    batch = np.stack([imagenet_preprocess(skimage.data.chelsea()), imagenet_preprocess(skimage.data.coffee())])
    reference = keras_vit.ViTTi16(weights=str(DEIT_NPZ), mlp_activation="gelu")
    expected = reference.predict(batch, verbose=0)
    assert expected.argmax(-1)[0] in (281, 282, 285) and expected.argmax(-1)[1] == 967
    model = keras_vit.ViTTi16(weights=str(DEIT_NPZ), mlp_activation="gelu", dtype=policy)
    got = np.asarray(model.predict(batch, verbose=0), "float32")
    np.testing.assert_array_equal(got.argmax(-1), expected.argmax(-1))
    np.testing.assert_allclose(got, expected, atol=3e-2)


def test_half_precision_layer_norm_on_torch_matches_the_layer(rng, monkeypatch):
    """torch's kernel on the half-precision tensors, without keras' float32
    round trip, where the weights share the input's dtype; the layer itself otherwise."""
    if keras.backend.backend() != "torch":
        pytest.skip("torch only: jax and tensorflow fuse keras' casts into the norm when they compile")
    from keras_vit.layers import calls

    for policy in ("bfloat16", "float16", "mixed_bfloat16"):
        norm = keras.layers.LayerNormalization(dtype=policy, epsilon=1e-6)
        norm.build((2, 7, 64))
        norm.gamma.assign(rng.normal(size=64))
        norm.beta.assign(rng.normal(size=64))
        x = keras.ops.cast(rng.normal(size=(2, 7, 64)) * 3 + 1, policy.removeprefix("mixed_"))
        fast = kernels.half_layer_norm(norm, x)
        if policy.startswith("mixed"):
            assert fast is None  # float32 weights: keras' own path
            continue
        assert fast is not None and fast.dtype == x.dtype
        expected = to_numpy(keras.ops.cast(norm(x), "float32"))
        got = to_numpy(keras.ops.cast(fast, "float32"))
        # The same float32 arithmetic rounded once; summation order may move a tie by one unit.
        ulp = 2.0 ** (-7 if policy == "bfloat16" else -10)
        np.testing.assert_allclose(got, expected, rtol=ulp, atol=ulp)
        assert np.mean(got == expected) > 0.99
        # A block's sublayer call takes it.
        seen = []
        with monkeypatch.context() as patch:
            patch.setattr(kernels, "half_layer_norm", lambda layer, t: seen.append(layer) or fast)
            assert calls.call_sublayer(norm, x) is fast and seen == [norm]
        assert kernels.half_layer_norm(norm, keras.ops.cast(x, "float32")) is None

        class Subclass(keras.layers.LayerNormalization):
            pass

        other = Subclass(dtype=policy)
        other.build((2, 7, 64))
        assert kernels.half_layer_norm(other, x) is None  # its call may compute something else
