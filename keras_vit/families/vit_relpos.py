"""timm's relative-position ViTs (`vit_relpos_*`, `vit_srelpos_*`:
`timm/models/vision_transformer_relpos.py`'s `VisionTransformerRelPos`)
from timm Hub directories.

No absolute position embedding: each block's attention adds a bias of the
patch tokens' relative positions to its logits, an MLP (2 -> 128 -> heads,
ReLU) of the log-spaced relative coordinates (timm's `RelPosMlp` with
`rel_pos_type="mlp"`, the "cr" mode; `keras_vit.layers.relative_position`).
The MLP is each block's own (`blocks.{i}.attn.rel_pos.mlp.fc1`, `fc2`:
keras_vit's `relative_position="mlp"`) or, with `shared_rel_pos`
(`vit_srelpos_*`), the model's (`shared_rel_pos.mlp.*`: "shared_mlp").
The rest is a ViT: an optional class token (`cls_token`, without position
row), LayerScale (`init_values`, 1e-6 by default), the mean of the patch
tokens (`global_pool="avg"`, by default) or the class token, `norm` or
`fc_norm`; `ResPostRelPosBlock` (`_rpn` names) puts the norms on the
branches' outputs (`norm_position="post"`, without LayerScale). The
state dict uses timm's ViT names (`keras_vit.weights.formats.timm`'s table).

Example:

>>> args, _ = model_arguments({"architecture": "vit_srelpos_small_patch16_224", "pretrained_cfg": {}})
>>> args["relative_position"], args["relative_position_dim"], args["position_embedding"]
('shared_mlp', 384, 'none')
"""

from keras_vit.weights.formats.timm_architectures import CLASS_DEFAULTS
from keras_vit.weights import canonical as C
from keras_vit.weights.formats import timm

# The VisionTransformerRelPos arguments read (the others must keep timm's
# defaults; `timm.TRAINING` change training only).
_READ = frozenset((
    "img_size", "patch_size", "in_chans", "num_classes", "global_pool", "embed_dim", "depth", "num_heads",
    "mlp_ratio", "qkv_bias", "init_values", "class_token", "fc_norm", "rel_pos_type", "rel_pos_dim",
    "shared_rel_pos", "norm_layer", "act_layer", "block_fn",
))
# timm's relative-position blocks -> keras_vit's block options.
BLOCKS = {"RelPosBlock": {}, "ResPostRelPosBlock": {"norm_position": "post"}}


def model_arguments(config):
    """keras_vit `ViT` arguments for a timm Hub `config.json` dict of a
    `VisionTransformerRelPos`.

    Returns:
        `(arguments, layout)`, as `keras_vit.weights.formats.timm.model_arguments`.
    """
    name, cls, args = timm.resolve(config)
    activation = timm.activation_of(args["act_layer"])
    extra = {}
    if args["rel_pos_type"] != "mlp":
        extra["rel_pos_type"] = repr(args["rel_pos_type"])
    if args["block_fn"] not in BLOCKS:
        extra["block_fn"] = repr(args["block_fn"])
    if activation not in ("gelu", "gelu_tanh", "quick_gelu"):
        extra["act_layer"] = repr(args["act_layer"])
    if timm.norm_of(args["norm_layer"]) is None:
        extra["norm_layer"] = repr(args["norm_layer"])
    if args["global_pool"] not in ("avg", "token", ""):
        extra["global_pool"] = repr(args["global_pool"])
    timm.refuse(name, args, _READ | timm.TRAINING, CLASS_DEFAULTS[cls], extra)
    kind, epsilon = timm.norm_of(args["norm_layer"])
    options = BLOCKS[args["block_fn"]]
    # Only the pre-norm block has LayerScale (timm's `if init_values`).
    scale = args["init_values"] if args["init_values"] and not options else None
    fc_norm = bool(args["fc_norm"])
    out = C.encoder_arguments(
        args["img_size"], args["patch_size"], args["embed_dim"], args["depth"], args["num_heads"],
        int(args["embed_dim"] * args["mlp_ratio"]), channels=args["in_chans"],
        classifier=timm.classifier(args["global_pool"], args["class_token"]),
        class_token=bool(args["class_token"]), pooled_norm=fc_norm, qkv_bias=bool(args["qkv_bias"]),
        layer_scale_init=None if scale is None else float(scale), layer_norm_epsilon=epsilon, norm_kind=kind,
        mlp_activation=activation, position_embedding="none",
        relative_position="shared_mlp" if args["shared_rel_pos"] else "mlp",
        relative_position_dim=args["rel_pos_dim"] or 128,
        classifier_activation=None, **options,
    )
    out.update(timm.head(config, args["global_pool"], args["num_classes"]))
    return out, dict(no_embed_class=False, table="plain", heads=args["num_heads"], parallel=False)


def preset_source(directory, config=None):
    """A `PresetSource` for a timm Hub directory of a relative-position ViT
    (`config`: its `config.json` dict, None: read here)."""
    return timm.hub_source(directory, model_arguments, timm.read_hub_state, config=config)
