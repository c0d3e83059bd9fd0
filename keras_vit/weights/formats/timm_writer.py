"""keras_vit models -> timm Hub directories (`save_to_preset(dir, format="timm")`).

What timm and keras_vit share as timm's `VisionTransformer` (and DeiT's
distilled one) is written so that `timm.create_model("local-dir:<dir>",
pretrained=True)` (or `hf-hub:` once pushed) builds it with the same
outputs: `config.json` names an architecture of keras_vit's table of timm's
model functions whose arguments timm cannot read from JSON (its norm
layer and epsilon, its MLP class) are the model's, and `model_args` give
every other argument (sizes, tokens, pooling, biases, LayerScale,
activation, norms' places); `model.safetensors` holds the state dict in
timm's names (`keras_vit.weights.formats.timm`'s tables, read backwards).
Register tokens get zero rows in the position embedding (timm's default
layout has one per prefix token), which adds nothing.

What timm's VisionTransformer cannot hold is refused before anything is
written, naming the option: rotary or relative positions, qk-norm,
parallel, post-norm or differential blocks (timm has them as other model
classes or block classes that a `config.json` cannot name), hybrids,
pre-logits, image-text projections, a MAP head of its own width.
"""

import os

import numpy as np

from keras_vit.weights.formats.timm_architectures import ARCHITECTURES, CLASS_DEFAULTS
from keras_vit.validation import pair
from keras_vit.weights import canonical as C
from keras_vit.weights.files import write_json
from keras_vit.weights.formats.timm import TABLES, norm_of, resolve

# keras_vit options timm's VisionTransformer has no argument for, at the
# value it can hold.
_FIXED = dict(
    representation_size=None, projection_dim=None, l2_normalize=False, qk_norm=False, rope=None,
    norm_position="pre", parallel=False, differential_attention=False, relative_position=None,
    map_num_heads=None, map_mlp_dim=None, window_size=None, neck_channels=None, num_frames=None,
    pooled_norm_epsilon=None,
)
# The arguments timm reads from the architecture's function rather than
# from JSON: each written model takes an architecture whose are the model's.
_STRUCTURAL = ("norm_layer", "embed_norm_layer", "mlp_layer", "block_fn", "embed_layer", "attn_layer")
_ACTIVATIONS = {"gelu": "gelu", "gelu_tanh": "gelu_tanh", "quick_gelu": "quick_gelu"}
_POOLS = {"token": "token", "gap": "avg", "map": "map", "avg": "avg", "max": "max"}


def _refuse(name, value, why):
    raise ValueError(
        f"timm's VisionTransformer cannot hold this model: {name}={value!r} ({why}). "
        "format='keras_vit' keeps every option."
    )


def _check(config):
    if "resnet_layers" in config:
        _refuse("resnet_layers", config["resnet_layers"], "keras_vit writes no timm hybrid")
    for name, value in _FIXED.items():
        if config.get(name, value) != value:
            _refuse(name, config[name], "no VisionTransformer argument")
    if not isinstance(config["qkv_bias"], bool):
        _refuse("qkv_bias", config["qkv_bias"], "timm's qkv bias is one flag")
    if config["attention_out_bias"] != config["mlp_bias"]:
        _refuse("mlp_bias", config["mlp_bias"], "timm's `proj_bias` is both the attention output's and the MLP's")
    if config["mlp_kind"] == "plain" and config["mlp_activation"] not in _ACTIVATIONS:
        _refuse("mlp_activation", config["mlp_activation"], "not one of timm's")
    if config["patch_bias"] == config["pre_norm"]:
        _refuse("patch_bias", config["patch_bias"], "timm drops it exactly with `pre_norm`")
    if config["position_embedding"] not in ("learned", "none"):
        _refuse("position_embedding", config["position_embedding"], "timm's is learned or none")


def _pool(config):
    """timm's `global_pool` of the model's classifier (or pooling without a head)."""
    name, value = ("classifier", config["classifier"]) if config["include_top"] else ("pooling", config["pooling"])
    if value is None:
        return ""
    if value not in _POOLS:
        _refuse(name, value, "no timm `global_pool`")
    return _POOLS[value]


