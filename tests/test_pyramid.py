"""`SimpleFeaturePyramid`: a NumPy reference, shapes for every patch size, saving."""

import math
import os
import tempfile

import keras
import numpy as np
import pytest
import scipy.special

import keras_vit
from conftest import TINY, to_numpy
from keras_vit.layers.pyramid import SimpleFeaturePyramid
from keras_vit.execution.sharded_load import shapes_only


# --- an independent NumPy forward pass of ViTDet's pyramid ------------------------------


def np_layer_norm(x, gamma, beta, eps=1e-6):
    mean = x.mean(-1, keepdims=True)
    var = x.var(-1, keepdims=True)
    return (x - mean) / np.sqrt(var + eps) * gamma + beta


def np_deconv2x2(x, kernel, bias):
    """Transposed 2x2 convolution, stride 2: each pixel paints a 2x2 block.

    Keras' transposed kernel is `(kh, kw, out, in)`.
    """
    b, h, w, _ = x.shape
    out = np.zeros((b, 2 * h, 2 * w, kernel.shape[2]))
    for a in range(2):
        for c in range(2):
            out[:, a::2, c::2] = np.einsum("bhwi,oi->bhwo", x, kernel[a, c])
    return out + bias


def np_conv_same(x, kernel):
    """Stride-1 "same" convolution (odd kernel), no bias."""
    k = kernel.shape[0]
    p = k // 2
    padded = np.pad(x, ((0, 0), (p, p), (p, p), (0, 0)))
    h, w = x.shape[1:3]
    out = np.zeros(x.shape[:3] + (kernel.shape[3],))
    for i in range(k):
        for j in range(k):
            out += np.einsum("bhwi,io->bhwo", padded[:, i : i + h, j : j + w], kernel[i, j])
    return out


