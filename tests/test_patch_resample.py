"""FlexiViT patch-size resampling: the paper's formula, its property, loading."""

import numpy as np
import pytest

import keras_vit
from conftest import DEIT_NPZ, DEIT_SAFETENSORS, TINY, imagenet_preprocess, requires_shared, runs_once, to_numpy
from keras_vit.weights.mapping import model_state
from keras_vit.weights.patch_resample import resample_patch_embedding

# (old patch, new patch): shrinking, growing, non-integer ratios, rectangles.
SIZES = [((16, 16), (8, 8)), ((8, 8), (16, 16)), ((16, 16), (12, 12)), ((8, 10), (10, 12)),
         ((8, 6), (15, 9)), ((7, 7), (5, 5))]


def _reference_resize(patches, new_size, antialias):
    """The resize of the paper's code: `tf.image.resize(..., "bilinear")` in
    big_vision (no antialiasing), `jax.image.resize` (antialiased) else.

    Args:
        patches: `(n, h, w)` float array.
    """
    if antialias:
        jax_image = pytest.importorskip("jax.image", reason="jax.image.resize is the reference resize")
        shape = (patches.shape[0],) + tuple(new_size)
        return np.asarray(jax_image.resize(patches.astype("float32"), shape, "bilinear", antialias=True))
    tf = pytest.importorskip("tensorflow", reason="tf.image.resize is big_vision's resize")
    resized = tf.image.resize(patches[..., None].astype("float32"), new_size, method="bilinear")
    return resized.numpy()[..., 0]


def _paper_formula(kernel, new_size, antialias):
    """w_new = pinv(B^T) w, B built by resizing each basis patch (big_vision's recipe)."""
    old_size = kernel.shape[:2]
    basis = np.eye(old_size[0] * old_size[1]).reshape(-1, *old_size)
    resize = _reference_resize(basis, new_size, antialias).reshape(len(basis), -1).T.astype("float64")
    flat = kernel.reshape(old_size[0] * old_size[1], -1).astype("float64")
    return (np.linalg.pinv(resize.T) @ flat).reshape(tuple(new_size) + kernel.shape[2:])


@pytest.mark.parametrize("antialias", [False, True])
@pytest.mark.parametrize("old,new", SIZES)
def test_matches_the_papers_formula(rng, old, new, antialias):
    kernel = rng.normal(size=old + (3, 5)).astype("float32")
    got = resample_patch_embedding(kernel, new, antialias=antialias)
    assert got.shape == new + (3, 5) and got.dtype == np.float32
    np.testing.assert_allclose(got, _paper_formula(kernel, new, antialias), rtol=0, atol=1e-5)


@pytest.mark.parametrize("old,new", [((8, 8), (16, 16)), ((7, 7), (15, 15)), ((8, 6), (9, 15)), ((4, 4), (6, 10))])
def test_resized_patch_gives_the_original_token(rng, old, new):
    # The paper's property <resize(x), w_new> = <x, w>, exact when the patch grows.
    kernel = rng.normal(size=old + (3, 8))
    patches = rng.normal(size=(20,) + old + (3,))
    # Each channel is resized as its own image.
    channels = np.moveaxis(patches, -1, 1).reshape(-1, *old)
    resized = np.moveaxis(_reference_resize(channels, new, False).reshape(20, 3, *new), 1, -1)
    tokens = np.einsum("nhwc,hwcd->nd", patches, kernel)
    new_tokens = np.einsum("nhwc,hwcd->nd", resized, resample_patch_embedding(kernel, new))
    np.testing.assert_allclose(new_tokens, tokens, rtol=0, atol=1e-4)


def test_unchanged_size_returns_the_kernel(rng):
    kernel = rng.normal(size=(4, 4, 3, 2))
    assert resample_patch_embedding(kernel, 4) is kernel


@pytest.mark.parametrize("kernel,size,match", [
    (np.zeros((16, 48, 8)), 8, "kernel"), (np.zeros((4, 4, 3, 2)), 0, "new_patch_size"),
    (np.zeros((4, 4, 3, 2)), (2, 2, 2), "new_patch_size"),
])
def test_bad_arguments_are_named(kernel, size, match):
    with pytest.raises(ValueError, match=match):
        resample_patch_embedding(kernel, size)


