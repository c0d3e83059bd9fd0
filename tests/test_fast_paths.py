"""The fast paths of `keras_vit.kernels`, per backend: every registered path
against the portable form (values and gradients, parametrized over the
registry), the hardware rules on every branch, which path runs (bfloat16
projections on oneDNN or with float32 accumulation, the fused attention kernel
at high-resolution token counts, tensorflow's bfloat16 inference outside XLA)
and that it computes what the plain float32 path does, within bfloat16's
precision."""

import time

import keras
import numpy as np
import pytest

import keras_vit
from conftest import DEIT_NPZ, TINY, imagenet_preprocess, requires_shared, spread, to_numpy
from kernel_helpers import BACKEND, taken
from keras_vit import kernels
from keras_vit.execution import tf_xla
from keras_vit.kernels import hardware, jax_backend, measured, torch_backend

# 8 mantissa bits: a relative error of 2^-8 per rounding, a few roundings deep.
BF16_RTOL = 3e-2


def _bf16_onednn_available():
    import torch

    return torch.ops.mkldnn._is_mkldnn_bf16_supported()


def _dense_path(x, kernel, bias):
    """A string naming the product `kernels.dense` runs for these operands."""
    backend = keras.backend.backend()
    if backend == "torch":
        with taken() as paths:
            kernels.dense(x, kernel, bias)
        return {"onednn": "onednn", "torch_linear": "F.linear"}[paths[0]]
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
        on_avx512 = hardware.cpu_isa() == "avx512"
        expected_path = "onednn" if _bf16_onednn_available() and on_avx512 else "F.linear"
    assert _dense_path(*bf16) == expected_path


def test_jax_bfloat16_products_keep_bfloat16_results_off_the_cpu(rng):
    """The float32 result is for XLA's CPU backend; on an accelerator (here
    forced) the product stays bfloat16 and computes the same within its precision."""
    if keras.backend.backend() != "jax":
        pytest.skip("the product's result type is a jax choice; torch and tensorflow keep bfloat16 operands' type")
    import jax

    assert hardware.device() == jax.default_backend() == "cpu"
    x = rng.normal(size=(2, 9, 64)).astype("float32")
    kernel = rng.normal(size=(64, 48)).astype("float32") / 8
    bias = rng.normal(size=(48,)).astype("float32")
    bf16 = [keras.ops.cast(t, "bfloat16") for t in (x, kernel, bias)]
    wide = to_numpy(keras.ops.cast(kernels.dense(*bf16, activation="gelu_tanh"), "float32"))
    with hardware.assume(device="gpu"):
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
        with kernels.forced("onednn"), taken() as paths:
            (fn(*tensors).float() * weights).sum().backward()
        assert paths == (["onednn"] if dtype == torch.bfloat16 else [])
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
        with taken() as paths:
            out = kernels.attention(*tensors)
        assert paths == ["xla_attention"]
        if backend == "jax":
            import jax

            fused = str(jax.make_jaxpr(lambda a: keras.ops.dot_product_attention(a, a, a))(tensors[0]))
            assert " exp " in fused or "exp[" in fused, "jax's CPU attention op is explicit"
    tol = 2e-2 if dtype == "bfloat16" else 1e-5
    got = to_numpy(keras.ops.cast(out, "float32"))
    np.testing.assert_allclose(got, expected, atol=tol)


@pytest.mark.xla_predict
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
@spread("the real weights' top-1 under each policy once; the paths' bfloat16 numerics are held on every "
        "backend by test_bfloat16_model_close_to_float32 and the paths' own cases")
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


