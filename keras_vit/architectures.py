"""The ViT architectures: one table, and the facts derived from it.

The ground floor of keras_vit: models, weights, tools and tests read the
table here, and this module imports nothing of keras_vit but its argument
checks. Each row is one named variant: its constructor name, its
architecture name as the paper and the checkpoints spell it ("B/16",
"R50+B/16"), and the `keras_vit.ViT` / `keras_vit.ViTHybrid` arguments that
define it.

Reference:
    Dosovitskiy et al., arXiv:2010.11929, Table 1 (Base, Large, Huge) and
    §3.1 (hybrids); Steiner et al., arXiv:2106.10270 (Ti, S and the R+Ti,
    R26 hybrids of the AugReg release); Zhai et al., arXiv:2106.04560,
    Table 2 (g/14, G/14).
"""

import dataclasses
import types

from keras_vit.validation import pair

# How the classifier reads the encoder: the class token, the mean of all
# tokens (no class token), attention pooling by a learned probe (SigLIP's
# MAP head; no class token unless the encoder options ask for one), the
# class token beside the mean of the patch tokens (DINOv2's linear heads),
# or AIMv2's attention-pool head (a learned query, no MLP).
CLASSIFIERS = ("token", "gap", "map", "token_avg", "attention_pool")
# What `include_top=False` models return: the token sequence (None), the
# class token, the average / maximum of the patch tokens, the MAP head, the
# class token concatenated with the patch tokens' average (2 * D wide), or
# AIMv2's attention-pool head.
POOLINGS = (None, "token", "avg", "max", "map", "token_avg", "attention_pool")
# The classifiers and poolings that read a class token.
CLASS_TOKEN_READERS = ("token", "token_avg")

# The GELU flavours by their command-line names (`--gelu`), as
# `mlp_activation` values: tanh (the official code and checkpoints) or the
# exact erf form (timm, DeiT).
GELU_FLAVOURS = {"tanh": "gelu_tanh", "erf": "gelu"}

_CONFIG_KEYS = ("patch_size", "hidden_size", "num_layers", "num_heads", "mlp_dim")


@dataclasses.dataclass(frozen=True)
class Variant:
    """One row of the table.

    Attributes:
        constructor: name of the `keras_vit` function that builds it.
        architecture: the architecture name, e.g. "B/16".
        config: read-only mapping of model arguments (`patch_size`,
            `hidden_size`, `num_layers`, `num_heads`, `mlp_dim`; hybrids add
            `resnet_layers` and `resnet_width`).
        summary: one sentence for the constructor's docstring; empty for a
            summary made from `config`.
    """

    constructor: str
    architecture: str
    config: types.MappingProxyType
    summary: str = ""

    @property
    def hybrid(self):
        """Whether the variant has a ResNet stem (`keras_vit.ViTHybrid`)."""
        return "resnet_layers" in self.config


def _vit(constructor, architecture, patch, hidden, layers, heads, mlp):
    config = dict(patch_size=patch, hidden_size=hidden, num_layers=layers, num_heads=heads, mlp_dim=mlp)
    return Variant(constructor, architecture, types.MappingProxyType(config))


def _hybrid(constructor, architecture, patch, hidden, layers, heads, mlp, resnet, summary):
    config = dict(
        patch_size=patch, hidden_size=hidden, num_layers=layers, num_heads=heads, mlp_dim=mlp,
        resnet_layers=resnet, resnet_width=1.0,
    )
    return Variant(constructor, architecture, types.MappingProxyType(config), summary)


# As in the official `vit_jax/configs/models.py`. Hybrids count
# `patch_size` on the ResNet feature map.
VARIANTS = (
    _vit("ViTTi16", "Ti/16", 16, 192, 12, 3, 768),
    _vit("ViTS16", "S/16", 16, 384, 12, 6, 1536),
    _vit("ViTS32", "S/32", 32, 384, 12, 6, 1536),
    _vit("ViTB8", "B/8", 8, 768, 12, 12, 3072),
    _vit("ViTB16", "B/16", 16, 768, 12, 12, 3072),
    _vit("ViTB32", "B/32", 32, 768, 12, 12, 3072),
    _vit("ViTL16", "L/16", 16, 1024, 24, 16, 4096),
    _vit("ViTL32", "L/32", 32, 1024, 24, 16, 4096),
    _vit("ViTH14", "H/14", 14, 1280, 32, 16, 5120),
    # Zhai et al.'s giant (g) and gigantic (G) sizes (Table 2), for sharded training
    # (`keras_vit.training.get_distribution("fsdp")`); no checkpoint of
    # theirs is published in the official formats.
    _vit("ViTGiant14", "g/14", 14, 1408, 40, 16, 6144),
    _vit("ViTGigantic14", "G/14", 14, 1664, 48, 16, 8192),
    # R+Ti/16 keeps the ResNet stem only (stride 4), so with 8x8 patches
    # its effective stride is 32 despite the official name.
    _hybrid(
        "RViTTi16", "R+Ti/16", 8, 192, 12, 3, 768, (),
        "ResNet stem (7x7/2 StdConv, GroupNorm, 3x3/2 max-pool) and 8x8 patches "
        "on its stride-4 feature map (effective stride 32: a 7x7 grid at 224 px), "
        "then a Ti Transformer (12 layers, width 192, 3 heads).",
    ),
    _hybrid(
        "R26ViTS32", "R26+S/32", 1, 384, 12, 6, 1536, (2, 2, 2, 2),
        "ResNet-26 (2, 2, 2, 2 bottleneck units, stride 32), 1x1 patches on its "
        "feature map, then an S Transformer (12 layers, width 384).",
    ),
    _hybrid(
        "R26ViTB32", "R26+B/32", 1, 768, 12, 12, 3072, (2, 2, 2, 2),
        "ResNet-26 (2, 2, 2, 2 bottleneck units, stride 32), 1x1 patches on its "
        "feature map, then a B Transformer (12 layers, width 768).",
    ),
    # (3, 4, 9) instead of ResNet-50's (3, 4, 6, 3): stride 16 (paper §3.1).
    _hybrid(
        "R50ViTB16", "R50+B/16", 1, 768, 12, 12, 3072, (3, 4, 9),
        "ResNet-50 with stages (3, 4, 9) (stride 16), 1x1 patches on its feature "
        "map, then a B Transformer (12 layers, width 768).",
    ),
    _hybrid(
        "R50ViTL32", "R50+L/32", 1, 1024, 24, 16, 4096, (3, 4, 6, 3),
        "ResNet-50 (3, 4, 6, 3) (stride 32), 1x1 patches on its feature map, "
        "then an L Transformer (24 layers, width 1024).",
    ),
)

