"""Function transforms through the kernels: `keras.ops.vectorized_map` over a
model with gradients on every backend, and torch's `torch.func` transforms
(`vmap`, `grad`, `jacrev`, `jvp`) through each torch fast path, against the
portable form."""

import keras
import numpy as np
import pytest

from conftest import TINY, to_numpy
from kernel_helpers import BACKEND, only, taken, value_and_grads
from keras_vit import ViT, kernels
from keras_vit.kernels import registry
from keras_vit.layers import MlpBlock
from keras_vit.layers.dpt import ResidualConvUnit

TORCH = BACKEND == "torch"
requires_torch = pytest.mark.skipif(not TORCH, reason="torch's own fast paths, under torch's function transforms")


def _model(rng):
    model = ViT(**TINY, classes=3, classifier_activation=None)
    for variable in model.weights:
        variable.assign(rng.normal(scale=0.2, size=variable.shape).astype("float32"))
    return model


def test_vectorized_map_over_a_model_with_gradients(rng):
    """`vectorized_map` of a model over a stack of batches, its values and its
    input gradients, equal the model called on each batch in turn (on torch with
    gradients recorded, through the fast paths' function-transform rules)."""
    model = _model(rng)
    xs = rng.normal(size=(3, 2, 32, 32, 3)).astype("float32")
    weights = rng.normal(size=(3, 2, 3)).astype("float32")

    def mapped(xs):
        return keras.ops.vectorized_map(lambda x: model(x), xs)

    def looped(xs):
        return keras.ops.stack([model(xs[i]) for i in range(3)])

    got, (got_grad,) = value_and_grads(mapped, [xs], weights)
    expected, (expected_grad,) = value_and_grads(looped, [xs], weights)
    np.testing.assert_allclose(got, expected, atol=2e-5, rtol=1e-5)
    np.testing.assert_allclose(got_grad, expected_grad, atol=2e-5, rtol=1e-4)
    assert np.abs(got_grad).max() > 0


# Paths the ViT's forward pass does not take, each with a layer that takes it.
LAYER_PATHS = {"channels_last_conv": lambda: ResidualConvUnit(4)}
# Every other torch fast path that a model's forward pass can take. jax's and
# tensorflow's are their own XLA ops, which `vectorized_map` batches like any
# other: the test above runs them.
MODEL_PATHS = [
    (override.op, override.name)
    for op in ("dense", "attention", "call_sublayer")
    for override in registry.registered(op, "torch")
    if override.name not in LAYER_PATHS
]
# The policy under which a path applies, where it is not float32's.
PATH_POLICIES = {"half_layer_norm": "bfloat16"}


@requires_torch
@pytest.mark.parametrize("op, path", MODEL_PATHS, ids=[name for _, name in MODEL_PATHS])
def test_vectorized_map_with_gradients_through_each_torch_path(rng, op, path):
    """As above with one fast path taken alone for its op (forced: whatever
    the hardware rule says on this machine), its values and input gradients
    equal the portable model's called batch by batch; torch's oneDNN
    projection refused function transforms before it had rules for them."""
    policy = PATH_POLICIES.get(path, "float32")
    model = ViT(**TINY, classes=3, classifier_activation=None, dtype=policy)
    for variable in model.weights:
        variable.assign(rng.normal(scale=0.2, size=variable.shape).astype("float32"))
    xs = rng.normal(size=(2, 2, 32, 32, 3)).astype("float32")
    weights = rng.normal(size=(2, 2, 3)).astype("float32")

    def mapped(xs):
        return keras.ops.vectorized_map(lambda x: model(x), xs)

    def looped(xs):
        return keras.ops.stack([model(xs[i]) for i in range(2)])

    with only(path, op), taken() as paths:
        got, (got_grad,) = value_and_grads(mapped, [xs], weights)
    with kernels.portable_only():
        expected, (expected_grad,) = value_and_grads(looped, [xs], weights)
    # torch's fused attention has no batching rule: under vmap it defers to
    # the portable form (test_torch_func_through_sdpa).
    if path != "sdpa":
        assert path in paths, paths
    for a, b in ((got, expected), (got_grad, expected_grad)):
        a, b = np.asarray(a, "float32"), np.asarray(b, "float32")
        if policy == "float32":
            np.testing.assert_allclose(a, b, atol=2e-5, rtol=1e-4)
        else:  # bfloat16 keeps 8 bits of mantissa
            np.testing.assert_allclose(a, b, atol=3e-2 * np.abs(b).max())