def np_max_pool_same(x, size):
    b, h, w, c = x.shape
    rows, cols = -(-h // size), -(-w // size)
    out = np.full((b, rows, cols, c), -np.inf)
    for i in range(rows):
        for j in range(cols):
            out[:, i, j] = x[:, i * size : (i + 1) * size, j * size : (j + 1) * size].max((1, 2))
    return out


def np_resize_bilinear(x, size):
    """Bilinear resize with half-pixel centres, no antialiasing."""

    def weights(n_in, n_out):
        src = np.clip((np.arange(n_out) + 0.5) * n_in / n_out - 0.5, 0, n_in - 1)
        low = np.floor(src).astype(int)
        high = np.minimum(low + 1, n_in - 1)
        matrix = np.zeros((n_out, n_in))
        matrix[np.arange(n_out), low] += 1 - (src - low)
        matrix[np.arange(n_out), high] += src - low
        return matrix

    rows, cols = weights(x.shape[1], size[0]), weights(x.shape[2], size[1])
    return np.einsum("ph,bhwc,qw->bpqc", rows, x, cols)


def np_pyramid(x, params, input_stride, strides, top_block):
    """The pyramid from its weights `{sublayer name: [arrays]}`."""
    gelu = lambda v: 0.5 * v * (1 + scipy.special.erf(v / np.sqrt(2)))  # noqa: E731
    outputs = []
    for stride in strides:
        ratio = input_stride / stride
        k = round(math.log2(ratio))
        y = x.astype("float64")
        for step in range(k):
            if step:
                y = gelu(np_layer_norm(y, *params[f"stride{stride}_up_norm_{step - 1}"]))
            y = np_deconv2x2(y, *params[f"stride{stride}_up_{step}"])
        if k < 0:
            y = np_max_pool_same(y, 2**-k)
        if 2.0**k != ratio:
            size = tuple(-(-n * input_stride // stride) for n in x.shape[1:3])
            y = np_resize_bilinear(y, size)
        y = np_layer_norm(np_conv_same(y, *params[f"stride{stride}_lateral"]),
                          *params[f"stride{stride}_lateral_norm"])
        y = np_layer_norm(np_conv_same(y, *params[f"stride{stride}_output"]),
                          *params[f"stride{stride}_output_norm"])
        outputs.append(y)
    if top_block:
        outputs.append(outputs[-1][:, ::2, ::2])
    return outputs


def compiled(pyramid, x):
    """The layer in a functional model (run compiled: one XLA program under jax
    instead of one per operation)."""
    inputs = keras.Input(x.shape[1:])
    return keras.Model(inputs, pyramid(inputs))


def randomised(pyramid, rng):
    """Gives every weight random values (norm scales away from 1, so a
    misplaced norm shows); returns them by sublayer name."""
    params = {}
    for variable in pyramid.weights:
        value = rng.normal(scale=0.5, size=variable.shape).astype("float32")
        variable.assign(value)
        sublayer = variable.path.split("/")[-2]
        params.setdefault(sublayer, []).append(value)
    return params


@pytest.mark.parametrize(
    "input_stride, strides, top_block, grid",
    [
        (16, (4, 8, 16, 32), True, (4, 6)),   # ViTDet's factors 4, 2, 1, 0.5
        (14, (4, 8, 16, 32), False, (5, 4)),  # not powers of two: resized
        (32, (4, 16, 64), True, (3, 2)),      # up by 8, down by 2 with odd sizes
        (8, (4, 32), False, (5, 7)),          # down by 4, partial windows
    ],
)
def test_equals_numpy_reference(rng, input_stride, strides, top_block, grid):
    x = rng.normal(size=(2, *grid, 16)).astype("float32")
    pyramid = SimpleFeaturePyramid(input_stride, out_channels=6, strides=strides, top_block=top_block)
    model = compiled(pyramid, x)
    params = randomised(pyramid, rng)
    expected = np_pyramid(x, params, input_stride, strides, top_block)
    outputs = model.predict_on_batch(x)
    assert len(outputs) == len(expected) == len(pyramid.output_strides)
    for out, ref in zip(outputs, expected):
        np.testing.assert_allclose(out, ref, atol=2e-4, rtol=1e-4)


def _backbone(patch_size, image_size):
    return keras_vit.ViT(**dict(TINY, patch_size=patch_size, image_size=image_size), include_top=False)


def _hybrid():
    # Stem (stride 4) and two stages (the second of stride 2), 2x2 patches: stride 16.
    return keras_vit.ViTHybrid(
        resnet_layers=(1, 1), resnet_width=0.5, patch_size=2, image_size=64,
        hidden_size=16, num_layers=1, num_heads=2, mlp_dim=32, include_top=False,
    )


@pytest.mark.parametrize(
    "make, image",
    [
        (lambda: _backbone(8, (32, 48)), (32, 48)),
        (lambda: _backbone(14, (56, 42)), (56, 42)),
        (lambda: _backbone(16, (64, 96)), (64, 96)),
        (lambda: _backbone(32, (64, 128)), (64, 128)),
        (_hybrid, (64, 64)),
    ],
    ids=["patch8", "patch14", "patch16", "patch32", "hybrid16"],
)
def test_strides_of_any_backbone(make, image):
    """Levels at strides 4/8/16/32 of the image, whatever the map's stride.

    Traced shapes (the layer's `call` runs on symbolic tensors), without
    initialising weights; `test_equals_numpy_reference` runs the layer.
    """
    with shapes_only():
        model = make()
        stride = model.effective_patch_size[0]
        tokens = model.get_layer(f"encoderblock_{model.num_layers - 1}").output
        patches = keras.layers.Reshape(model.grid_size + (model.hidden_size,))(
            tokens[:, model.num_prefix_tokens :]
        )
        pyramid = SimpleFeaturePyramid(stride, out_channels=8, top_block=True)
        maps = pyramid(patches)
    expected = [(None, -(-image[0] // t), -(-image[1] // t), 8) for t in (4, 8, 16, 32, 64)]
    assert [tuple(m.shape) for m in maps] == expected
    assert [tuple(s) for s in pyramid.compute_output_shape(patches.shape)] == expected
    assert pyramid.output_strides == (4, 8, 16, 32, 64)


def test_relative_factors_without_resizing():
    """`match_strides=False`: patch 14 gives ViTDet's factors 4, 2, 1, 0.5."""
    pyramid = SimpleFeaturePyramid(14, out_channels=4, match_strides=False)
    with shapes_only():
        maps = pyramid(keras.Input((6, 6, 8), batch_size=1))
    assert [tuple(m.shape)[1:3] for m in maps] == [(24, 24), (12, 12), (6, 6), (3, 3)]
    assert pyramid.output_strides == (3.5, 7, 14, 28)
    assert [tuple(s) for s in pyramid.compute_output_shape((1, 6, 6, 8))] == [
        tuple(m.shape) for m in maps
    ]
    assert not any("resize" in w.path for w in pyramid.weights)


def test_config_and_keras_round_trip(rng):
    x = rng.normal(size=(2, 3, 5, 12)).astype("float32")
    layer = SimpleFeaturePyramid((14, 14), out_channels=4, top_block=True, name="pyramid")
    config = layer.get_config()
    assert config["input_stride"] == 14 and config["strides"] == [4, 8, 16, 32]
    assert SimpleFeaturePyramid.from_config(config).get_config() == config
    model = compiled(layer, x)
    randomised(layer, rng)
    expected = model.predict_on_batch(x)
    with tempfile.TemporaryDirectory() as folder:
        path = os.path.join(folder, "pyramid.keras")
        model.save(path)
        loaded = keras.saving.load_model(path)
    for out, ref in zip(loaded.predict_on_batch(x), expected):
        np.testing.assert_allclose(out, ref, atol=1e-6)


def test_every_weight_trains(rng):
    inputs = keras.Input((4, 4, 8))
    maps = SimpleFeaturePyramid(16, out_channels=4, top_block=True)(inputs)
    model = keras.Model(inputs, maps)
    before = [to_numpy(w).copy() for w in model.trainable_weights]
    model.compile(optimizer=keras.optimizers.SGD(0.1), loss=["mse"] * len(maps))
    x = rng.normal(size=(2, 4, 4, 8)).astype("float32")
    targets = [rng.normal(size=(2,) + tuple(m.shape[1:])).astype("float32") for m in maps]
    model.fit(x, targets, epochs=1, batch_size=2, verbose=0)
    for weight, old in zip(model.trainable_weights, before):
        assert not np.array_equal(to_numpy(weight), old), f"{weight.path} received no gradient"


@pytest.mark.parametrize(
    "kwargs, match",
    [
        (dict(input_stride=0), "input_stride"),
        (dict(input_stride=(16, 8)), "input_stride=\\(16, 8\\)"),
        (dict(input_stride=16, strides=(8, 4)), "strides=\\(8, 4\\)"),
        (dict(input_stride=16, strides=()), "strides"),
        (dict(input_stride=16, out_channels=0), "out_channels"),
        (dict(input_stride=16, top_block="yes"), "top_block"),
    ],
)
def test_bad_arguments(kwargs, match):
    with pytest.raises(ValueError, match=match):
        SimpleFeaturePyramid(**kwargs)
