"""A padded batch of patches on per-image grids as a `ViT`'s input (NaFlex).

A `keras_vit.ViT` takes, besides `(batch, H, W, C)` images, timm's NaFlex
dict (`keras_vit.preprocessing.naflex_inputs` makes it from images of any
sizes):

- `"patches"`: float `(batch, n, ph * pw * C)`, each patch flattened
  row-major as `(ph, pw, C)`;
- `"patch_coords"`: int `(batch, n, 2)`, each patch's (row, column) in its
  own image's grid;
- `"patch_valid"`: bool (or 0/1 int) `(batch, n)`, False for padding.

Each image's grid is one more than its largest valid coordinate; the
position table is resized to it as transformers' SigLIP 2 does
(`PatchEncoder.add_positions_at`), every token attends to the valid tokens
of its image only, and the pooling reads those alone. For images whose
patches fill their batch, this is the image input's computation, token by
token. `embed` is the embedding step; `keras_vit.models.forward` runs the
rest on the model's own layers with the mask. A fixed `n` keeps one
compiled or exported graph for every batch.

Example:

>>> import numpy as np, keras_vit
>>> from keras_vit.preprocessing import naflex_inputs
>>> model = keras_vit.ViT(image_size=32, patch_size=8, hidden_size=16, num_layers=1, num_heads=2,
...                       mlp_dim=32, classifier="map", include_top=False, pooling="map",
...                       position_interpolation="siglip2")
>>> images = [np.zeros((48, 24, 3), "uint8"), np.zeros((20, 60, 3), "uint8")]
>>> batch = naflex_inputs(images, patch_size=8, max_num_patches=16)
>>> batch["patch_valid"].sum(axis=1).tolist(), tuple(model(batch).shape)
([15, 12], (2, 16))
"""

from collections.abc import Mapping

import keras
from keras import ops

from keras_vit.layers.native_grids import grid_sizes_from_positions
from keras_vit.preprocessing.naflex import PATCH_INPUTS


def is_patch_dict(inputs):
    """Whether `inputs` is a mapping (the NaFlex dict, or a wrong one)."""
    return isinstance(inputs, Mapping)


def _shape(x):
    return tuple(getattr(x, "shape", ()))


def _dtype(x):
    dtype = getattr(x, "dtype", None)
    try:
        return keras.backend.standardize_dtype(dtype)
    except (TypeError, ValueError):
        return str(dtype)


def _check_support(model):
    config = model.encoder_config
    reasons = []
    if model.stem_stride != 1:
        reasons.append("it has a convolutional stem")
    if config.position_embedding != "learned" or config.position_interpolation != "siglip2":
        reasons.append(
            f"its position embedding is position_embedding={config.position_embedding!r} with "
            f"position_interpolation={config.position_interpolation!r} (per-image grids need "
            "'learned' with 'siglip2', SigLIP 2's resize)"
        )
    if getattr(model.block_config, "rope", None) is not None:
        reasons.append("its rotary embedding is computed for one grid")
    if reasons:
        raise ValueError(
            f"Model {model.name!r} takes images only, not the NaFlex patch dict: {'; '.join(reasons)}."
        )


def check_patch_dict(model, inputs, name="inputs"):
    """Raises a `ValueError` for a patch dict `model` (a `ViT`) cannot take.

    Checks the keys, the ranks, the patch width `ph * pw * C`, that the
    three agree on batch and `n`, and the dtypes (unknown dimensions pass).
    """
    _check_support(model)
    keys = sorted(inputs)
    if keys != sorted(PATCH_INPUTS):
        raise ValueError(
            f"`{name}` as a dict must have the keys {list(PATCH_INPUTS)} (the NaFlex patch batch, "
            f"`keras_vit.preprocessing.naflex_inputs`). Received: keys {keys}"
        )
    ph, pw = model.patch_size
    width = ph * pw * model.num_channels
    patches, coords, valid = (_shape(inputs[k]) for k in PATCH_INPUTS)
    expected = {
        "patches": (patches, 3, width, f"(batch, n, {width})"),
        "patch_coords": (coords, 3, 2, "(batch, n, 2)"),
        "patch_valid": (valid, 2, None, "(batch, n)"),
    }
    for key, (shape, rank, last, text) in expected.items():
        if len(shape) != rank or (last is not None and type(shape[-1]) is int and shape[-1] != last):
            raise ValueError(
                f"`{name}[{key!r}]` must be {text} for model {model.name!r} (patches of "
                f"{ph}x{pw}x{model.num_channels}). Received: shape={shape}"
            )
    for axis, label in ((0, "batch"), (1, "n")):
        # Static sizes only (None, or a symbolic size while traced, passes).
        sizes = {s[axis] for s in (patches, coords, valid) if type(s[axis]) is int}
        if len(sizes) > 1:
            raise ValueError(
                f"The arrays of `{name}` must share their {label} axis. Received: shapes "
                f"patches={patches}, patch_coords={coords}, patch_valid={valid}"
            )
    if "int" not in _dtype(inputs["patch_coords"]):
        raise ValueError(
            f"`{name}['patch_coords']` must hold integers. Received: dtype={_dtype(inputs['patch_coords'])}"
        )
    mask_dtype = _dtype(inputs["patch_valid"])
    if mask_dtype != "bool" and "int" not in mask_dtype:
        raise ValueError(
            f"`{name}['patch_valid']` must be boolean (or 0/1 integers). Received: dtype={mask_dtype}"
        )


def embed(s, inputs, training=None):
    """The tokens entering the first block and the mask of valid tokens.

    Args:
        s: the model's `Stages`.
        inputs: the patch dict.
        training: the dropout's mode.

    Returns:
        `(tokens (batch, prefix + n, D), token_mask (batch, prefix + n))`;
        the prefix tokens are valid.
    """
    if training and s.patch_dropout is not None:
        raise ValueError(
            "Patch dropout drops tokens at random, which the mask of a NaFlex batch does not "
            "follow: train on patch dicts with patch_dropout_rate=0."
        )
    coords = ops.cast(ops.convert_to_tensor(inputs["patch_coords"]), "int32")
    valid = ops.convert_to_tensor(inputs["patch_valid"])
    if keras.backend.standardize_dtype(valid.dtype) != "bool":
        valid = ops.not_equal(valid, 0)
    tokens = s.embedding.embed_flat_patches(inputs["patches"])
    x = s.embedding.add_positions_at(tokens, coords, grid_sizes_from_positions(coords, valid))
    x = s.dropout(x, training=training)
    if s.pre_norm is not None:
        x = s.pre_norm(x)
    if s.num_prefix_tokens:
        prefix = ops.ones((ops.shape(valid)[0], s.num_prefix_tokens), "bool")
        valid = ops.concatenate([prefix, valid], axis=1)
    return x, valid


__all__ = ["PATCH_INPUTS", "check_patch_dict", "embed", "is_patch_dict"]