@requires_torch
@pytest.mark.parametrize("path", sorted(LAYER_PATHS))
def test_vectorized_map_with_gradients_through_a_layer_path(rng, path):
    """As above for the paths of `LAYER_PATHS`, on their layer."""
    layer = LAYER_PATHS[path]()
    layer.build((2, 5, 6, 4))
    for variable in layer.weights:
        variable.assign(rng.normal(scale=0.3, size=variable.shape).astype("float32"))
    xs = rng.normal(size=(2, 2, 5, 6, 4)).astype("float32")
    weights = rng.normal(size=(2, 2, 5, 6, 4)).astype("float32")

    def mapped(xs):
        return keras.ops.vectorized_map(lambda x: layer(x), xs)

    def looped(xs):
        return keras.ops.stack([layer(xs[i]) for i in range(2)])

    with only(path, "call_sublayer"), taken() as paths:
        got, (got_grad,) = value_and_grads(mapped, [xs], weights)
    with kernels.portable_only():
        expected, (expected_grad,) = value_and_grads(looped, [xs], weights)
    assert path in paths, paths
    np.testing.assert_allclose(got, expected, atol=2e-5, rtol=1e-4)
    np.testing.assert_allclose(got_grad, expected_grad, atol=2e-5, rtol=1e-4)
    assert np.abs(got_grad).max() > 0


def test_vectorized_map_over_a_model_for_inference(rng):
    """The `for_inference` copy (on torch its kernels packed for oneDNN) under
    `vectorized_map`, with and without gradients, equals its calls one by one."""
    model = _model(rng).for_inference()
    xs = rng.normal(size=(2, 2, 32, 32, 3)).astype("float32")
    expected = np.stack([to_numpy(model(xs[i])) for i in range(2)])
    got = to_numpy(keras.ops.vectorized_map(lambda x: model(x), keras.ops.convert_to_tensor(xs)))
    np.testing.assert_allclose(got, expected, atol=2e-5, rtol=1e-5)
    if TORCH:
        import torch

        with torch.no_grad():
            got = to_numpy(keras.ops.vectorized_map(lambda x: model(x), keras.ops.convert_to_tensor(xs)))
        np.testing.assert_allclose(got, expected, atol=2e-5, rtol=1e-5)


# --- torch.func through each torch fast path ---------------------------------



def _t(a):
    import torch

    return torch.tensor(np.asarray(a, "float32"))


def _close(a, b, atol=2e-5):
    np.testing.assert_allclose(to_numpy(a), to_numpy(b), atol=atol, rtol=1e-5)


def _both(fn):
    """`(fn under the fast path, fn under the portable form)` as values of `fn()`."""
    return fn(), _portable(fn)


def _portable(fn):
    with kernels.portable_only():
        return fn()


@requires_torch
@pytest.mark.parametrize("dense_path", ["onednn", "torch_linear"])
def test_torch_func_through_the_dense_paths(rng, dense_path):
    """vmap, grad, jacrev and jvp through `dense` (oneDNN forward and backward,
    its autograd function's rules; `F.linear`) equal the portable form's."""
    import torch
    from torch.func import grad, jacrev, jvp, vmap

    xs, kernel, bias = _t(rng.normal(size=(3, 4, 8))), _t(rng.normal(size=(8, 6))), _t(rng.normal(size=6))
    kernels_ = _t(rng.normal(size=(3, 8, 6)))
    w = _t(rng.normal(size=(4, 6)))

    def loss(x, k, b):
        return (kernels.dense(x, k, b, activation="gelu_tanh") * w).sum()

    cases = {
        "vmap": lambda: vmap(lambda x: kernels.dense(x, kernel, bias))(xs),
        "vmap, batched kernel": lambda: vmap(lambda x, k: kernels.dense(x, k, bias))(xs, kernels_),
        "grad": lambda: grad(loss, argnums=(0, 1, 2))(xs[0], kernel, bias),
        "vmap of grad": lambda: vmap(grad(loss), in_dims=(0, None, None))(xs, kernel, bias),
        "jacrev": lambda: jacrev(lambda x: kernels.dense(x, kernel, bias))(xs[0, :2]),
        "jvp": lambda: jvp(lambda x, k: kernels.dense(x, k, bias), (xs[0], kernel), (xs[1], kernels_[0])),
    }
    with only(dense_path, "dense"), taken() as paths:
        got = {name: case() for name, case in cases.items()}
    assert dense_path in paths
    for name, case in cases.items():
        expected = _portable(case)
        for a, b in zip(*(t if isinstance(t, tuple) else (t,) for t in (got[name], expected))):
            _close(a, b, atol=5e-5)
    # torch's own autograd through the same calls agrees too.
    x = xs[0].clone().requires_grad_(True)
    with only(dense_path, "dense"):
        loss(x, kernel, bias).backward()
    _close(x.grad, got["grad"][0], atol=5e-5)
    assert torch.is_grad_enabled()


