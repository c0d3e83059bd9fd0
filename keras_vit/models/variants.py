"""The named constructors (`ViTB16`, `R50ViTB16`, ...), one per table row.

Each is a thin function over `build_variant`: its row of
`keras_vit.architectures.VARIANTS` overlaid with the caller's arguments,
built by `keras_vit.ViT` (or `keras_vit.ViTHybrid` for a ResNet stem). One
docstring template serves them all, as keras.applications does.
`tests/test_models.py` checks that the functions here are the table's rows.
"""

from keras_vit.architectures import (  # noqa: F401 (public here too)
    ARCHITECTURE_CONFIGS,
    CONSTRUCTORS,
    architecture_name,
    get_variant,
    stem_stride,
)
from keras_vit.models.arguments import OTHER_NAMES
from keras_vit.models.features import check_feature_blocks, feature_model
from keras_vit.models.hybrid import ViTHybrid
from keras_vit.models.vit import ViT
from keras_vit.validation import check_keywords
from keras_vit.weights.registry import weights_names

_DOC = """Builds {title}, the {arch} Vision Transformer{extra}.

    {summary}

    Args:
        include_top: bool, default True: whether to add the classifier head.
        weights: None (random init, the default), a registered weights name
            (for {arch}: {weights_names}), or a checkpoint path (official or
            big_vision `.npz`, timm `.safetensors`/`.pth`, keras_vit
            `.weights.h5`).
        feature_blocks: None (default) or an int / sequence of block indices
            (negative from the last), with `include_top=False`: returns
            `keras_vit.feature_model(model, feature_blocks)` instead, the
            NHWC feature maps of those blocks (dense tasks).
        **kwargs: every other argument of `keras_vit.{base}`, with its
            defaults: `image_size` (default 224, or the resolution of the
            named `weights`), `input_shape`, `classes` (default 1000 or the
            classes of the named `weights`; another count gets a new,
            zero-initialised head), `pooling`, `classifier_activation`,
            `representation_size`, `name`, `dtype`, ..., and every field of
            the option records (`mlp_activation`: by default the GELU the
            weights were trained with, "gelu_tanh" from scratch;
            `norm_kind`, `layer_norm_epsilon`, `qkv_bias`, dropout rates,
            ...). The row's `{arch_keys}` hold unless given here.
            Another name raises `keras_vit.validation.UnknownArgumentError`,
            naming the closest.

    Returns:
        A `keras_vit.{base}` model; with `feature_blocks`, a functional
        `keras.Model` from images to those blocks' feature maps.

    Example:

    >>> model = keras_vit.{func}(image_size={example_size}, classes=10)
    >>> model.output_shape
    (None, 10)

    Reference:
        Dosovitskiy et al., arXiv:2010.11929{reference}.
    """


_REFERENCES = {arch: "; the giant and gigantic sizes: Zhai et al., arXiv:2106.04560" for arch in ("g/14", "G/14")}


def _docstring(variant, model_class):
    row = variant.config
    patch = row["patch_size"]
    # The smallest example: a 2x2 token grid.
    example = 2 * stem_stride(row.get("resnet_layers")) * patch
    names = ", ".join(f'"{n}"' for n in weights_names(variant.architecture))
    summary = variant.summary or (
        f"{row['num_layers']} layers, width {row['hidden_size']}, "
        f"{row['num_heads']} heads, MLP {row['mlp_dim']}, patch {patch}."
    )
    return _DOC.format(
        title=variant.constructor,
        arch=variant.architecture,
        extra=" hybrid" if variant.hybrid else "",
        summary=summary,
        weights_names=names or "none registered",
        base=model_class.__name__,
        arch_keys="`, `".join(row),
        func=variant.constructor,
        example_size=example,
        reference=_REFERENCES.get(variant.architecture, "; BiT ResNet: arXiv:1912.11370" if variant.hybrid else ""),
    )


def _model_class(variant):
    return ViTHybrid if variant.hybrid else ViT