def test_half_precision_layer_norm_on_torch_matches_the_layer(rng):
    """torch's kernel on the half-precision tensors, without keras' float32
    round trip, where the weights share the input's dtype; the layer itself otherwise."""
    if keras.backend.backend() != "torch":
        pytest.skip("torch only: jax and tensorflow fuse keras' casts into the norm when they compile")
    for policy in ("bfloat16", "float16", "mixed_bfloat16"):
        norm = keras.layers.LayerNormalization(dtype=policy, epsilon=1e-6)
        norm.build((2, 7, 64))
        norm.gamma.assign(rng.normal(size=64))
        norm.beta.assign(rng.normal(size=64))
        x = keras.ops.cast(rng.normal(size=(2, 7, 64)) * 3 + 1, policy.removeprefix("mixed_"))
        fast = torch_backend.half_layer_norm(norm, x, (), {})
        if policy.startswith("mixed"):
            assert fast is NotImplemented  # float32 weights: keras' own path
            continue
        assert fast.dtype == x.dtype
        expected = to_numpy(keras.ops.cast(norm(x), "float32"))
        got = to_numpy(keras.ops.cast(fast, "float32"))
        # The same float32 arithmetic rounded once; summation order may move a tie by one unit.
        ulp = 2.0 ** (-7 if policy == "bfloat16" else -10)
        np.testing.assert_allclose(got, expected, rtol=ulp, atol=ulp)
        assert np.mean(got == expected) > 0.99
        # A block's sublayer call takes it.
        with taken() as paths:
            y = kernels.call_sublayer(norm, x)
        assert paths == ["half_layer_norm"]
        np.testing.assert_array_equal(to_numpy(keras.ops.cast(y, "float32")), got)
        assert torch_backend.half_layer_norm(norm, keras.ops.cast(x, "float32"), (), {}) is NotImplemented

        class Subclass(keras.layers.LayerNormalization):
            pass

        other = Subclass(dtype=policy)
        other.build((2, 7, 64))
        assert torch_backend.half_layer_norm(other, x, (), {}) is NotImplemented  # its call may differ


# --- every registered fast path against the portable form --------------------

from keras_vit.kernels import portable, registry  # noqa: E402
from kernel_helpers import only, value_and_grads  # noqa: E402


def _cast(a, dtype):
    return keras.ops.cast(keras.ops.convert_to_tensor(a), dtype)


def _dense_cases(rng):
    """(args, gradients?) of `dense`: layouts, dtypes, biases, activations."""
    layouts = [((6, 8), (8, 12), 1), ((2, 5, 8), (8, 12), 1), ((2, 5, 8), (8, 2, 3), 1),
               ((2, 5, 2, 3), (2, 3, 8), 2)]
    for dtype in ("float32", "bfloat16"):
        for x_shape, k_shape, axes in layouts:
            out = k_shape[axes:]
            for bias in (None, rng.normal(size=out).astype("float32")):
                for activation in (None, "gelu_tanh", "gelu", "quick_gelu"):
                    # The activations on the plain layout, with a bias, in float32 and bfloat16.
                    if activation and (axes != 1 or len(k_shape) != 2 or bias is None):
                        continue
                    x = rng.normal(size=x_shape).astype("float32")
                    kernel = rng.normal(scale=0.3, size=k_shape).astype("float32")
                    args = [_cast(x, dtype), _cast(kernel, dtype),
                            None if bias is None else _cast(bias, dtype), axes, activation]
                    yield args, dtype == "float32" and activation in (None, "gelu_tanh", "quick_gelu")


