"""A `for_inference` copy's projection kernels kept in oneDNN's layout (torch):
packed once and after each assignment, the path its hardware rule takes with
AVX2, gradients and copies left alone, only torch's kernels marked."""

import keras
import numpy as np
import pytest

from conftest import TINY, to_numpy
from kernel_helpers import BACKEND, onednn_computes_here, taken
from keras_vit import ViT, kernels
from keras_vit.kernels import hardware, measured, torch_backend


def _packings(model):
    """The oneDNN packings of a model's kernels: {path: `torch_backend.Packing`}."""
    out = {}
    for variable in model.weights:
        packing = getattr(variable.value, torch_backend.PACKING, None)
        if packing is not None:
            out[variable.path] = packing
    return out


@pytest.mark.parametrize("dtype", ["float32", "bfloat16"])
def test_for_inference_packs_kernels_once_and_follows_assignments(rng, dtype):
    """A `for_inference` copy keeps its projection kernels in oneDNN's layout on
    torch: outputs bit-equal to the original's, one packing per projection,
    made on first use and remade after the kernel is assigned (never stale).
    oneDNN is forced wherever it computes: its hardware rule has tests of its own."""
    with kernels.forced("onednn"):
        _check_packing(rng, dtype)


def _check_packing(rng, dtype):
    model = ViT(**TINY, classes=5, classifier_activation=None, dtype=dtype)
    other = ViT(**TINY, classes=5, classifier_activation=None, dtype=dtype)
    x = rng.normal(size=(3, 32, 32, 3)).astype("float32")
    fast = model.for_inference()
    packings = _packings(fast)
    got = fast.predict(x, verbose=0)
    expected = model.predict(x, verbose=0)
    if not onednn_computes_here(dtype):
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


@pytest.mark.parametrize("measured_faster", [True, False])
def test_for_inference_copy_with_avx2_takes_onednn_where_measured_faster(rng, measured_faster):
    """With AVX2 only, the model's projections take `F.linear` (oneDNN would
    reorder each kernel at every call) and its `for_inference` copy's take
    oneDNN on the packed kernels where the measurement finds that faster,
    with the same outputs to float32 rounding either way."""
    if BACKEND != "torch":
        pytest.skip("the oneDNN projections and their packing are torch's")
    model = ViT(**TINY, classes=5, classifier_activation=None)
    x = rng.normal(size=(2, 32, 32, 3)).astype("float32")
    fast = model.for_inference()
    with hardware.assume(cpu_isa="avx2"), measured.assume(measured_faster):
        with taken() as plain:
            expected = model.predict(x, verbose=0)
        with taken() as packed:
            got = fast.predict(x, verbose=0)
    dense = {"onednn", "torch_linear"}
    assert set(plain) & dense == {"torch_linear"}, plain
    if measured_faster:
        assert set(packed) & dense == {"onednn", "torch_linear"}, packed  # the head: plain Dense
        assert any(p.packed is not None for p in _packings(fast).values())
    else:
        assert set(packed) & dense == {"torch_linear"}, packed
        assert not any(p.packed is not None for p in _packings(fast).values())
    np.testing.assert_allclose(got, expected, atol=1e-5, rtol=1e-5)


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
        packing = getattr(twin, torch_backend.PACKING, None)
        assert packing is None or packing.packed is None
        torch.testing.assert_close(twin, kernel.value, atol=0, rtol=0)


def test_pack_for_inference_marks_only_torch_kernels():
    layer = keras.layers.Dense(4)
    layer.build((None, 3))
    kernels.pack_for_inference(layer.weights)
    marked = [getattr(v.value, torch_backend.PACKING, None) is not None for v in layer.weights]
    assert marked == ([True, False] if keras.backend.backend() == "torch" else [False, False])
