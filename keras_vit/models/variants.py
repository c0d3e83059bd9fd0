"""The named constructors (`ViTB16`, `R50ViTB16`, ...), one per table row.

Each constructor is generated from its row of
`keras_vit.architectures.VARIANTS` and carries a docstring made from one
template, as keras.applications does.
"""

from keras_vit.architectures import (  # noqa: F401 (public here too)
    ARCHITECTURES,
    CONSTRUCTORS,
    VARIANTS,
    architecture_name,
    stem_stride,
)
from keras_vit.models.arguments import OTHER_NAMES
from keras_vit.models.features import check_feature_blocks, feature_model
from keras_vit.models.hybrid import ViTHybrid
from keras_vit.models.vit import ViT
from keras_vit.validation import argument_names, check_keywords
from keras_vit.weights.registry import weights_names

_DOC = """Builds {title}, the {arch} Vision Transformer{extra}.

    {summary}

    Args:
        include_top: bool, default True: whether to add the classifier head.
        weights: None (random init, the default), a registered weights name
            (for {arch}: {weights_names}), or a checkpoint path (official or
            big_vision `.npz`, timm `.safetensors`/`.pth`, keras_vit
            `.weights.h5`).
        input_shape: optional `(height, width, channels)`.
        image_size: int or `(height, width)`, alternative to `input_shape`;
            default 224, or the resolution of the named `weights`.
        pooling: for `include_top=False`: None (token sequence), "token",
            "avg" or "max".
        classes: int, default 1000 or the classes of the named `weights`; a
            value that differs from the checkpoint's gets a new,
            zero-initialised head.
        classifier_activation: default "softmax"; None returns logits.
        representation_size: None (default) or the width of the Dense+tanh
            pre-logits layer (present in the original ImageNet-21k files).
        layer_norm_epsilon: float, default 1e-6.
        mlp_activation: None (default: the GELU the weights were trained
            with; "gelu_tanh" from scratch), "gelu_tanh", "gelu" (exact erf)
            or "quick_gelu".
        feature_blocks: None (default) or an int / sequence of block indices
            (negative from the last), with `include_top=False`: returns
            `keras_vit.feature_model(model, feature_blocks)` instead, the
            NHWC feature maps of those blocks (dense tasks).
        **kwargs: any other argument of `keras_vit.{base}` (dropout rates,
            `name`, `dtype`, ...); another name raises
            `keras_vit.validation.UnknownArgumentError`, naming the closest.

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
        func=variant.constructor,
        example_size=example,
        reference="; BiT ResNet: arXiv:1912.11370" if variant.hybrid else "",
    )


def make_constructor(variant):
    """Returns the named constructor of a `keras_vit.architectures.Variant`."""
    model_class = ViTHybrid if variant.hybrid else ViT
    row = dict(variant.config)

    def constructor(
        include_top=True,
        weights=None,
        input_shape=None,
        image_size=None,
        pooling=None,
        classes=None,
        classifier_activation="softmax",
        representation_size=None,
        layer_norm_epsilon=1e-6,
        mlp_activation=None,
        feature_blocks=None,
        **kwargs,
    ):
        check_keywords(kwargs, allowed, variant.constructor, OTHER_NAMES)
        if feature_blocks is not None and include_top:
            raise ValueError(
                "`feature_blocks` gives a model of block feature maps, which has no classifier: "
                f"pass include_top=False with it. Received: include_top={include_top!r}, "
                f"feature_blocks={feature_blocks!r}"
            )
        config = dict(row, name=variant.constructor.lower())
        config.update(kwargs)
        if mlp_activation is not None:
            config["mlp_activation"] = mlp_activation
        if feature_blocks is not None:
            # Checked before the (possibly large) model and its weights are built.
            check_feature_blocks(feature_blocks, config["num_layers"])
        model = model_class(
            include_top=include_top,
            weights=weights,
            input_shape=input_shape,
            image_size=image_size,
            pooling=pooling,
            classes=classes,
            classifier_activation=classifier_activation,
            representation_size=representation_size,
            layer_norm_epsilon=layer_norm_epsilon,
            **config,
        )
        if feature_blocks is None:
            return model
        return feature_model(model, feature_blocks=feature_blocks)

    # Misspelt names fail here, under the constructor's own name.
    allowed = argument_names(constructor) + model_class.argument_names()
    constructor.__name__ = constructor.__qualname__ = variant.constructor
    constructor.__module__ = __name__
    constructor.__doc__ = _docstring(variant, model_class)
    constructor.architecture = variant.architecture
    return constructor


for _variant in VARIANTS:
    globals()[_variant.constructor] = make_constructor(_variant)
del _variant

__all__ = ["ARCHITECTURES", "CONSTRUCTORS", "architecture_name", "make_constructor"] + list(
    CONSTRUCTORS
)
