"""The argument checks of `ViT`: each raises a `ValueError` naming the argument,
the value and what is allowed (the shared checks are in `keras_vit.validation`).

Example:

>>> check_transformer(hidden_size=64, num_layers=2, num_heads=3, mlp_dim=128)
Traceback (most recent call last):
...
ValueError: `hidden_size` must be divisible by `num_heads`. Received: hidden_size=64, num_heads=3
"""

import warnings

import keras
import numpy as np

from keras_vit import labels
from keras_vit.architectures import CLASS_TOKEN_READERS, CLASSIFIERS, POOLINGS
from keras_vit.validation import (
    check_bool,
    check_choice,
    check_int,
    check_positive_int,
    pair,
)

# The names other libraries (timm, transformers, keras-hub) give to `ViT`'s
# arguments, so that a misspelling of them is answered with keras_vit's name.
OTHER_NAMES = {
    "num_classes": "classes",
    "num_labels": "classes",
    "img_size": "image_size",
    "embed_dim": "hidden_size",
    "hidden_dim": "hidden_size",
    "depth": "num_layers",
    "num_hidden_layers": "num_layers",
    "num_attention_heads": "num_heads",
    "intermediate_size": "mlp_dim",
    "intermediate_dim": "mlp_dim",
    "global_pool": "pooling",
    "drop_rate": "dropout_rate",
    "attn_drop_rate": "attention_dropout_rate",
    "drop_path_rate": "stochastic_depth_rate",
    "layer_norm_eps": "layer_norm_epsilon",
    "init_values": "layer_scale_init",
    "reg_tokens": "num_register_tokens",
    "pretrained": "weights",
}

# Keras' own keyword arguments that keras_vit models forward: a functional
# model's `trainable` (`name` and `dtype` are `ViT` arguments), and those of
# `keras.layers.Layer` for models built by subclassing (`MaskedPatchPrediction`).
KERAS_FUNCTIONAL_ARGUMENTS = ("trainable",)
KERAS_LAYER_ARGUMENTS = ("trainable", "dtype", "autocast")


def model_input_shape(image_size, input_shape, default):
    """Resolves `(height, width, channels)` from `image_size`/`input_shape`."""
    if input_shape is None:
        return pair(image_size if image_size is not None else default, "image_size") + (3,)
    shape = tuple(input_shape) if isinstance(input_shape, (list, tuple)) else None
    if shape is None or len(shape) != 3:
        raise ValueError(
            "`input_shape` must be a tuple (height, width, channels). "
            f"Received: input_shape={input_shape!r}"
        )
    channels = shape[2]
    if isinstance(channels, bool) or not isinstance(channels, int) or channels < 1:
        raise ValueError(
            "`input_shape` must end with a positive number of channels. "
            f"Received: input_shape={input_shape!r}"
        )
    size = pair(shape[:2], "input_shape")
    if image_size is not None and pair(image_size, "image_size") != size:
        raise ValueError(
            "`image_size` and `input_shape` disagree. Received: "
            f"image_size={image_size!r}, input_shape={input_shape!r}"
        )
    return size + (channels,)


def check_activation(value):
    if value is None:
        return None
    try:
        keras.activations.get(value)
    except (ValueError, TypeError):
        raise ValueError(
            "`classifier_activation` must be None (logits), a Keras activation "
            f"name or a callable. Received: classifier_activation={value!r}"
        ) from None
    return value


def check_transformer(hidden_size, num_layers, num_heads, mlp_dim):
    check_positive_int(hidden_size, "hidden_size")
    check_int(num_layers, "num_layers", minimum=0)
    check_positive_int(num_heads, "num_heads")
    check_positive_int(mlp_dim, "mlp_dim")
    if hidden_size % num_heads:
        raise ValueError(
            "`hidden_size` must be divisible by `num_heads`. "
            f"Received: hidden_size={hidden_size}, num_heads={num_heads}"
        )


def check_head(classifier, pooling, representation_size, classifier_activation):
    check_choice(classifier, CLASSIFIERS, "classifier")
    check_choice(pooling, POOLINGS, "pooling")
    if pooling in CLASS_TOKEN_READERS and classifier not in CLASS_TOKEN_READERS:
        raise ValueError(
            f"pooling={pooling!r} reads the class token, but classifier={classifier!r} "
            f"builds none (a class token comes with classifier in {CLASS_TOKEN_READERS}). "
            f"Received: pooling={pooling!r}, classifier={classifier!r}"
        )
    check_positive_int(representation_size, "representation_size", allow_none=True)
    return check_activation(classifier_activation)


