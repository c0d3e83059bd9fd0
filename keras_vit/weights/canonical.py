"""The canonical checkpoint layout: its key names, spelled once, and the
records every reader returns.

The canonical layout is the official vit_jax `.npz`: keys such as
`Transformer/encoderblock_0/MultiHeadDotProductAttention_1/query/kernel`
(pre-Linen numbering), the position embedding with the class-token row
first, `cls`, `embedding`, `pre_logits`, `head`, and the ResNet keys of the
hybrids. Every format module (`keras_vit.weights.formats`) is a table from
its own names to these; `{i}` stands for the block index.
"""

import dataclasses

from keras_vit.validation import pair

# Prefix tokens: class, distillation (DeiT), registers.
CLS = "cls"
DIST = "dist"
REG = "reg"
# The prefix tokens with a position row, in row order; register tokens have none.
POSITION_PREFIX_KEYS = (CLS, DIST)
POSEMB = "Transformer/posembed_input/pos_embedding"
# The patch embedding (`kernel` (ph, pw, C, D), `bias`).
EMBEDDING = "embedding/"
# The norm of the patch embeddings (`patch_norm`: AIMv2's RMSNorm).
EMBEDDING_NORM = EMBEDDING + "norm/"
BLOCK = "Transformer/encoderblock_{i}/"
NORM_1 = BLOCK + "LayerNorm_0/"
ATTENTION = BLOCK + "MultiHeadDotProductAttention_1/"
# The decomposed relative position tables of an attention (`height`, `width`).
RELATIVE_POSITION = ATTENTION + "relative_position/"
NORM_2 = BLOCK + "LayerNorm_2/"
MLP_IN = BLOCK + "MlpBlock_3/Dense_0/"
MLP_OUT = BLOCK + "MlpBlock_3/Dense_1/"
# The gated MLP (`SwiGluMlp`, `mlp_kind="swiglu"`): `gate` and `up` to the
# hidden width, `down` back; `{part}` names gate or up where one source
# tensor holds both (transforms "gate_up_kernel"/"gate_up_bias").
MLP_GATE_UP = BLOCK + "MlpBlock_3/{part}/"
MLP_DOWN = BLOCK + "MlpBlock_3/down/"
# LayerScale vectors of the attention and MLP branches.
ATTENTION_SCALE = BLOCK + "attention_scale"
MLP_SCALE = BLOCK + "mlp_scale"
ENCODER_NORM = "Transformer/encoder_norm/"
# LayerNorm before the first block (CLIP's `pre_layrnorm`).
PRE_NORM = "pre_norm/"
# The convolutional neck after the blocks (SAM's): `conv_0/`, `norm_0/`,
# `conv_1/`, `norm_1/`.
NECK = "neck/"
# Norm after pooling (timm's `fc_norm`).
POOLED_NORM = "fc_norm/"
PRE_LOGITS = "pre_logits/"
# The attention-pool (MAP) head (`MapHead`: `probe`, `MultiHeadDotProductAttention_0/`,
# `LayerNorm_0/`, `MlpBlock_0/`).
MAP_HEAD = "pool/"
MAP_ATTENTION = MAP_HEAD + "MultiHeadDotProductAttention_0/"
MAP_NORM = MAP_HEAD + "LayerNorm_0/"
MAP_MLP_IN = MAP_HEAD + "MlpBlock_0/Dense_0/"
MAP_MLP_OUT = MAP_HEAD + "MlpBlock_0/Dense_1/"
# AIMv2's attention-pool head (`AttentionPoolHead`: `query`, `key/`,
# `value/`, `out/`).
ATTENTION_POOL = "pool/"
HEAD = "head/"
# DeiT's second head, on the distillation token.
HEAD_DIST = "head_dist/"


def block(template, index):
    """`template` for block `index`.

    Example:

    >>> block(NORM_1 + "scale", 3)
    'Transformer/encoderblock_3/LayerNorm_0/scale'
    """
    return template.replace("{i}", str(index))


def encoder_arguments(image_size, patch_size, hidden_size, num_layers, num_heads, mlp_dim, channels=3, **options):
    """The `ViT` arguments of a checkpoint's encoder (`PresetSource.arguments`).

    Sizes become `(height, width)` pairs; `input_shape` is set only for
    other than 3 channels; `options` are passed on as they are.

    Raises:
        ValueError: naming `image_size` or `patch_size` when it is not a
            positive int or a pair of them.

    Example:

    >>> args = encoder_arguments(32, 8, 16, 2, 2, 64, channels=1, qkv_bias=False)
    >>> args["patch_size"], args["input_shape"], args["qkv_bias"]
    ((8, 8), (32, 32, 1), False)
    """
    size = pair(image_size, "image_size")
    args = dict(
        image_size=size,
        patch_size=pair(patch_size, "patch_size"),
        hidden_size=hidden_size,
        num_layers=num_layers,
        num_heads=num_heads,
        mlp_dim=mlp_dim,
        **options,
    )
    if channels != 3:
        args["input_shape"] = size + (channels,)
    return args


@dataclasses.dataclass
class Checkpoint:
    """A checkpoint read into the canonical layout.

    Attributes:
        path: the file it was read from.
        format: "npz", "timm", "keras", "transformers", "keras_hub", ...
        params: `{canonical key: NumPy array}`.
        ignored: `{source key: reason}` for entries that are not weights.
    """

    path: str
    format: str
    params: dict
    ignored: dict = dataclasses.field(default_factory=dict)


@dataclasses.dataclass
class PresetSource:
    """What a preset directory says, before any weights are read.

    Attributes:
        layout: "keras_vit", "transformers", "timm" or "keras_hub".
        directory: the directory.
        model_class: "ViT" or "ViTHybrid".
        arguments: keyword arguments of `model_class` for the checkpoint.
        read: `read(model) -> Checkpoint`, the weights in the canonical layout.
    """

    layout: str
    directory: str
    model_class: str
    arguments: dict
    read: object