def _mlp_cases(rng):
    """(args, gradients?) of `mlp`: few tokens, and a hidden activation of
    more than 32 MiB (torch's path takes it in blocks of rows, the last
    shorter), with each activation, biases or none, bfloat16."""
    for rows, width, dtype in ((2 * 7, 16, "float32"), (4400, 2048, "float32"), (2 * 7, 16, "bfloat16")):
        for activation, bias in ((None, False), ("gelu_tanh", True), ("gelu", True), ("quick_gelu", True)):
            x = rng.normal(size=(2, rows // 2, 8)).astype("float32")
            # Scaled by fan-in, as initialised weights are: outputs of order one, whose
            # float32 sums over 2,048 hidden units may round differently by row count.
            kernels_ = [rng.normal(scale=s[0] ** -0.5, size=s).astype("float32") for s in ((8, width), (width, 8))]
            biases = [rng.normal(size=n).astype("float32") if bias else None for n in (width, 8)]
            args = [_cast(x, dtype), _cast(kernels_[0], dtype), None if biases[0] is None else _cast(biases[0], dtype),
                    _cast(kernels_[1], dtype), None if biases[1] is None else _cast(biases[1], dtype), activation]
            yield args, False  # torch's path takes no recorded call


def _attention_cases(rng):
    causal = np.tril(np.ones((1, 1, 6, 6), bool))
    no_key = np.broadcast_to(causal, (2, 3, 6, 6)).copy()
    no_key[1, 2, 3] = False
    padding = (np.arange(6)[None] < np.array([[6], [4]]))[:, None, None, :]
    for dtype in ("float32", "bfloat16"):
        for mask, scale in ((None, 0.125), (None, 0.3), (causal, 0.3), (padding, 0.125), (no_key, 0.3)):
            q, k, v = (rng.normal(size=(2, 6, 3, 8)).astype("float32") for _ in range(3))
            mask_t = None if mask is None else keras.ops.convert_to_tensor(mask)
            yield [_cast(q, dtype), _cast(k, dtype), _cast(v, dtype), scale, mask_t], dtype == "float32"


def _decomposed_cases(rng):
    """(args, gradients?) of `decomposed_attention`: key grids square and
    not, as many queries as keys or fewer, a batch of windows, bfloat16, and
    one call whose bias torch's path builds in two chunks (the second
    shorter)."""
    shapes = [(2, 6, (2, 3), 3, 8), (1, 5, (3, 3), 2, 4), (6, 4, (2, 2), 2, 4), (1, 1100, (40, 100), 1, 8)]
    for dtype in ("float32", "bfloat16"):
        for batch, queries, (height, width), heads, dim in shapes:
            if dtype == "bfloat16" and queries > 100:
                continue
            q = rng.normal(size=(batch, queries, heads, dim))
            k, v = (rng.normal(size=(batch, height * width, heads, dim)) for _ in range(2))
            rows = rng.normal(size=(batch, heads, queries, height)).astype("float32")
            columns = rng.normal(size=(batch, heads, queries, width)).astype("float32")
            args = [_cast(q, dtype), _cast(k, dtype), _cast(v, dtype), 0.3, _cast(rows, "float32"),
                    _cast(columns, "float32")]
            yield args, dtype == "float32" and queries < 100


def _gelu_cases(rng):
    for dtype in ("float32", "bfloat16"):
        for approximate in (True, False):
            yield [_cast(rng.normal(size=(3, 7)) * 3, dtype), approximate], False


def _call_sublayer_cases(rng):
    for policy in ("float32", "bfloat16", "float16", "mixed_bfloat16"):
        norm = keras.layers.LayerNormalization(dtype=policy, epsilon=1e-6)
        norm.build((2, 7, 16))
        norm.gamma.assign(rng.normal(size=16))
        x = _cast(rng.normal(size=(2, 7, 16)) * 3 + 1, policy.removeprefix("mixed_"))
        yield [norm, x, (), {}], False
    dropout = keras.layers.Dropout(0.5)
    dropout.build((2, 7, 16))
    yield [dropout, _cast(rng.normal(size=(2, 7, 16)), "float32"), (), {"training": False}], False
    mlp = keras_vit.layers.MlpBlock(mlp_dim=8)
    mlp.build((2, 7, 16))
    yield [mlp, _cast(rng.normal(size=(2, 7, 16)), "float32"), (), {"training": False}], False
    # Convolutions: "same" and "valid", with and without bias, a stride, a
    # dilation, an activation; "same" with a stride pads unevenly.
    for options in (dict(kernel_size=3, padding="same"), dict(kernel_size=1, use_bias=False),
                    dict(kernel_size=3, strides=2), dict(kernel_size=3, padding="same", dilation_rate=2),
                    dict(kernel_size=3, padding="same", activation="relu"),
                    dict(kernel_size=3, padding="same", strides=2)):
        conv = keras.layers.Conv2D(5, **options)
        conv.build((2, 9, 11, 3))
        if conv.use_bias:
            conv.bias.assign(rng.normal(size=5))
        yield [conv, _cast(rng.normal(size=(2, 9, 11, 3)), "float32"), (), {}], False
    # Depthwise (a multiplier of 2, an even kernel, a stride) and transposed
    # ones (the upsamplings of DPT and EoMT, and overlapping windows); "same"
    # transposed is left to Keras. Gradients with respect to the input.
    for conv, gradients in ((keras.layers.DepthwiseConv2D(3, padding="same", depth_multiplier=2), True),
                            (keras.layers.DepthwiseConv2D(3, use_bias=False), True),
                            (keras.layers.DepthwiseConv2D(2, padding="same", activation="gelu"), False),
                            (keras.layers.DepthwiseConv2D(3, strides=2), False),
                            (keras.layers.Conv2DTranspose(4, 2, strides=2), True),
                            (keras.layers.Conv2DTranspose(4, 3, strides=2), False),
                            (keras.layers.Conv2DTranspose(4, (4, 2), strides=(4, 2), use_bias=False), True),
                            (keras.layers.Conv2DTranspose(4, 3, strides=2, padding="same"), False)):
        conv.build((2, 9, 11, 3))
        if conv.use_bias:
            conv.bias.assign(rng.normal(size=conv.bias.shape))
        yield [conv, _cast(rng.normal(size=(2, 9, 11, 3)), "float32"), (), {}], gradients
    # bfloat16 layers and mixed precision (the kernels float32, the input bfloat16).
    for policy in ("bfloat16", "mixed_bfloat16"):
        for conv in (keras.layers.DepthwiseConv2D(3, padding="same", dtype=policy),
                     keras.layers.Conv2DTranspose(4, 2, strides=2, dtype=policy)):
            conv.build((2, 9, 11, 3))
            conv.bias.assign(rng.normal(size=conv.bias.shape))
            yield [conv, _cast(rng.normal(size=(2, 9, 11, 3)), "bfloat16"), (), {}], False


def _conv_relu_conv_cases(rng):
    """(args, gradients?) of `conv_relu_conv`: a small map, and maps whose
    first convolution's output passes 32 MiB (torch's path takes them in
    blocks of rows, the last shorter) with 3x3, 5x3 and 1x1 kernels; a second
    convolution torch's path declines (3x3); maps resized first, up (by a
    factor that is no integer, as Depth Anything's head) and down, small
    and past 32 MiB."""
    for size, filters, kernel, second_kernel, resized in (
            ((6, 7), 8, 3, 1, None), ((260, 261), 128, 3, 1, None), ((258, 130), 256, (5, 3), 1, None),
            ((260, 130), 256, 1, 1, None), ((6, 7), 8, 3, 3, None), ((6, 7), 8, 3, 1, (11, 12)),
            ((149, 150), 128, 3, 1, (260, 261)), ((300, 140), 256, (5, 3), 1, (258, 131))):
        first = keras.layers.Conv2D(filters, kernel, padding="same")
        second = keras.layers.Conv2D(2, second_kernel, padding="same")
        first.build((1, *(resized or size), 3))
        second.build((1, *(resized or size), filters))
        for layer in (first, second):
            layer.bias.assign(rng.normal(size=layer.bias.shape))
            layer.trainable = False  # a frozen head: torch's path takes no recorded call
        yield [_cast(rng.normal(size=(1, *size, 3)), "float32"), first, second, resized], False


def _pack_cases(rng):
    layer = keras.layers.Dense(6)
    layer.build((None, 4))
    yield [layer.weights], False


def _take_cases(rng):
    """(args, gradients?) of `take`: vector and matrix indices, each axis, repeats."""
    for dtype in ("float32", "bfloat16"):
        x = _cast(rng.normal(size=(2, 5, 4)), dtype)
        for axis in (0, 1, -1, 2):
            size = x.shape[axis]
            yield [x, keras.ops.convert_to_tensor(np.array([size - 1, 0, 0], "int32")), axis], False
        # Matrix indices: an override computes vectors only.
        yield [x, keras.ops.convert_to_tensor(np.array([[1, 0], [2, 2]], "int32")), 1], False


def _resize_cases(rng):
    """(args, gradients?) of `resize_bilinear`: up and down, both corner
    modes, a `scale` that differs from the sizes' ratio, odd sizes, a size
    given as tensors, the size unchanged, bfloat16."""
    shape = (2, 5, 7, 3)
    for align_corners in (True, False):
        for size, scale in (((10, 14), None), ((3, 4), None), ((11, 15), 2.2), ((5, 7), None)):
            x = _cast(rng.normal(size=shape), "float32")
            yield [x, size, align_corners, scale], size != (5, 7)
    sizes = tuple(keras.ops.convert_to_tensor(n, "int32") for n in (9, 6))
    yield [_cast(rng.normal(size=shape), "float32"), sizes, False, None], False
    yield [_cast(rng.normal(size=shape), "bfloat16"), (8, 9), True, None], False


CASES = {"dense": _dense_cases, "mlp": _mlp_cases, "attention": _attention_cases, "decomposed_attention": _decomposed_cases,
         "gelu": _gelu_cases,
         "call_sublayer": _call_sublayer_cases, "conv_relu_conv": _conv_relu_conv_cases,
         "pack_for_inference": _pack_cases,
         "take": _take_cases, "resize_bilinear": _resize_cases}
PORTABLE = {
    "dense": portable.dense,
    "mlp": portable.mlp,
    "attention": portable.attention,
    "decomposed_attention": portable.decomposed_attention,
    "gelu": portable.gelu,
    "call_sublayer": portable.call_sublayer,
    "conv_relu_conv": portable.conv_relu_conv,
    "pack_for_inference": portable.pack_for_inference,
    "take": portable.take,
    "resize_bilinear": portable.resize_bilinear,
}


def _close(got, expected, dtype):
    if got is None or expected is None:
        assert got is expected is None
        return
    got, expected = (to_numpy(keras.ops.cast(t, "float32")) for t in (got, expected))
    if dtype == "float32":
        np.testing.assert_allclose(got, expected, atol=2e-5, rtol=1e-5)
    else:  # a bfloat16 rounding or two apart (a fused GELU rounds once)
        np.testing.assert_allclose(got, expected, atol=3e-2 * max(1.0, np.abs(expected).max()), rtol=2e-2)


def _dtype_of(args):
    tensor = next((a for a in args if hasattr(a, "dtype") and hasattr(a, "shape")), None)
    return "float32" if tensor is None else keras.backend.standardize_dtype(tensor.dtype)


def test_every_op_has_cases_and_a_portable_form():
    """A new op of the registry gets its cases here before any backend's path can be held."""
    assert set(CASES) == set(registry.OPS) == set(PORTABLE)


@pytest.mark.parametrize("override", registry.registered(backend=BACKEND), ids=lambda o: f"{o.op}-{o.name}")
def test_every_fast_path_computes_what_the_portable_form_does(rng, override):
    """Each path the backend registers, called on every case of its op that it
    computes (its hardware rule aside), against the portable form: values, and
    gradients in float32; at least one case must be its; the dispatcher takes
    it where it is forced and the others are disabled."""
    computed = 0
    for args, gradients in CASES[override.op](rng):
        got = override.function(*args)
        if got is NotImplemented:
            continue
        computed += 1
        dtype = _dtype_of(args)
        if override.op == "pack_for_inference":
            got = expected = None
        else:
            expected = PORTABLE[override.op](*args)
        _close(got, expected, dtype)
        if gradients:
            _check_gradients(override, args)
        if computed == 1 and not override.export:
            with only(override.name, override.op):
                dispatched = getattr(kernels, override.op)(*_call_form(override.op, args))
            if got is not None:
                np.testing.assert_array_equal(to_numpy(keras.ops.cast(dispatched, "float32")),
                                              to_numpy(keras.ops.cast(got, "float32")))
    assert computed, f"{override.name} computed none of the {override.op} cases"


def _call_form(op, args):
    """The public function's arguments for an override's `args`."""
    if op == "call_sublayer":
        layer, x, positional, keywords = args
        return (layer, x, *positional) if not keywords else (layer, x, *positional, *keywords.values())
    if op == "decomposed_attention":  # the scale last, optional
        q, k, v, scale, rows, columns = args
        return q, k, v, rows, columns, scale
    return args


def _check_gradients(override, args):
    """Gradients through the override equal those through the portable form
    (with respect to its leading tensor arguments: not sizes nor flags)."""
    rest_positions = [i for i, a in enumerate(args[:3]) if not keras.ops.is_tensor(a)]
    tensors = [a for i, a in enumerate(args[:3]) if i not in rest_positions]
    n = len(tensors)

    def rebuild(fn):
        def call(*ts):
            full, it = [], iter(ts)
            for i in range(3):
                full.append(args[i] if i in rest_positions else next(it))
            return fn(*full, *args[3:])

        return call

    arrays = [to_numpy(t) for t in tensors]
    out = to_numpy(PORTABLE[override.op](*args))
    weights = np.random.default_rng(1).normal(size=out.shape).astype("float32")
    got, got_grads = value_and_grads(rebuild(override.function), arrays, weights)
    expected, expected_grads = value_and_grads(rebuild(PORTABLE[override.op]), arrays, weights)
    assert len(got_grads) == n
    for g, e in zip(got_grads, expected_grads):
        np.testing.assert_allclose(g, e, atol=5e-5, rtol=1e-4)


# --- the hardware rules, every branch ----------------------------------------


@pytest.fixture
def fresh_isa():
    """`hardware.cpu_isa` detected anew (its cache cleared) during and after the test."""
    hardware._cpu_isa.cache_clear()
    yield
    hardware._cpu_isa.cache_clear()


def test_cpu_isa_reads_flags_and_onednn_cap(monkeypatch, fresh_isa):
    avx512 = {"avx2", "fma", "avx512f", "avx512bw", "avx512dq", "avx512vl"}
    assert hardware._flags_isa(avx512) == "avx512"
    assert hardware._flags_isa({"avx2", "fma", "avx512f"}) == "avx2"  # AVX-512 F alone is not enough
    assert hardware._flags_isa({"avx", "sse4_2"}) == "baseline"
    assert hardware._flags_isa({"neon", "asimd"}) == "baseline"
    monkeypatch.setattr(hardware, "cpu_flags", lambda: frozenset(avx512))
    monkeypatch.delenv("DNNL_MAX_CPU_ISA", raising=False)
    for cap, isa in ((None, "avx512"), ("AVX2", "avx2"), ("avx2_vnni_2", "avx2"),
                     ("AVX512_CORE_AMX", "avx512"), ("SSE41", "baseline"), ("ALL", "avx512")):
        if cap is None:
            monkeypatch.delenv("ONEDNN_MAX_CPU_ISA", raising=False)
        else:
            monkeypatch.setenv("ONEDNN_MAX_CPU_ISA", cap)
        hardware._cpu_isa.cache_clear()  # read once per process, as oneDNN does
        assert hardware.cpu_isa() == isa, cap
    monkeypatch.setattr(hardware, "cpu_flags", lambda: frozenset({"avx2", "fma"}))
    hardware._cpu_isa.cache_clear()
    monkeypatch.setenv("ONEDNN_MAX_CPU_ISA", "AVX512_CORE")
    assert hardware.cpu_isa() == "avx2"  # a cap never raises the CPU's own ISA


def test_assumed_hardware_nests_and_is_checked():
    with hardware.assume(cpu_isa="avx2"):
        with hardware.assume(device="gpu"):
            assert (hardware.cpu_isa(), hardware.device()) == ("avx2", "gpu")
        assert hardware.cpu_isa() == "avx2" and hardware.device() == "cpu"
    with pytest.raises(ValueError, match="cpu_isa.*Received: cpu_isa='avx3'"):
        with hardware.assume(cpu_isa="avx3"):
            pass
    with pytest.raises(ValueError, match="device"):
        with hardware.assume(device="npu"):
            pass


@pytest.mark.parametrize("isa", hardware.ISAS)
@pytest.mark.parametrize("vendor", ["amd", "intel"])
@pytest.mark.parametrize("measured_faster", [True, False])
def test_onednn_pays_where_it_beat_mkl_or_where_measured_faster_on_packed_kernels(isa, vendor, measured_faster):
    """torch's oneDNN projections: taken for any kernel on an AMD CPU with
    AVX-512 and, on an Intel one, in bfloat16; elsewhere with AVX2 or
    AVX-512 only for a kernel kept in oneDNN's layout (a `for_inference`
    copy's) and there only where the measurement finds it faster; never on
    an older CPU (the rule is a plain function of the hardware, the dtype,
    the kernel and the measurement, so it is checked on every backend)."""

    class Marked:  # a kernel that `pack_for_inference` marked
        pass

    packed = Marked()
    setattr(packed, torch_backend.PACKING, torch_backend.Packing())
    for dtype in ("float32", "bfloat16"):
        x = keras.ops.ones((2, 2), dtype)
        plain = isa == "avx512" and (vendor == "amd" or dtype == "bfloat16")
        with hardware.assume(cpu_isa=isa, cpu_vendor=vendor), measured.assume(measured_faster):
            assert torch_backend.onednn_pays(x) == plain, dtype
            assert torch_backend.onednn_pays(x, x) == plain, dtype
            assert torch_backend.onednn_pays(x, packed) == (
                plain or (isa in ("avx2", "avx512") and measured_faster)
            ), dtype


def test_the_vendor_is_read_and_assumed():
    assert hardware.cpu_vendor() in hardware.VENDORS
    with hardware.assume(cpu_vendor="amd"):
        assert hardware.cpu_vendor() == "amd"
        with hardware.assume(cpu_isa="avx2"):
            assert (hardware.cpu_vendor(), hardware.cpu_isa()) == ("amd", "avx2")
    with pytest.raises(ValueError, match="cpu_vendor.*Received: cpu_vendor='arm'"):
        with hardware.assume(cpu_vendor="arm"):
            pass


def test_measurement_keeps_the_faster_and_remembers_it_by_key():
    """`measured.faster` times both candidates once per key: the one that
    sleeps loses, and a second call with the same key does not time again."""
    calls = []

    def quick():
        calls.append("quick")

    def slow():
        calls.append("slow")
        time.sleep(0.01)

    key = ("test", "quick against slow")
    try:
        assert measured.faster(key, quick, slow) is True
        timed = len(calls)
        assert timed == 2 * (1 + measured.REPEATS)
        assert measured.faster(key, slow, quick) is True  # remembered, not timed again
        assert len(calls) == timed
        assert measured.choices()[key] is True
        assert measured.faster(("test", "slow against quick"), slow, quick) is False
        with measured.assume(False):
            assert measured.faster(key, quick, slow) is False
        assert measured.assumed() is None
    finally:
        measured.forget()
    assert key not in measured.choices()
    with pytest.raises(ValueError, match="first_is_faster"):
        with measured.assume("yes"):
            pass


def test_torch_packed_kernel_with_avx2_is_timed_once_a_shape(rng, monkeypatch):
    """On torch with AVX2 only, a packed kernel's projection is timed against
    `F.linear` at its first call for each input shape and follows the answer;
    either answer gives the product to float32 rounding."""
    if BACKEND != "torch":
        pytest.skip("the oneDNN projections and their packing are torch's")
    import torch

    timings = []
    real = measured._first_is_faster
    monkeypatch.setattr(
        measured, "_first_is_faster", lambda *a: timings.append(1) or real(*a)
    )
    monkeypatch.setattr(measured, "_CHOICES", {})
    kernel = torch.tensor(rng.normal(size=(8, 12)).astype("float32"))
    setattr(kernel, torch_backend.PACKING, torch_backend.Packing())
    x = rng.normal(size=(2, 5, 8)).astype("float32")
    with hardware.assume(cpu_isa="avx2"), torch.no_grad():
        for _ in range(2):
            with taken() as paths:
                got = to_numpy(kernels.dense(x, kernel))
        assert len(timings) == 1
        (choice,) = measured.choices().values()
        assert paths == (["onednn"] if choice else ["torch_linear"])
        np.testing.assert_allclose(got, x @ kernel.numpy(), atol=1e-5)
        kernels.dense(x[:1], kernel)  # another batch size: another shape to time
        assert len(timings) == 2
        # A gradient to record: the packed kernel does not serve, nothing is timed.
        with torch.enable_grad(), taken() as paths:
            kernels.dense(torch.tensor(x, requires_grad=True)[:, :2], kernel)
        assert len(timings) == 2 and paths == ["torch_linear"]


@pytest.mark.parametrize("isa, vendor", [("avx512", "amd"), ("avx512", "intel"), ("avx2", "amd")])
def test_torch_dense_follows_the_rule_end_to_end(rng, isa, vendor):
    """On torch, the same float32 call takes oneDNN on an (assumed) AMD CPU
    with AVX-512 and `F.linear` on an Intel one or an AVX2-only one, with the
    same numbers."""
    if BACKEND != "torch":
        pytest.skip("the oneDNN projections are torch's")
    x = rng.normal(size=(2, 5, 8)).astype("float32")
    kernel = rng.normal(size=(8, 12)).astype("float32")
    with hardware.assume(cpu_isa=isa, cpu_vendor=vendor), taken() as paths:
        got = to_numpy(kernels.dense(x, kernel))
    assert paths == (["onednn"] if (isa, vendor) == ("avx512", "amd") else ["torch_linear"])
    np.testing.assert_allclose(got, x @ kernel, atol=1e-5)


@pytest.mark.parametrize("device", ["cpu", "gpu"])
def test_xla_backends_choose_attention_by_device(rng, device):
    """jax and tensorflow: the batched products on a CPU, the fused kernel on an
    accelerator; torch's fused attention runs on any device."""
    q = rng.normal(size=(1, 5, 2, 4)).astype("float32")
    with hardware.assume(device=device), taken() as paths:
        kernels.attention(q, q, q)
    if BACKEND == "torch":
        assert paths == ["sdpa"]
    else:
        assert paths == (["xla_attention"] if device == "cpu" else ["fused_attention"])
    assert hardware.on_cpu() == (hardware.device() == "cpu")


def test_jax_products_widen_bfloat16_on_a_cpu_only():
    a = keras.ops.ones((2, 2), "bfloat16")
    if BACKEND != "jax":
        pytest.skip("the float32 accumulation of bfloat16 products is jax's")
    assert str(jax_backend.matmul(a, a).dtype) == "float32"
    with hardware.assume(device="gpu"):
        assert str(jax_backend.matmul(a, a).dtype) == "bfloat16"