def check_embedding(projection_dim, l2_normalize, include_top, pooling):
    """Checks the embedding options of the pooled features; returns them."""
    check_positive_int(projection_dim, "projection_dim", allow_none=True)
    check_bool(l2_normalize, "l2_normalize")
    if not include_top and pooling is None and (projection_dim is not None or l2_normalize):
        raise ValueError(
            "`projection_dim` and `l2_normalize` act on pooled features, but "
            "include_top=False with pooling=None returns the tokens. Received: "
            f"projection_dim={projection_dim!r}, l2_normalize={l2_normalize!r}, pooling=None"
        )
    return projection_dim, bool(l2_normalize)


def check_tokens(classifier, pooling, distillation_token, distillation_head, num_register_tokens,
                  representation_size):
    """Checks the prefix-token options; returns the resolved `distillation_head`."""
    check_bool(distillation_token, "distillation_token")
    check_int(num_register_tokens, "num_register_tokens", minimum=0)
    if distillation_token and classifier not in CLASS_TOKEN_READERS:
        raise ValueError(
            "`distillation_token` needs the class token before it, but "
            f"classifier={classifier!r} builds none. Received: distillation_token=True"
        )
    if distillation_head is None:
        distillation_head = distillation_token
    check_bool(distillation_head, "distillation_head")
    if distillation_head and not distillation_token:
        raise ValueError(
            "`distillation_head` reads the distillation token, which the model "
            "lacks. Received: distillation_head=True, distillation_token=False"
        )
    if distillation_head and representation_size is not None:
        raise ValueError(
            "A pre-logits layer (`representation_size`) and a distillation head "
            f"do not combine. Received: representation_size={representation_size}, "
            "distillation_head=True"
        )
    return distillation_head


def check_class_token_reader(classifier, pooling, include_top, has_class_token):
    """Refuses a head or pooling that reads a class token the model lacks
    (`class_token=False` in the encoder options)."""
    name, value = ("classifier", classifier) if include_top else ("pooling", pooling)
    if value in CLASS_TOKEN_READERS and not has_class_token:
        raise ValueError(
            f"{name}={value!r} reads the class token, but the model has none "
            f"(class_token=False). Received: {name}={value!r}, class_token=False"
        )


def check_grid_options(block_config, encoder_config, num_prefix_tokens):
    """Refuses windows, decomposed relative positions or a neck in a model
    with prefix tokens: they lay the tokens out on the patch grid (the MLP
    kinds of relative position give prefix tokens a zero bias)."""
    if encoder_config.num_frames is not None:
        check_video_options(block_config)
    decomposed = block_config.relative_position if block_config.relative_position == "decomposed" else None
    used = {name: value for name, value in (
        ("window_size", block_config.window_size), ("relative_position", decomposed),
        ("neck_channels", encoder_config.neck_channels)) if value is not None}
    if used and num_prefix_tokens:
        options = ", ".join(f"{k}={v!r}" for k, v in used.items())
        raise ValueError(
            f"{options} lay the tokens on the patch grid: the model must have no class, distillation or "
            f"register token (classifier='gap', class_token=False). Received: {num_prefix_tokens} prefix tokens"
        )


def check_video_options(block_config):
    """Refuses the block options that lay tokens on one image's grid in a
    video model (rotary tables, relative positions, windows)."""
    used = {name: getattr(block_config, name) for name in ("rope", "relative_position", "window_size")}
    used = {name: value for name, value in used.items() if value is not None}
    if used:
        options = ", ".join(f"{k}={v!r}" for k, v in used.items())
        raise ValueError(
            f"{options} lay the tokens on one image's patch grid: a video model (num_frames) takes none of "
            f"them. Received: {options}"
        )


def check_class_names(value, classes, include_top):
    """`class_names` as a tuple of strings (None when unset)."""
    if value is None:
        return None
    if not include_top:
        raise ValueError(
            "`class_names` name the head's classes, but include_top=False builds "
            f"no head. Received: class_names of length {len(value)}"
        )
    if isinstance(value, str):
        check_choice(value, tuple(labels.LISTS), "class_names")
        names = labels.class_names(labels.LISTS[value])
    else:
        names = tuple(value) if isinstance(value, (list, tuple)) else None
        if names is None or not all(isinstance(n, str) for n in names):
            raise ValueError(
                f"`class_names` must be None, one of {tuple(labels.LISTS)} or a "
                f"sequence of strings. Received: class_names={value!r}"
            )
    if len(names) != classes:
        raise ValueError(
            f"`class_names` must name each of the {classes} classes. "
            f"Received: {len(names)} names"
        )
    return names


