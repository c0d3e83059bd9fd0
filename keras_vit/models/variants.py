"""The table of ViT variants and the named constructors built from it."""

from keras_vit.models.hybrid import ViTHybrid
from keras_vit.models.vit import ViT

# Architectures of the paper (Table 1) and of the AugReg release (Ti, S),
# as in the official `vit_jax/configs/models.py`. Hybrid rows carry a
# `resnet_layers` entry and are built by `ViTHybrid`.
ARCHITECTURES = {
    "Ti/16": dict(patch_size=16, hidden_size=192, num_layers=12, num_heads=3, mlp_dim=768),
    "S/16": dict(patch_size=16, hidden_size=384, num_layers=12, num_heads=6, mlp_dim=1536),
    "S/32": dict(patch_size=32, hidden_size=384, num_layers=12, num_heads=6, mlp_dim=1536),
    "B/8": dict(patch_size=8, hidden_size=768, num_layers=12, num_heads=12, mlp_dim=3072),
    "B/16": dict(patch_size=16, hidden_size=768, num_layers=12, num_heads=12, mlp_dim=3072),
    "B/32": dict(patch_size=32, hidden_size=768, num_layers=12, num_heads=12, mlp_dim=3072),
    "L/16": dict(patch_size=16, hidden_size=1024, num_layers=24, num_heads=16, mlp_dim=4096),
    "L/32": dict(patch_size=32, hidden_size=1024, num_layers=24, num_heads=16, mlp_dim=4096),
    "H/14": dict(patch_size=14, hidden_size=1280, num_layers=32, num_heads=16, mlp_dim=5120),
    # Hybrids (§3.1): `patch_size` is counted on the ResNet feature map.
    # R+Ti/16 keeps the ResNet stem only (stride 4), so with 8x8 patches its
    # effective stride is 32 despite the official name.
    "R+Ti/16": dict(patch_size=8, hidden_size=192, num_layers=12, num_heads=3, mlp_dim=768, resnet_layers=(), resnet_width=1.0),
    "R26+S/32": dict(patch_size=1, hidden_size=384, num_layers=12, num_heads=6, mlp_dim=1536, resnet_layers=(2, 2, 2, 2), resnet_width=1.0),
    "R26+B/32": dict(patch_size=1, hidden_size=768, num_layers=12, num_heads=12, mlp_dim=3072, resnet_layers=(2, 2, 2, 2), resnet_width=1.0),
    # (3, 4, 9) instead of ResNet-50's (3, 4, 6, 3): stride 16 (paper §3.1).
    "R50+B/16": dict(patch_size=1, hidden_size=768, num_layers=12, num_heads=12, mlp_dim=3072, resnet_layers=(3, 4, 9), resnet_width=1.0),
    "R50+L/32": dict(patch_size=1, hidden_size=1024, num_layers=24, num_heads=16, mlp_dim=4096, resnet_layers=(3, 4, 6, 3), resnet_width=1.0),
}

# Named constructor -> architecture.
CONSTRUCTORS = {
    "ViTTi16": "Ti/16",
    "ViTS16": "S/16",
    "ViTS32": "S/32",
    "ViTB8": "B/8",
    "ViTB16": "B/16",
    "ViTB32": "B/32",
    "ViTL16": "L/16",
    "ViTL32": "L/32",
    "ViTH14": "H/14",
    "RViTTi16": "R+Ti/16",
    "R26ViTS32": "R26+S/32",
    "R26ViTB32": "R26+B/32",
    "R50ViTB16": "R50+B/16",
    "R50ViTL32": "R50+L/32",
}

_KEYS = ("patch_size", "hidden_size", "num_layers", "num_heads", "mlp_dim")


def _normal(config):
    config = dict(config)
    patch = config.get("patch_size")
    if isinstance(patch, int):
        config["patch_size"] = (patch, patch)
    elif patch is not None:
        config["patch_size"] = tuple(patch)
    if "resnet_layers" in config:
        config["resnet_layers"] = tuple(config["resnet_layers"])
    return config


