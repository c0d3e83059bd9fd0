"""NaFlex batches and SigLIP 2's per-image position embedding against
transformers' `Siglip2ImageProcessorPil` and `Siglip2VisionEmbeddings`
(random weights), on every backend."""

import keras
import numpy as np
import pytest

from conftest import to_numpy
from keras_vit.layers.interpolation import resize_matrix
from keras_vit.layers.native_grids import (
    antialiased_linear_weights,
    grid_sizes_from_positions,
    per_image_position_embedding,
    position_embedding_at,
)
from keras_vit.preprocessing.naflex import naflex_grid, naflex_inputs

transformers = pytest.importorskip("transformers", reason="transformers' SigLIP 2 is the reference")
torch = pytest.importorskip("torch")
from transformers.models.siglip2 import image_processing_pil_siglip2 as siglip2_pil  # noqa: E402
from transformers.models.siglip2.modeling_siglip2 import Siglip2VisionEmbeddings  # noqa: E402

SIZES = [(30, 50), (64, 17), (8, 8), (101, 64), (3, 200), (48, 48)]


@pytest.mark.parametrize("patch, budget", [(16, 256), (14, 64), (4, 16), (8, 7)])
def test_grid_equals_transformers_rule(patch, budget):
    for height, width in SIZES + [(480, 640), (1080, 1920), (1, 1), (999, 3)]:
        want = siglip2_pil.get_image_size_for_max_num_patches(height, width, patch, budget)
        rows, cols = naflex_grid(height, width, patch, budget)
        assert (rows * patch, cols * patch) == tuple(want), (height, width)
        assert rows * cols <= budget or rows == 1 or cols == 1


def _images(rng, sizes=SIZES):
    return [rng.integers(0, 256, size + (3,), dtype=np.uint8) for size in sizes]


@pytest.mark.parametrize("patch, budget", [(4, 16), (8, 12)])
def test_inputs_equal_transformers_processor(patch, budget, rng):
    images = _images(rng)
    processor = siglip2_pil.Siglip2ImageProcessorPil(patch_size=patch, max_num_patches=budget)
    want = processor(images=images, return_tensors="np", input_data_format="channels_last")
    batch = naflex_inputs(images, patch_size=patch, max_num_patches=budget)
    np.testing.assert_allclose(batch["patches"], want["pixel_values"], atol=1e-6)
    np.testing.assert_array_equal(batch["patch_valid"], want["pixel_attention_mask"].astype(bool))
    sizes = to_numpy(grid_sizes_from_positions(batch["patch_coords"], batch["patch_valid"]))
    np.testing.assert_array_equal(sizes, want["spatial_shapes"])
    for coords, valid, (rows, cols) in zip(batch["patch_coords"], batch["patch_valid"], sizes):
        np.testing.assert_array_equal(coords[valid], np.stack(np.divmod(np.arange(rows * cols), cols), -1))
        assert not coords[~valid].any()
    assert batch["patches"].dtype == np.float32 and batch["patch_coords"].dtype == np.int32


def test_longer_padding_and_float_images(rng):
    images = _images(rng, [(20, 30), (12, 12)])
    short = naflex_inputs(images, 4, 16)
    long = naflex_inputs(images, 4, 16, length=24)
    assert long["patches"].shape == (2, 24, 48)
    np.testing.assert_array_equal(long["patches"][:, :16], short["patches"])
    assert not long["patch_valid"][:, 16:].any() and not long["patches"][:, 16:].any()
    # Float images in [0, 255] are resized per plane in float: close to uint8's rounding.
    floats = naflex_inputs([i.astype("float32") for i in images], 4, 16)
    np.testing.assert_allclose(floats["patches"], short["patches"], atol=2 / 127.5 + 1e-6)


@pytest.mark.parametrize("images, kwargs, match", [
    ([np.zeros((4, 4))], {}, r"images\[0\].shape=\(4, 4\)"),
    ([np.zeros((4, 4, 1))], {}, r"\(height, width, 3\)"),
    ([], {}, "at least one image"),
    ([np.zeros((4, 4, 3), "uint8")], dict(length=8), "`length` must be an int >= 16"),
    ([np.zeros((4, 4, 3), "uint8")], dict(interpolation="nearest"), "`interpolation` must be one of"),
])
def test_bad_inputs_are_named(images, kwargs, match):
    with pytest.raises(ValueError, match=match):
        naflex_inputs(images, 4, 16, **kwargs)