def check_recorded_activation(info):
    """Refuses a checkpoint file that does not record its GELU (`WeightsInfo`).

    An `.npz` is published with either GELU (Google's tanh, DeiT's exact
    one) and a `.weights.h5` holds arrays only: a default would be wrong for
    one of them without a word, so the caller says which
    (`examples/finetune.py` and the `keras-vit` commands ask for `--gelu`
    by the same rule, `keras_vit.weights.describe.numerics_unrecorded`).
    """
    path = info.activation_unrecorded
    if path is None:
        return
    if str(path).lower().endswith(".npz"):
        raise ValueError(
            f"{path!r} does not record the GELU its weights were trained with: pass "
            "mlp_activation='gelu_tanh' for Google's checkpoints or mlp_activation='gelu' "
            "(the exact GELU) for DeiT's and timm's (command line: --gelu tanh or --gelu erf)."
        )
    raise ValueError(
        f"{path!r} holds arrays only, not the GELU of the model that saved them: pass the "
        "mlp_activation that model was built with ('gelu_tanh', keras_vit's default, or "
        "'gelu') (command line: --gelu tanh or --gelu erf); a .keras file or a preset "
        "records it."
    )


def _first_warning(model, dtype):
    """Whether `model` has not warned about `dtype` pixels yet.

    `predict` checks its input, then calls the model, which checks it again
    inside the trainer's step: one warning per model and dtype says it.
    """
    warned = model.__dict__.setdefault("_integer_pixel_warnings", set())
    if dtype in warned:
        return False
    warned.add(dtype)
    return True


# The largest value a scaled image holds under the usual scalings ([-1, 1],
# ImageNet's or CLIP's mean/std reach about 2.7); raw [0, 255] pixels pass it.
_SCALED_LIMIT = 5.0


def check_pixel_values(model, x, name="x"):
    """Warns (once per model) when float NumPy images look like raw [0, 255] pixels.

    A float array with no negative value and values above what a scaled
    image holds was most likely not passed through `preprocess_input`;
    the model would run on it without a word. A model whose own record
    scales [0, 255] into that range is not warned about.
    """
    if not x.size or not np.issubdtype(x.dtype, np.floating):
        return
    record = getattr(model, "preprocessing", None)
    if record is not None and max((1 - m) / s for m, s in zip(record.mean, record.std)) > _SCALED_LIMIT:
        return
    low, high = float(np.min(x)), float(np.max(x))
    if low < 0 or high <= _SCALED_LIMIT or not _first_warning(model, "raw floats"):
        return
    how = "keras_vit.preprocess_input(x, model=model)" if record is not None else (
        "keras_vit.preprocess_input(x, mode=...) with the scaling its weights were trained with")
    warnings.warn(
        f"`{name}` holds values in [{low:.3g}, {high:.3g}]: model {model.name!r} expects scaled "
        f"images, and these look like raw [0, 255] pixels. Scale them first: {how}.",
        stacklevel=5,
    )


def check_images(model, shape, dtype, name="x"):
    """Raises a `ValueError` for images `model` (a `ViT`) cannot take.

    Unknown dimensions (None) pass; integer pixels get a warning (once per
    model and dtype), as they usually mean that `keras_vit.preprocess_input`
    was forgotten.
    """
    cell = model.effective_patch_size
    video = model.encoder_config.num_frames is not None
    what = "clips" if video else "images"
    takes = (
        f"(batch, {'frames, ' if video else ''}height, width, {model.num_channels}) {what} with height a multiple "
        f"of {cell[0]} and width a multiple of {cell[1]}"
        + (f" and frames a multiple of {model.encoder_config.tubelet_size}" if video else "")
    )
    if len(shape) != 4 + video:
        raise ValueError(
            f"`{name}` must be a batch of {what}: model {model.name!r} takes {takes}. "
            f"Received: {name} of shape {shape}"
        )
    if shape[-1] is not None and shape[-1] != model.num_channels:
        raise ValueError(
            f"Model {model.name!r} takes {model.num_channels}-channel {what}: {takes}. "
            f"Received: {name} of shape {shape} ({shape[-1]} channels)"
        )
    crop = model.encoder_config.crop_to_patches and model.stem_stride == 1
    sizes = [(shape[-3], cell[0], "height"), (shape[-2], cell[1], "width")]
    if video:
        sizes.append((shape[1], model.encoder_config.tubelet_size, "frame count"))
    for size, multiple, axis in sizes:
        if size is not None and size % multiple and not crop:
            unit = "the patch size" + (
                f" times the stem stride {model.stem_stride}" if model.stem_stride > 1 else ""
            )
            raise ValueError(
                f"The {'clip' if video else 'image'} {axis} must be a multiple of {multiple} "
                f"({'the tubelet size' if axis == 'frame count' else unit}): model "
                f"{model.name!r} takes {takes}. Received: {name} of shape {shape}"
            )
    if dtype is not None and ("int" in dtype or dtype == "bool") and _first_warning(model, dtype):
        warnings.warn(
            f"`{name}` holds {dtype} values: model {model.name!r} expects scaled floats. "
            "Pixels in [0, 255] go through `keras_vit.preprocess_input` first.",
            stacklevel=5,
        )