def architecture_name(config):
    """The table's name for an architecture config, or None if not listed.

    Args:
        config: dict with at least `patch_size`, `hidden_size`, `num_layers`,
            `num_heads`, `mlp_dim` (and `resnet_layers`, `resnet_width` for
            hybrids).

    Returns:
        A name such as "B/16" or "R50+B/16", or None.
    """
    config = _normal(config)
    for name, row in ARCHITECTURES.items():
        row = _normal(row)
        keys = _KEYS + (("resnet_layers", "resnet_width") if "resnet_layers" in row else ())
        if "resnet_layers" in row and "resnet_layers" not in config:
            continue
        if "resnet_layers" in config and "resnet_layers" not in row:
            continue
        if all(config.get(k, 1.0 if k == "resnet_width" else None) == row.get(k, 1.0) for k in keys):
            return name
    return None


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
        gelu_approximate: None (default: the flavour the weights were trained
            with; tanh from scratch), True (tanh) or False (exact erf).
        **kwargs: any other argument of `keras_vit.{base}` (dropout rates,
            `name`, `dtype`, ...).

    Returns:
        A `keras_vit.{base}` model.

    Example:

    >>> model = keras_vit.{func}(image_size={example_size}, classes=10)
    >>> model.output_shape
    (None, 10)

    Reference:
        Dosovitskiy et al., arXiv:2010.11929{reference}.
    """


def make_constructor(func_name, arch, model_class, summary="", extra="", reference=""):
    """Returns a thin named constructor for the table row `arch`."""
    row = ARCHITECTURES[arch]

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
        gelu_approximate=None,
        **kwargs,
    ):
        config = dict(row)
        config.update(kwargs)
        config.setdefault("name", func_name.lower())
        return model_class(
            include_top=include_top,
            weights=weights,
            input_shape=input_shape,
            image_size=image_size,
            pooling=pooling,
            classes=classes,
            classifier_activation=classifier_activation,
            representation_size=representation_size,
            layer_norm_epsilon=layer_norm_epsilon,
            gelu_approximate=gelu_approximate,
            **config,
        )

    from keras_vit.weights.registry import weights_names

    names = ", ".join(f'"{n}"' for n in weights_names(arch)) or "none registered"
    stride = 1 if "resnet_layers" not in row else 16
    patch = row["patch_size"]
    example = 2 * stride * (patch if isinstance(patch, int) else patch[0])
    constructor.__name__ = func_name
    constructor.__qualname__ = func_name
    constructor.__doc__ = _DOC.format(
        title=func_name,
        arch=arch,
        extra=extra,
        summary=summary
        or (
            f"{row['num_layers']} layers, width {row['hidden_size']}, "
            f"{row['num_heads']} heads, MLP {row['mlp_dim']}, patch {patch}."
        ),
        weights_names=names,
        base=model_class.__name__,
        func=func_name,
        example_size=example,
        reference=reference,
    )
    constructor.architecture = arch
    return constructor


ViTTi16 = make_constructor("ViTTi16", "Ti/16", ViT)
ViTS16 = make_constructor("ViTS16", "S/16", ViT)
ViTS32 = make_constructor("ViTS32", "S/32", ViT)
ViTB8 = make_constructor("ViTB8", "B/8", ViT)
ViTB16 = make_constructor("ViTB16", "B/16", ViT)
ViTB32 = make_constructor("ViTB32", "B/32", ViT)
ViTL16 = make_constructor("ViTL16", "L/16", ViT)
ViTL32 = make_constructor("ViTL32", "L/32", ViT)
ViTH14 = make_constructor("ViTH14", "H/14", ViT)

_HYBRID = dict(
    extra=" hybrid",
    reference="; BiT ResNet: arXiv:1912.11370",
)
RViTTi16 = make_constructor(
    "RViTTi16",
    "R+Ti/16",
    ViTHybrid,
    summary="ResNet stem (7x7/2 StdConv, GroupNorm, 3x3/2 max-pool) and 8x8 "
    "patches on its stride-4 feature map (effective stride 32: a 7x7 grid at "
    "224 px), then a Ti Transformer (12 layers, width 192, 3 heads).",
    **_HYBRID,
)
R26ViTS32 = make_constructor(
    "R26ViTS32",
    "R26+S/32",
    ViTHybrid,
    summary="ResNet-26 (2, 2, 2, 2 bottleneck units, stride 32), 1x1 patches "
    "on its feature map, then an S Transformer (12 layers, width 384).",
    **_HYBRID,
)
R26ViTB32 = make_constructor(
    "R26ViTB32",
    "R26+B/32",
    ViTHybrid,
    summary="ResNet-26 (2, 2, 2, 2 bottleneck units, stride 32), 1x1 patches "
    "on its feature map, then a B Transformer (12 layers, width 768).",
    **_HYBRID,
)
R50ViTB16 = make_constructor(
    "R50ViTB16",
    "R50+B/16",
    ViTHybrid,
    summary="ResNet-50 with stages (3, 4, 9) (stride 16), 1x1 patches on its "
    "feature map, then a B Transformer (12 layers, width 768).",
    **_HYBRID,
)
R50ViTL32 = make_constructor(
    "R50ViTL32",
    "R50+L/32",
    ViTHybrid,
    summary="ResNet-50 (3, 4, 6, 3) (stride 32), 1x1 patches on its feature "
    "map, then an L Transformer (24 layers, width 1024).",
    **_HYBRID,
)