# --- position embedding ------------------------------------------------------


@pytest.mark.parametrize("new, old", [(3, 4), (4, 4), (7, 4), (1, 5), (16, 4)])
def test_axis_weights_equal_the_resize_matrix(new, old):
    weights = to_numpy(antialiased_linear_weights(np.arange(new), new, old))
    np.testing.assert_allclose(weights, to_numpy(resize_matrix(new, old, "bilinear_antialias")), atol=1e-6)


SHAPES = np.array([[4, 4], [2, 7], [5, 3], [1, 16], [3, 1]])


def test_position_embedding_equals_transformers_resize(rng):
    table = rng.normal(size=(4, 4, 8)).astype("float32")
    want = Siglip2VisionEmbeddings.resize_positional_embeddings(
        torch.from_numpy(table), torch.from_numpy(SHAPES), max_length=20
    ).numpy()
    out = to_numpy(per_image_position_embedding(table, SHAPES, 20))
    np.testing.assert_allclose(out, want, atol=1e-6)
    flat = to_numpy(per_image_position_embedding(table.reshape(16, 8), SHAPES, 20))
    np.testing.assert_array_equal(flat, out)


def test_position_embedding_at_patch_coords_equals_per_image(rng):
    table = rng.normal(size=(4, 4, 8)).astype("float32")
    batch = naflex_inputs(_images(rng), 4, 16)
    sizes = grid_sizes_from_positions(batch["patch_coords"], batch["patch_valid"])
    at = to_numpy(position_embedding_at(table, batch["patch_coords"], sizes))
    np.testing.assert_allclose(at, to_numpy(per_image_position_embedding(table, sizes, 16)), atol=1e-6)


def test_embeddings_equal_transformers_module(rng):
    """patches @ W + b plus the resized table is `Siglip2VisionEmbeddings`."""
    from transformers import Siglip2VisionConfig

    config = Siglip2VisionConfig(hidden_size=8, patch_size=4, num_patches=16, num_channels=3)
    module = Siglip2VisionEmbeddings(config).eval()
    with torch.no_grad():
        for tensor in module.state_dict().values():
            tensor.copy_(torch.from_numpy(rng.normal(size=tuple(tensor.shape)).astype("float32")))
    images = _images(rng)
    processed = siglip2_pil.Siglip2ImageProcessorPil(patch_size=4, max_num_patches=16)(
        images=images, return_tensors="pt", input_data_format="channels_last")
    with torch.no_grad():
        want = module(processed["pixel_values"], processed["spatial_shapes"]).numpy()
    batch = naflex_inputs(images, 4, 16)
    weight = module.patch_embedding.weight.detach().numpy()
    bias = module.patch_embedding.bias.detach().numpy()
    table = module.position_embedding.weight.detach().numpy()
    sizes = grid_sizes_from_positions(batch["patch_coords"], batch["patch_valid"])
    out = batch["patches"] @ weight.T + bias + to_numpy(position_embedding_at(table, batch["patch_coords"], sizes))
    np.testing.assert_allclose(out, want, atol=1e-5)


def test_position_embedding_in_a_fixed_length_graph(rng):
    """The dict with a fixed `n` goes through a functional model (compiled
    with XLA on jax and tensorflow) whatever the images' grids."""
    table = rng.normal(size=(4, 4, 8)).astype("float32")
    coords = keras.Input((16, 2), dtype="int32", name="patch_coords")
    valid = keras.Input((16,), dtype="bool", name="patch_valid")
    layer = keras.layers.Lambda(
        lambda t: position_embedding_at(table, t[0], grid_sizes_from_positions(t[0], t[1])))
    model = keras.Model({"patch_coords": coords, "patch_valid": valid}, layer([coords, valid]))
    for sizes in ([(30, 50), (9, 9)], [(8, 40), (64, 17)]):
        batch = naflex_inputs(_images(rng, sizes), 4, 16)
        inputs = {k: batch[k] for k in ("patch_coords", "patch_valid")}
        want = to_numpy(per_image_position_embedding(
            table, grid_sizes_from_positions(batch["patch_coords"], batch["patch_valid"]), 16))
        np.testing.assert_allclose(to_numpy(model(inputs)), want, atol=1e-6)
        if keras.backend.backend() != "torch":
            model.compile(jit_compile=True)
            np.testing.assert_allclose(model.predict(inputs, verbose=0), want, atol=1e-6)