def _crop_pct(size, resize):
    """timm's `crop_pct` resizing `size` to `resize` (`floor(size / crop_pct)`)."""
    crop = size / resize
    while int(size / crop) < resize:
        crop = float(np.nextafter(crop, 0))
    return crop


def _mlp_ratio(hidden, width):
    """A ratio `r` with `int(hidden * r) == width` (timm's rule)."""
    ratio = width / hidden
    return ratio if int(hidden * ratio) == width else (width + 0.5) / hidden


def timm_arguments(config):
    """`(architecture, model_args, distilled)` of a keras_vit flat config.

    Raises:
        ValueError: for a model timm's VisionTransformer cannot hold.

    Example:

    >>> import keras_vit
    >>> from keras_vit.families.writers import _flat_config
    >>> model = keras_vit.ViT(image_size=16, patch_size=8, hidden_size=8, num_layers=1, num_heads=2,
    ...                       mlp_dim=16, classes=3, pre_norm=True, patch_bias=False, layer_norm_epsilon=1e-5)
    >>> name, args, _ = timm_arguments(_flat_config(model))
    >>> name, args["embed_dim"], args["pre_norm"], args["act_layer"]
    ('vit_base_patch16_clip_224', 8, True, 'gelu_tanh')
    """
    _check(config)
    distilled = bool(config["distillation_token"])
    class_token = config["class_token"] if config["class_token"] is not None else config["classifier"] == "token"
    swiglu = config["mlp_kind"] == "swiglu"
    structural = {
        "norm_layer": (config["norm_kind"], config["layer_norm_epsilon"]),
        "embed_norm_layer": (config["norm_kind"], config["layer_norm_epsilon"]) if config["patch_norm"] else None,
        "mlp_layer": frozenset(("split", "packed") if swiglu else ("plain",)), "block_fn": "Block",
        "embed_layer": "PatchEmbed", "attn_layer": "Attention",
    }
    architecture = _architecture(structural, distilled, config)
    # timm's packed SwiGLU (`GluMlp`) splits its `fc1` in two: twice the width.
    width = config["mlp_dim"] * (2 if _structure(architecture)["mlp_layer"] == "packed" else 1)
    args = dict(
        img_size=list(pair(config["image_size"], "image_size")), patch_size=list(config["patch_size"]),
        in_chans=int((config.get("input_shape") or (0, 0, 3))[-1]), embed_dim=config["hidden_size"],
        depth=config["num_layers"], num_heads=config["num_heads"],
        mlp_ratio=_mlp_ratio(config["hidden_size"], width),
        num_classes=config["classes"] if config["include_top"] else 0, global_pool=_pool(config),
        class_token=bool(class_token), reg_tokens=int(config["num_register_tokens"]), no_embed_class=False,
        qkv_bias=config["qkv_bias"], proj_bias=config["attention_out_bias"],
        init_values=config["layer_scale_init"], pre_norm=config["pre_norm"], final_norm=config["final_norm"],
        fc_norm=bool(config["pooled_norm"]), scale_attn_norm=config["attention_out_norm"],
        scale_mlp_norm=config["mlp_norm"], pos_embed="learn" if config["position_embedding"] == "learned" else "none",
        act_layer="silu" if swiglu else _ACTIVATIONS.get(config["mlp_activation"]),
    )
    if args["global_pool"] == "map" and (class_token or distilled or args["reg_tokens"]):
        _refuse("classifier", "map", "timm's attention pool leaves the prefix tokens out, keras_vit's reads them")
    if distilled != bool(config["distillation_head"]):
        _refuse("distillation_head", config["distillation_head"], "timm's distilled ViT has both heads")
    return architecture, args, distilled


def _structure(name):
    """The `_STRUCTURAL` arguments of a table architecture, as `timm_arguments` spells them."""
    _, _, args = resolve({"architecture": name, "pretrained_cfg": {}})
    mlp = args["mlp_layer"]
    packed = isinstance(mlp, dict) and mlp.get("fn") == "GluMlp" and mlp.get("gate_last") is False
    embed = args["embed_norm_layer"]
    return {
        "norm_layer": norm_of(args["norm_layer"]),
        "embed_norm_layer": None if embed is None else norm_of(embed),
        "mlp_layer": "plain" if mlp == "Mlp" else "packed" if packed else "split" if mlp == "SwiGLU" else mlp,
        "block_fn": args["block_fn"], "embed_layer": args["embed_layer"], "attn_layer": args["attn_layer"],
    }


