"""Position-embedding interpolation against each family's transformers code."""

import keras
import numpy as np
import pytest
from conftest import inference, spread

from keras_vit.layers.interpolation import (
    POSITION_INTERPOLATIONS,
    interpolate_position_embedding,
    resize_grid,
    resize_matrix,
)

pytestmark = spread("the resize of position tables against transformers, over keras.ops held by the layer "
                    "contracts; each case once")

torch = pytest.importorskip("torch", reason="transformers' interpolation is the reference")

PATCH, OLD, DIM = 4, (4, 4), 6
NEW_GRIDS = [(6, 6), (7, 9), (2, 3), (3, 8), (1, 1)]
RNG = np.random.default_rng(0)


def _numpy(x):
    return keras.ops.convert_to_numpy(x)


def _set(parameter, value):
    with torch.no_grad():
        parameter.copy_(torch.from_numpy(value).reshape(parameter.shape))


def _vit_like(module_name, config_name, embeddings_name, position, **config):
    """`interpolate_pos_encoding` of a transformers embeddings module."""
    import importlib

    module = importlib.import_module(f"transformers.models.{module_name}")
    config = getattr(module, config_name)(
        hidden_size=DIM, num_attention_heads=2, image_size=OLD[0] * PATCH, patch_size=PATCH, **config
    )
    embeddings = getattr(module, embeddings_name)(config)

    def reference(table, new_grid):
        weight = getattr(embeddings, position)
        _set(weight if isinstance(weight, torch.nn.Parameter) else weight.weight, table)
        rows = table.shape[1] - OLD[0] * OLD[1] + new_grid[0] * new_grid[1]
        dummy = torch.zeros(1, rows, DIM)
        with torch.no_grad():
            out = embeddings.interpolate_pos_encoding(dummy, new_grid[0] * PATCH, new_grid[1] * PATCH)
        return out.reshape(1, -1, DIM).numpy()

    return reference


def _siglip2(table, new_grid):
    from transformers.models.siglip2.modeling_siglip2 import Siglip2VisionEmbeddings

    grid = torch.from_numpy(table[0].reshape(OLD + (DIM,)))
    shapes = torch.tensor([new_grid])
    out = Siglip2VisionEmbeddings.resize_positional_embeddings(grid, shapes, new_grid[0] * new_grid[1])
    return out.numpy()


def _dinov2_original(table, new_grid):
    # facebookresearch/dinov2's interpolate_pos_encoding (interpolate_offset=0.1,
    # antialias off): a scale factor instead of an output size.
    grid = torch.from_numpy(table[:, 1:].reshape((1,) + OLD + (DIM,))).permute(0, 3, 1, 2)
    factors = ((new_grid[0] + 0.1) / OLD[0], (new_grid[1] + 0.1) / OLD[1])
    out = torch.nn.functional.interpolate(grid, scale_factor=factors, mode="bicubic")
    assert tuple(out.shape[2:]) == tuple(new_grid)
    out = out.permute(0, 2, 3, 1).reshape(1, -1, DIM).numpy()
    return np.concatenate([table[:, :1], out], axis=1)


def _timm(table, new_grid):
    # timm's resample_abs_pos_embed: the prefix rows kept, the grid resized
    # in float32 by an antialiased bicubic to the output size.
    grid = torch.from_numpy(table[:, 1:].reshape((1,) + OLD + (DIM,))).permute(0, 3, 1, 2).float()
    out = torch.nn.functional.interpolate(grid, size=tuple(new_grid), mode="bicubic", antialias=True)
    out = out.permute(0, 2, 3, 1).reshape(1, -1, DIM).numpy()
    return np.concatenate([table[:, :1], out], axis=1)


def _dpt(table, new_grid):
    # transformers' DPT (`_resize_pos_embed` of DPTViTEmbeddings): the class
    # row kept, the grid resized by torch's plain bilinear to the output size.
    grid = torch.from_numpy(table[:, 1:].reshape((1,) + OLD + (DIM,))).permute(0, 3, 1, 2).float()
    out = torch.nn.functional.interpolate(grid, size=tuple(new_grid), mode="bilinear")
    out = out.permute(0, 2, 3, 1).reshape(1, -1, DIM).numpy()
    return np.concatenate([table[:, :1], out], axis=1)


