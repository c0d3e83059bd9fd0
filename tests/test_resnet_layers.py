"""ResNet layers of the hybrids against the NumPy reference (reference_resnet)."""

import keras
import numpy as np
import pytest

import reference_resnet as ref
from conftest import to_numpy
from keras_vit.layers import BottleneckUnit, ResNetStage, StdConv2D, group_norm
from keras_vit.layers.resnet import resnet_backbone

ATOL = 1e-4


def _random_kernel(rng, shape):
    # A non-zero mean and uneven scales per output channel, so that a wrong
    # reduction axis or a sample (ddof=1) std shows up.
    scale = rng.uniform(0.1, 3.0, size=shape[-1])
    return (rng.normal(size=shape) * scale + rng.normal(size=shape[-1])).astype("float32")


def _official_params(layer, rng):
    """Random official-layout params for `layer`; also assigns them to it."""
    params = {}
    for v in layer.weights:
        key = v.path.replace("/gamma", "/scale").replace("/beta", "/bias")
        if "kernel" in key:
            value = _random_kernel(rng, v.shape)
        else:
            value = rng.normal(size=v.shape).astype("float32")
        v.assign(value)
        params[key] = value
    return params


def test_standardized_kernel_matches_reference(rng):
    conv = StdConv2D(6, 3)
    conv.build((None, 8, 8, 5))
    kernel = _random_kernel(rng, (3, 3, 5, 6))
    got = to_numpy(conv.standardized_kernel(keras.ops.convert_to_tensor(kernel)))
    np.testing.assert_allclose(got, ref.standardize(kernel), atol=1e-5)
    # Standardised: zero mean and (almost) unit population std per output.
    np.testing.assert_allclose(got.mean(axis=(0, 1, 2)), 0, atol=1e-5)
    np.testing.assert_allclose(got.std(axis=(0, 1, 2)), 1, atol=1e-3)


@pytest.mark.parametrize(
    "size, kernel, stride",
    [(9, 7, 2), (10, 7, 2), (7, 3, 2), (8, 1, 2)],
)
def test_std_conv_matches_reference(rng, size, kernel, stride):
    x = rng.uniform(-1, 1, size=(2, size, size + 1, 4)).astype("float32")
    w = _random_kernel(rng, (kernel, kernel, 4, 8))
    conv = StdConv2D(8, kernel, strides=stride)
    conv.build(x.shape)
    conv.kernel.assign(w)
    got = to_numpy(conv(x))
    want = ref.conv2d(x, ref.standardize(w), stride)
    assert got.shape == want.shape == conv.compute_output_shape(x.shape)
    np.testing.assert_allclose(got, want, atol=ATOL)


@pytest.mark.parametrize("size", [7, 8])
def test_group_norm_matches_reference(rng, size):
    x = (rng.normal(size=(2, size, size + 3, 64)) * 3 + 1).astype("float32")
    x[..., :2] += 5.0  # groups with different statistics
    gamma = rng.normal(size=64).astype("float32")
    beta = rng.normal(size=64).astype("float32")
    layer = group_norm("gn1")
    layer.build(x.shape)
    layer.gamma.assign(gamma)
    layer.beta.assign(beta)
    np.testing.assert_allclose(
        to_numpy(layer(x)), ref.group_norm(x, gamma, beta), atol=ATOL
    )


@pytest.mark.parametrize("size", [9, 112])
def test_stem_max_pool_matches_reference(rng, size):
    # The stem's pool layer, on negative inputs: padding by 0 would show.
    inputs = keras.Input((2 * size, 2 * size, 3))
    model = keras.Model(inputs, resnet_backbone(inputs, (), 0.5))
    pool = model.get_layer("pool_root")
    x = rng.uniform(-3, -1, size=(1, size, size + 1, 32)).astype("float32")
    want = ref.max_pool_same(x)
    got = to_numpy(pool(x))
    assert got.shape == want.shape
    np.testing.assert_allclose(got, want, atol=0)


@pytest.mark.parametrize(
    "in_channels, strides, projection",
    [(32, 1, True), (128, 1, False), (128, 2, True)],
)
def test_bottleneck_unit_matches_reference(rng, in_channels, strides, projection):
    x = rng.uniform(-1, 1, size=(2, 7, 8, in_channels)).astype("float32")
    unit = BottleneckUnit(32, strides=strides, name="unit1")
    unit.build(x.shape)
    assert unit.has_projection == projection
    params = _official_params(unit, rng)
    got = to_numpy(unit(x))
    want = ref.bottleneck_unit(params, "unit1", x, strides)
    assert got.shape == want.shape == unit.compute_output_shape(x.shape)
    np.testing.assert_allclose(got, want, atol=ATOL, rtol=1e-4)


def test_resnet_stage_variable_paths_and_output(rng):
    x = rng.uniform(-1, 1, size=(1, 9, 9, 64)).astype("float32")
    stage = ResNetStage(32, num_units=2, strides=2, name="block2")
    stage.build(x.shape)
    paths = {v.path for v in stage.weights}
    assert "block2/unit1/conv1/kernel" in paths
    assert "block2/unit1/gn_proj/beta" in paths
    assert "block2/unit2/gn3/gamma" in paths
    assert not any(p.startswith("block2/unit2/conv_proj") for p in paths)
    params = _official_params(stage, rng)
    want = ref.bottleneck_unit(params, "block2/unit1", x, 2)
    want = ref.bottleneck_unit(params, "block2/unit2", want, 1)
    got = to_numpy(stage(x))
    assert got.shape == stage.compute_output_shape(x.shape) == (1, 5, 5, 128)
    np.testing.assert_allclose(got, want, atol=ATOL, rtol=1e-4)


def test_residual_branch_starts_as_identity():
    # gn3's scale starts at 0 (official init): unit(x) == relu(shortcut(x)).
    unit = BottleneckUnit(32)
    x = np.random.default_rng(1).uniform(-1, 1, (1, 4, 4, 128)).astype("float32")
    np.testing.assert_allclose(to_numpy(unit(x)), np.maximum(x, 0), atol=1e-6)


@pytest.mark.parametrize(
    "build, message",
    [
        (lambda: StdConv2D(0, 3), "filters"),
        (lambda: StdConv2D(8, 3, padding="causal"), "padding"),
        (lambda: StdConv2D(8, 3, epsilon=0), "epsilon"),
        (lambda: StdConv2D(8, 3, data_format="channels_first"), "data_format"),
        (lambda: BottleneckUnit(48), "filters"),
        (lambda: BottleneckUnit(32, strides=3), "strides"),
        (lambda: ResNetStage(32, 0), "num_units"),
        (lambda: ResNetStage(32, 1, norm_epsilon=-1.0), "norm_epsilon"),
    ],
)
def test_invalid_arguments(build, message):
    with pytest.raises(ValueError, match=message):
        build()
