"""Feature maps of chosen blocks as a functional Keras model (dense tasks).

`feature_model(model, feature_blocks=(3, 5, 7, 11))` is a `keras.Model` from
images to the outputs of those Transformer blocks, NHWC at the model's
effective patch size, built on the model's one forward pass
(`ViT.forward_intermediates`): the same layers and weights, usable inside
another model (a segmentation or detection head, e.g. with
`keras_vit.layers.SimpleFeaturePyramid`).
"""

import keras

from keras_vit.validation import check_bool, check_choice

PREFIX_MODES = ("drop", "separate")


def check_feature_blocks(feature_blocks, num_layers):
    """The block indices `feature_blocks` asks for, in `[0, num_layers)`, in its order.

    Args:
        feature_blocks: an int or a non-empty sequence of ints; negative
            values count from the last block (-1 is the last).
        num_layers: the model's number of blocks.

    Returns:
        A tuple of non-negative indices.

    Example:

    >>> check_feature_blocks((3, 5, -1), num_layers=12)
    (3, 5, 11)
    >>> check_feature_blocks(12, num_layers=12)
    Traceback (most recent call last):
    ...
    ValueError: `feature_blocks` holds block indices in [-12, 11] (the model has 12 blocks; negative values count from the last). Received: feature_blocks=12
    """
    items = (feature_blocks,) if isinstance(feature_blocks, int) else feature_blocks
    try:
        items = tuple(items)
    except TypeError:
        items = None
    ok = bool(items) and all(
        isinstance(i, int) and not isinstance(i, bool) and -num_layers <= i < num_layers
        for i in items
    )
    if not ok:
        raise ValueError(
            f"`feature_blocks` holds block indices in [-{num_layers}, {num_layers - 1}] (the "
            f"model has {num_layers} blocks; negative values count from the last). "
            f"Received: feature_blocks={feature_blocks!r}"
        )
    indices = tuple(i % num_layers for i in items)
    if len(set(indices)) != len(indices):
        raise ValueError(
            f"`feature_blocks` names a block twice. Received: feature_blocks={feature_blocks!r} "
            f"(blocks {indices})"
        )
    return indices


def feature_model(model, feature_blocks=(3, 5, 7, 11), norm=False, prefix_tokens="drop", name=None):
    """A functional model from images to the feature maps of chosen blocks.

    Args:
        model: a `keras_vit.ViT` (any family, with or without its head; the
            head is not used).
        feature_blocks: int or sequence of ints, default `(3, 5, 7, 11)`
            (ViT-B's, as in ViTDet/DPT); negative values count from the last
            block. The outputs follow this order.
        norm: bool, default False: apply the model's final norm
            (`encoder_norm`) to each map (not available when the model
            normalises pooled features, `pooled_norm=True`).
        prefix_tokens: "drop" (default) or "separate": also return each
            block's prefix tokens (class, distillation, register),
            `(batch, prefix, D)`.
        name: the model's name, default `"{model.name}_features"`.

    Returns:
        A `keras.Model` whose input is an image of the model's size (other
        sizes divisible by the effective patch size are accepted) and whose output is a list of
        `(batch, h, w, D)` maps at stride `model.effective_patch_size`, or
        with `prefix_tokens="separate"` a list of `(map, prefix tokens)`
        pairs; for a single block, its map (or pair) alone. The layers are the model's own:
        training one trains the other.

    Example:

    >>> import numpy as np
    >>> import keras_vit
    >>> vit = keras_vit.ViT(image_size=32, patch_size=8, hidden_size=16, num_layers=4,
    ...                     num_heads=2, mlp_dim=32, include_top=False)
    >>> features = feature_model(vit, feature_blocks=(1, -1))
    >>> [tuple(m.shape) for m in features(np.zeros((2, 32, 48, 3), "float32"))]
    [(2, 4, 6, 16), (2, 4, 6, 16)]
    """
    blocks = check_feature_blocks(feature_blocks, model.num_layers)
    check_bool(norm, "norm")
    check_choice(prefix_tokens, PREFIX_MODES, "prefix_tokens")
    if norm and getattr(model, "pooled_norm", False):
        raise ValueError(
            "`norm=True` needs the model's final norm on the tokens; this model applies it "
            "to the pooled features (pooled_norm=True). Received: norm=True"
        )
    # The model's image size (a fixed shape, as exporters need); other sizes
    # divisible by the effective patch size are accepted at call time.
    inputs = keras.Input(tuple(model.image_size) + (model.num_channels,), name="image")
    separate = prefix_tokens == "separate"
    maps = model.forward_intermediates(
        inputs, indices=sorted(blocks), norm=norm, output_fmt="NHWC",
        return_prefix_tokens=separate, intermediates_only=True,
    )
    by_block = dict(zip(sorted(blocks), maps))
    outputs = [by_block[i] for i in blocks]
    if len(outputs) == 1:
        outputs = outputs[0]  # one block: its map (or pair) itself, symbolically too
    features = keras.Model(inputs, outputs, name=name or f"{model.name}_features")
    features.input_spec = keras.layers.InputSpec(shape=(None, None, None, model.num_channels))
    return features