REFERENCES = {
    "vit": (1, lambda: _vit_like("vit.modeling_vit", "ViTConfig", "ViTEmbeddings", "position_embeddings")),
    "clip": (1, lambda: _vit_like("clip.modeling_clip", "CLIPVisionConfig", "CLIPVisionEmbeddings", "position_embedding")),
    "siglip": (0, lambda: _vit_like("siglip.modeling_siglip", "SiglipVisionConfig", "SiglipVisionEmbeddings", "position_embedding")),
    "mae": (1, lambda: _vit_like("vit_mae.modeling_vit_mae", "ViTMAEConfig", "ViTMAEEmbeddings", "position_embeddings")),
    "dinov2": (1, lambda: _vit_like("dinov2.modeling_dinov2", "Dinov2Config", "Dinov2Embeddings", "position_embeddings")),
    "dinov2_registers": (
        1,
        lambda: _vit_like(
            "dinov2_with_registers.modeling_dinov2_with_registers",
            "Dinov2WithRegistersConfig", "Dinov2WithRegistersEmbeddings", "position_embeddings",
        ),
    ),
    "siglip2": (0, lambda: _siglip2),
    "dinov2_original": (1, lambda: _dinov2_original),
    "timm": (1, lambda: _timm),
    "dpt": (1, lambda: _dpt),
}


@pytest.mark.parametrize("family", sorted(REFERENCES))
def test_matches_the_family_s_transformers_code(family):
    prefix, make_reference = REFERENCES[family]
    reference = make_reference()
    table = RNG.normal(size=(1, prefix + OLD[0] * OLD[1], DIM)).astype("float32")
    for new_grid in NEW_GRIDS:
        expected = reference(table, new_grid)
        out = inference(lambda t: interpolate_position_embedding(t, new_grid, OLD, prefix, family), table)
        assert out.shape == expected.shape, (new_grid, out.shape, expected.shape)
        np.testing.assert_allclose(out, expected, atol=1e-5, rtol=0, err_msg=str(new_grid))


def test_every_family_has_a_reference():
    assert set(POSITION_INTERPOLATIONS) - set(REFERENCES) == {"official"}


def test_the_kernels_differ_where_the_families_do():
    # The families are not one resize under several names: on the same table
    # each pair of modes gives other numbers (so each test above can fail).
    grid = RNG.normal(size=(1,) + OLD + (DIM,)).astype("float32")
    outs = {f: _numpy(resize_grid(grid, (3, 7), f)) for f in ("official", "vit", "dinov2_original", "dinov2_registers", "siglip2")}
    names = sorted(outs)
    for i, a in enumerate(names):
        for b in names[i + 1 :]:
            assert np.abs(outs[a] - outs[b]).max() > 1e-3, (a, b)


def test_official_mode_is_scipy_zoom():
    from scipy import ndimage

    grid = RNG.normal(size=OLD + (DIM,)).astype("float64")
    expected = ndimage.zoom(grid, (7 / 4, 3 / 4, 1), order=1)
    out = _numpy(resize_grid(grid[None].astype("float32"), (7, 3), "official"))[0]
    np.testing.assert_allclose(out, expected, atol=1e-5)


def test_runs_in_a_graph_for_a_grid_known_at_run_time():
    table = RNG.normal(size=(1, 1 + 16, DIM)).astype("float32")
    inputs = keras.Input((None, None, 1))

    def resize(x):
        grid = (keras.ops.shape(x)[1], keras.ops.shape(x)[2])
        return interpolate_position_embedding(table, grid, OLD, 1, "dinov2") + 0 * keras.ops.sum(x)

    model = keras.Model(inputs, keras.layers.Lambda(resize)(inputs))
    reference = REFERENCES["dinov2"][1]()
    for grid in ((6, 6), (3, 8)):
        out = _numpy(model(np.zeros((1,) + grid + (1,), "float32")))
        np.testing.assert_allclose(out, reference(table, grid), atol=1e-5, rtol=0)


def test_same_grid_is_identity_and_bad_arguments_are_named():
    table = RNG.normal(size=(1, 17, DIM)).astype("float32")
    np.testing.assert_array_equal(_numpy(interpolate_position_embedding(table, OLD, OLD)), table)
    np.testing.assert_allclose(_numpy(resize_matrix(5, 5, "bicubic_antialias")), np.eye(5), atol=1e-6)
    with pytest.raises(ValueError, match="family"):
        interpolate_position_embedding(table, (2, 2), OLD, family="dino")
    with pytest.raises(ValueError, match="num_prefix_rows"):
        interpolate_position_embedding(table, (2, 2), OLD, num_prefix_rows=0)
    with pytest.raises(ValueError, match="mode"):
        resize_matrix(2, 3, "cubic")