def build_variant(constructor, include_top=True, weights=None, feature_blocks=None, **kwargs):
    """The model of a named constructor: its table row, overlaid with `kwargs`.

    Args:
        constructor: a constructor name of `keras_vit.architectures.CONSTRUCTORS`.
        include_top, weights, feature_blocks, **kwargs: as the named
            constructors take them (see `ViTB16`).

    Returns:
        A `keras_vit.ViT` or `keras_vit.ViTHybrid`; with `feature_blocks`,
        the functional feature model of `keras_vit.feature_model`.
    """
    variant = get_variant(constructor)
    model_class = _model_class(variant)
    # Misspelt names fail here, under the constructor's own name.
    allowed = ("include_top", "weights", "feature_blocks") + model_class.argument_names()
    check_keywords(kwargs, allowed, constructor, OTHER_NAMES)
    if feature_blocks is not None and include_top:
        raise ValueError(
            "`feature_blocks` gives a model of block feature maps, which has no classifier: "
            f"pass include_top=False with it. Received: include_top={include_top!r}, "
            f"feature_blocks={feature_blocks!r}"
        )
    config = dict(variant.config, name=constructor.lower())
    config.update(kwargs)
    if feature_blocks is not None:
        # Checked before the (possibly large) model and its weights are built.
        check_feature_blocks(feature_blocks, config["num_layers"])
    model = model_class(include_top=include_top, weights=weights, **config)
    if feature_blocks is None:
        return model
    return feature_model(model, feature_blocks=feature_blocks)


def _named(function):
    """Gives a named constructor its row's docstring and `architecture`."""
    variant = get_variant(function.__name__)
    function.__doc__ = _docstring(variant, _model_class(variant))
    function.architecture = variant.architecture
    return function


@_named
def ViTTi16(include_top=True, weights=None, feature_blocks=None, **kwargs):
    return build_variant("ViTTi16", include_top, weights, feature_blocks, **kwargs)


@_named
def ViTS16(include_top=True, weights=None, feature_blocks=None, **kwargs):
    return build_variant("ViTS16", include_top, weights, feature_blocks, **kwargs)


@_named
def ViTS32(include_top=True, weights=None, feature_blocks=None, **kwargs):
    return build_variant("ViTS32", include_top, weights, feature_blocks, **kwargs)


@_named
def ViTB8(include_top=True, weights=None, feature_blocks=None, **kwargs):
    return build_variant("ViTB8", include_top, weights, feature_blocks, **kwargs)


@_named
def ViTB16(include_top=True, weights=None, feature_blocks=None, **kwargs):
    return build_variant("ViTB16", include_top, weights, feature_blocks, **kwargs)


@_named
def ViTB32(include_top=True, weights=None, feature_blocks=None, **kwargs):
    return build_variant("ViTB32", include_top, weights, feature_blocks, **kwargs)


@_named
def ViTL16(include_top=True, weights=None, feature_blocks=None, **kwargs):
    return build_variant("ViTL16", include_top, weights, feature_blocks, **kwargs)


@_named
def ViTL32(include_top=True, weights=None, feature_blocks=None, **kwargs):
    return build_variant("ViTL32", include_top, weights, feature_blocks, **kwargs)


@_named
def ViTH14(include_top=True, weights=None, feature_blocks=None, **kwargs):
    return build_variant("ViTH14", include_top, weights, feature_blocks, **kwargs)


@_named
def ViTGiant14(include_top=True, weights=None, feature_blocks=None, **kwargs):
    return build_variant("ViTGiant14", include_top, weights, feature_blocks, **kwargs)


@_named
def ViTGigantic14(include_top=True, weights=None, feature_blocks=None, **kwargs):
    return build_variant("ViTGigantic14", include_top, weights, feature_blocks, **kwargs)


@_named
def RViTTi16(include_top=True, weights=None, feature_blocks=None, **kwargs):
    return build_variant("RViTTi16", include_top, weights, feature_blocks, **kwargs)


@_named
def R26ViTS32(include_top=True, weights=None, feature_blocks=None, **kwargs):
    return build_variant("R26ViTS32", include_top, weights, feature_blocks, **kwargs)


@_named
def R26ViTB32(include_top=True, weights=None, feature_blocks=None, **kwargs):
    return build_variant("R26ViTB32", include_top, weights, feature_blocks, **kwargs)


@_named
def R50ViTB16(include_top=True, weights=None, feature_blocks=None, **kwargs):
    return build_variant("R50ViTB16", include_top, weights, feature_blocks, **kwargs)


@_named
def R50ViTL32(include_top=True, weights=None, feature_blocks=None, **kwargs):
    return build_variant("R50ViTL32", include_top, weights, feature_blocks, **kwargs)


__all__ = ["ARCHITECTURE_CONFIGS", "CONSTRUCTORS", "architecture_name", "build_variant"]
__all__ += list(CONSTRUCTORS)