def _architecture(structural, distilled, config):
    """An architecture of the table (of timm's VisionTransformer class, or
    DeiT's distilled one) whose structural arguments are the model's: of
    those, the closest in width and patch size, a `vit_*` name first."""
    wanted = "VisionTransformerDistilled" if distilled else "VisionTransformer"
    found = []
    for name, entry in ARCHITECTURES.items():
        if entry["cls"] != wanted or entry["module"] == "vision_transformer_hybrid":
            continue
        have = _structure(name)
        if all(have[k] in v if isinstance(v, frozenset) else have[k] == v for k, v in structural.items()):
            args = entry["args"]
            found.append((args.get("embed_dim") != config["hidden_size"],
                          pair(args.get("patch_size", 16), "patch_size") != tuple(config["patch_size"]),
                          not name.startswith("vit_"), name))
    if not found:
        _refuse("norm_kind, layer_norm_epsilon, mlp_kind", structural,
                "no timm ViT model function builds these norms and this MLP")
    return min(found)[-1]


def _timm_state(params, args, architecture):
    """Canonical params -> timm's state dict (register rows zero)."""
    params = dict(params)
    registers = args["reg_tokens"]
    if registers and C.POSEMB in params:
        posemb = params[C.POSEMB]
        rows = sum(k in params for k in C.POSITION_PREFIX_KEYS)
        zeros = np.zeros(posemb.shape[:1] + (registers,) + posemb.shape[2:], posemb.dtype)
        params[C.POSEMB] = np.concatenate([posemb[:, :rows], zeros, posemb[:, rows:]], axis=1)
    return TABLES[_structure(architecture)["mlp_layer"]].from_canonical(params)


def write(directory, config, params, class_names, preprocessing, max_shard_size=None):
    """Writes a timm Hub directory: `config.json` and `model.safetensors`.

    Args:
        directory: an existing folder.
        config: the keras_vit model's flat config (record fields as top-level keys).
        params: its weights in the canonical layout (`mapping.model_state`).
        class_names: one name per class in head order, or None.
        preprocessing: a `Preprocessing` record, or None.
        max_shard_size: None (one `model.safetensors`) or the largest shard
            (`keras_vit.weights.shards.write_state`).

    Raises:
        ValueError: for a model timm's VisionTransformer cannot hold, before
            anything is written.
    """
    from keras_vit.weights.shards import write_state

    architecture, args, _ = timm_arguments(config)
    state = {k: np.ascontiguousarray(v, "float32") for k, v in _timm_state(params, args, architecture).items()}
    defaults = CLASS_DEFAULTS[ARCHITECTURES[architecture]["cls"]]
    cfg = dict(input_size=[args["in_chans"], *args["img_size"]], fixed_input_size=True,
               num_classes=args["num_classes"], first_conv="patch_embed.proj", classifier="head")
    if preprocessing is not None:
        size = list(preprocessing.image_size or args["img_size"])
        resize = preprocessing.resize
        shorter = resize if isinstance(resize, int) or resize is None else resize[0]
        cfg.update(mean=list(preprocessing.mean), std=list(preprocessing.std),
                   crop_pct=1.0 if resize is None else _crop_pct(size[0], shorter),
                   crop_mode="center" if isinstance(resize, int) or resize is None else "squash",
                   interpolation=preprocessing.interpolation, input_size=[args["in_chans"], *size])
    hub = dict(architecture=architecture, num_classes=args["num_classes"], num_features=args["embed_dim"],
               model_args={k: v for k, v in args.items() if k in defaults}, pretrained_cfg=cfg)
    if args["global_pool"]:
        hub["global_pool"] = args["global_pool"]
    if class_names is not None:
        hub["label_names"] = list(class_names)
    write_state(directory, state, max_shard_size)
    write_json(os.path.join(directory, "config.json"), hub)