@requires_torch
def test_torch_func_through_packed_kernels(rng):
    """A kernel packed for oneDNN (`pack_for_inference`) under vmap and grad."""
    from torch.func import grad, vmap

    layer = keras.layers.Dense(6)
    layer.build((None, 8))
    layer.kernel.assign(rng.normal(size=(8, 6)).astype("float32"))
    kernels.pack_for_inference(layer.weights)
    xs = _t(rng.normal(size=(3, 4, 8)))
    import torch

    def mapped():
        with torch.no_grad():
            return vmap(lambda x: kernels.project(layer, x))(xs)

    def gradient():
        return grad(lambda x: kernels.project(layer, x, "gelu_tanh").sum())(xs[0])

    with kernels.forced("onednn"):
        got = mapped(), gradient()
        with torch.no_grad():
            plain = kernels.project(layer, xs[0])  # the packed product itself, outside a transform
    expected = _portable(mapped), _portable(gradient)
    for a, b in zip(got, expected):
        _close(a, b)
    _close(plain, expected[0][0])


@requires_torch
@pytest.mark.parametrize("masked", [False, True])
def test_torch_func_through_sdpa(rng, masked):
    """Fused attention on strided views under grad and jacrev (torch's kernel),
    and under vmap (the portable form: torch has no batching rule for it)."""
    from torch.func import grad, jacrev, vmap

    q, k, v = (_t(rng.normal(size=(3, 2, 5, 2, 4))) for _ in range(3))
    mask = keras.ops.convert_to_tensor(np.tril(np.ones((5, 5), bool))) if masked else None

    cases = {
        "vmap": lambda: vmap(lambda q, k, v: kernels.attention(q, k, v, mask=mask))(q, k, v),
        "grad": lambda: grad(lambda q, k, v: kernels.attention(q, k, v, mask=mask).square().sum(),
                             argnums=(0, 1, 2))(q[0], k[0], v[0]),
        "jacrev": lambda: jacrev(lambda q: kernels.attention(q, k[0], v[0], mask=mask))(q[0, :1]),
    }
    with only("sdpa"), taken() as paths:
        got = {name: case() for name, case in cases.items()}
    assert "sdpa" in paths
    for name, case in cases.items():
        expected = _portable(case)
        for a, b in zip(*(t if isinstance(t, tuple) else (t,) for t in (got[name], expected))):
            _close(a, b, atol=5e-5)


@requires_torch
@pytest.mark.parametrize("policy", ["float32", "bfloat16"])
def test_torch_func_through_sublayer_calls(rng, policy):
    """Direct sublayer calls (and the half-precision LayerNorm) under vmap and grad."""
    import torch
    from torch.func import grad, vmap

    norm = keras.layers.LayerNormalization(dtype=policy)
    norm.build((2, 4, 8))
    mlp = MlpBlock(mlp_dim=16, dtype=policy)
    mlp.build((2, 4, 8))
    xs = _t(rng.normal(size=(3, 2, 4, 8))).to(getattr(torch, policy))

    def sublayers(x):
        return kernels.call_sublayer(mlp, kernels.call_sublayer(norm, x), training=False)

    cases = {
        "vmap": lambda: vmap(sublayers)(xs),
        "grad": lambda: grad(lambda x: sublayers(x).float().sum())(xs[0]),
    }
    with taken() as paths:
        got = {name: case() for name, case in cases.items()}
    assert "direct_calls" in paths and ("half_layer_norm" in paths) == (policy == "bfloat16")
    for name, case in cases.items():
        _close(got[name].float(), _portable(case).float(), atol=2e-5 if policy == "float32" else 3e-2)