def _per_patch_upsample(images, patch, new_patch):
    """Each `patch` x `patch` cell resized alone to `new_patch` (the reference resize)."""
    n, h, w, c = images.shape
    gh, gw = h // patch, w // patch
    cells = images.reshape(n, gh, patch, gw, patch, c).transpose(0, 1, 3, 5, 2, 4)
    cells = _reference_resize(cells.reshape(-1, patch, patch), (new_patch, new_patch), False)
    cells = cells.reshape(n, gh, gw, c, new_patch, new_patch).transpose(0, 1, 4, 2, 5, 3)
    return cells.reshape(n, gh * new_patch, gw * new_patch, c)


def test_checkpoint_loads_at_a_larger_patch_with_the_same_outputs(tmp_path, rng):
    # A model at patch 8 and its checkpoint loaded at patch 16: on images
    # whose 16-pixel cells are the 8-pixel cells resized, the tokens and so
    # every output are the same (same grid: the position embedding is kept).
    small = keras_vit.ViT(**dict(TINY, classes=5), classifier_activation=None)
    for variable in small.weights:  # away from the zero-initialised head
        variable.assign(rng.normal(scale=0.2, size=variable.shape).astype("float32"))
    path = tmp_path / "small.npz"
    np.savez(path, **model_state(small))
    large = keras_vit.ViT(
        **dict(TINY, classes=5, patch_size=16, image_size=64), classifier_activation=None, weights=str(path),
        mlp_activation="gelu_tanh",
    )
    assert large.grid_size == small.grid_size
    images = rng.normal(size=(2, 32, 32, 3)).astype("float32")
    expected = to_numpy(small(images))
    got = to_numpy(large(_per_patch_upsample(images, 8, 16).astype("float32")))
    np.testing.assert_allclose(got, expected, rtol=0, atol=1e-4)
    kernel = to_numpy(large.get_layer("embedding").kernel)
    np.testing.assert_allclose(
        kernel, resample_patch_embedding(to_numpy(small.get_layer("embedding").kernel), 16), atol=1e-7
    )


def test_loading_at_another_patch_resizes_the_position_embedding(tmp_path, rng):
    small = keras_vit.ViT(**TINY)
    path = tmp_path / "small.npz"
    np.savez(path, **model_state(small))
    model = keras_vit.ViT(**dict(TINY, patch_size=4), weights=str(path), mlp_activation="gelu_tanh")
    # The checkpoint's resolution is kept, so the grid doubles.
    assert model.image_size == (32, 32) and model.grid_size == (8, 8)
    assert tuple(model.get_layer("embedding").pos_embedding.shape) == (1, 65, TINY["hidden_size"])
    assert tuple(model.get_layer("embedding").kernel.shape) == (4, 4, 3, TINY["hidden_size"])


def _photos():
    import skimage.data

    # Photos of ImageNet classes on which DeiT-Tiny is confident (tabby
    # cat, espresso, motor scooter); the ambiguous ones (astronaut, rocket)
    # change top-1 even for the original model at 2x resolution.
    photos = [skimage.data.chelsea(), skimage.data.coffee(), skimage.data.stereo_motorcycle()[0]]
    return np.stack([imagenet_preprocess(photo) for photo in photos])


@requires_shared
@runs_once("torch", "the kernels are resampled with NumPy as they load (keras_vit.weights.patch_resample); "
           "a ViT's forward at any patch size is held on every backend by the model contract")
def test_real_weights_keep_their_classes_at_patch_8_and_32():
    import keras

    batch = _photos()
    reference = keras_vit.ViTTi16(weights=str(DEIT_NPZ), mlp_activation="gelu")
    expected = reference.predict(batch, verbose=0).argmax(-1)
    # Patch 8 at 224: a 28 x 28 grid (the kernel shrinks: least squares).
    patch8 = keras_vit.ViTTi16(weights=str(DEIT_SAFETENSORS), patch_size=8)
    assert patch8.grid_size == (28, 28)
    np.testing.assert_array_equal(patch8.predict(batch, verbose=0).argmax(-1), expected)
    # Patch 32 on the image at 448: the kernel grows (exact per patch).
    patch32 = keras_vit.ViTTi16(weights=str(DEIT_NPZ), mlp_activation="gelu", patch_size=32, image_size=448)
    large = to_numpy(keras.ops.image.resize(batch, (448, 448), interpolation="bilinear"))
    np.testing.assert_array_equal(patch32.predict(large, verbose=0).argmax(-1), expected)