# Views of the table: architecture name -> model arguments, and
# constructor name -> architecture name.
ARCHITECTURE_CONFIGS = {v.architecture: dict(v.config) for v in VARIANTS}
CONSTRUCTORS = {v.constructor: v.architecture for v in VARIANTS}


def gelu_activation(approximate):
    """The `mlp_activation` of a GELU known only as tanh-approximated or not.

    Checkpoint records say no more (`gelu_approximate`: True, False, or
    None where the file does not tell).

    Example:

    >>> gelu_activation(True), gelu_activation(False), gelu_activation(None)
    ('gelu_tanh', 'gelu', None)
    """
    if approximate is None:
        return None
    return GELU_FLAVOURS["tanh" if approximate else "erf"]


def get_variant(name):
    """The table row of an architecture or constructor name.

    Args:
        name: "B/16", "R50+B/16", ... or "ViTB16", "R50ViTB16", ...

    Returns:
        A `Variant`.

    Raises:
        ValueError: for a name in neither column; the message lists both.

    Example:

    >>> get_variant("ViTB16").architecture
    'B/16'
    >>> get_variant("R50+B/16").constructor
    'R50ViTB16'
    """
    for variant in VARIANTS:
        if name in (variant.architecture, variant.constructor):
            return variant
    choices = ", ".join(list(ARCHITECTURE_CONFIGS) + list(CONSTRUCTORS))
    raise ValueError(
        f"`name` must be an architecture or constructor name ({choices}). "
        f"Received: name={name!r}"
    )


def stem_stride(resnet_layers=None):
    """Downsampling of the convolutional stem before the patches.

    Args:
        resnet_layers: None for a plain ViT (no stem), else the units per
            ResNet stage; `()` is the root alone (7x7/2 conv and 3x3/2
            max-pool).

    Returns:
        1 for a plain ViT; 4 for the ResNet root, times 2 for each stage
        after the first.

    Example:

    >>> stem_stride(None), stem_stride(()), stem_stride((3, 4, 9)), stem_stride((2, 2, 2, 2))
    (1, 4, 16, 32)
    """
    if resnet_layers is None:
        return 1
    return 4 * 2 ** max(len(tuple(resnet_layers)) - 1, 0)


def effective_patch_size(patch_size, resnet_layers=None):
    """Image pixels covered by one token along `(height, width)`.

    Example:

    >>> effective_patch_size(16), effective_patch_size(8, resnet_layers=())
    ((16, 16), (32, 32))
    """
    stride = stem_stride(resnet_layers)
    ph, pw = pair(patch_size, "patch_size")
    return stride * ph, stride * pw


def _normal(config):
    """The fields that identify an architecture, in a comparable form."""
    out = {k: config.get(k) for k in _CONFIG_KEYS}
    if out["patch_size"] is not None:
        out["patch_size"] = pair(out["patch_size"], "patch_size")
    if config.get("resnet_layers") is not None:
        out["resnet_layers"] = tuple(config["resnet_layers"])
        out["resnet_width"] = float(config.get("resnet_width", 1.0))
    return out


def architecture_name(config):
    """The table's name for an architecture config, or None if not listed.

    Args:
        config: mapping with at least `patch_size`, `hidden_size`,
            `num_layers`, `num_heads`, `mlp_dim` (and `resnet_layers`,
            `resnet_width` for hybrids); other keys are ignored.

    Returns:
        A name such as "B/16" or "R50+B/16", or None.

    Example:

    >>> architecture_name(dict(patch_size=(16, 16), hidden_size=768,
    ...     num_layers=12, num_heads=12, mlp_dim=3072))
    'B/16'
    """
    wanted = _normal(config)
    for name, row in ARCHITECTURE_CONFIGS.items():
        if _normal(row) == wanted:
            return name
    return None
