"""timm ViT state dicts and timm Hub directories <-> the canonical layout.

State dicts keep PyTorch conventions: `Linear` weights are `(out, in)`, the
patch embedding is an OIHW convolution, and the attention's query, key and
value projections are fused into one `qkv` Linear whose output splits as
`(3, heads, head_dim)`. `TABLE` renames each key and names the transform
that brings its tensor to the canonical layout (and back).

Prefix tokens: timm orders them class token, distillation token (DeiT) or
register tokens (`reg_token`, `(1, R, D)`), then the patches. Its position
embedding has a row for each prefix token, or for none of them
(`no_embed_class=True`: added to the patches before the prefix tokens are
prepended). keras_vit gives the class and distillation tokens a row and the
register tokens none; `fold_prefix_rows` converts exactly (a zero row adds
nothing; a register token's row is a constant that folds into the token).

A timm Hub directory holds `model.safetensors` (or `pytorch_model.bin`) and
a `config.json`:

- `architecture`: the timm model function, e.g. "vit_base_patch16_224" or
  "deit_tiny_distilled_patch16_224"; its arguments (width, depth, heads, ...)
  are not in the file, so keras_vit keeps them here as data (`_SIZES`,
  `_NAMED`, read from timm's model functions); `model_args`, when present,
  overrides them;
- `num_classes`, `global_pool`, `label_names` (list, or `{index: name}`) and
  `label_descriptions` (`{name: description}`);
- `pretrained_cfg`: `input_size` `[C, H, W]`, `crop_pct`, `crop_mode`,
  `interpolation`, `mean`, `std`. Older files put all of it at the top level.

The timm ViTs use the exact erf GELU and LayerNorm epsilon 1e-6 unless an
argument says otherwise. timm resizes the position embedding for another
image size with `resample_abs_pos_embed` (antialiased bicubic in float32):
keras_vit's `position_interpolation="timm"`, set for the CLIP and SigLIP
towers (the other timm layouts keep the default, "official").

CLIP and SigLIP image towers are timm `VisionTransformer`s with more
arguments (`_NAMED` lists them by model name):

- CLIP (`pre_norm=True`): `norm_pre` is a LayerNorm before the blocks and
  the patch embedding has no bias; `norm` is CLIP's post-LayerNorm, applied
  to every token (the class token's is the same as CLIP's); `head` is the
  image-embedding projection (its bias zero) for the CLIP-pretrained tags.
- SigLIP (`class_token=False, global_pool="map"`): `attn_pool` is
  `AttentionPoolLatent`: `latent` `(1, 1, D)` is the probe, `q` its query
  Linear, `kv` one Linear whose output splits as `(2, heads, head_dim)`
  into key and value, `proj` the output, then `x + mlp(norm(x))` with
  `mlp.fc1`/`mlp.fc2` of the blocks' width and activation: keras_vit's
  `MapHead`, over the tokens after `norm`.

timm's `Eva` models (DINOv3, EVA02, Perception Encoder, RoPE-ViT: rotary
position embeddings) have their own table and module, `timm_eva`;
`keras_vit.presets` picks the module by the architecture's name.
"""

import difflib
import os
import re

import numpy as np

from keras_vit.layers.config import BlockConfig, EncoderConfig
from keras_vit.validation import pair
from keras_vit.weights import canonical as C
from keras_vit.weights import shards
from keras_vit.weights.files import read_json, read_state_dict
from keras_vit.weights.formats.conventions import torch_linear, torch_map_head_tail, torch_norm
from keras_vit.weights.record import Preprocessing
from keras_vit.weights.rules import RuleTable

BLOCK = "blocks.{i}."
_RULES = (
    ("cls_token", C.CLS),
    ("dist_token", C.DIST),
    ("reg_token", C.REG),
    ("pos_embed", C.POSEMB),
    *torch_linear("patch_embed.proj", C.EMBEDDING, "conv"),
    *torch_norm("patch_embed.norm", C.EMBEDDING_NORM),
    *torch_norm(BLOCK + "norm1", C.NORM_1),
    *torch_linear(BLOCK + "attn.qkv", C.ATTENTION + "{part}/", "qkv_kernel", "qkv_bias"),
    *torch_linear(BLOCK + "attn.proj", C.ATTENTION + "out/", "heads_out"),
    *torch_norm(BLOCK + "norm2", C.NORM_2),
    (BLOCK + "ls1.gamma", C.ATTENTION_SCALE),
    (BLOCK + "ls2.gamma", C.MLP_SCALE),
    *torch_norm("norm_pre", C.PRE_NORM),
    *torch_norm("norm", C.ENCODER_NORM),
    # timm's `AttentionPoolLatent`: the probe, its query, key and value
    # (one fused Linear), output, norm and MLP.
    ("attn_pool.latent", C.MAP_HEAD + "probe"),
    *torch_linear("attn_pool.q", C.MAP_ATTENTION + "query/", "heads_in", "heads_bias"),
    *torch_linear("attn_pool.kv", C.MAP_ATTENTION + "{part}/", "kv_kernel", "kv_bias"),
    *torch_linear("attn_pool.proj", C.MAP_ATTENTION + "out/", "heads_out"),
    *torch_map_head_tail("attn_pool.norm", "attn_pool.mlp.fc1", "attn_pool.mlp.fc2"),
    *torch_linear("pre_logits.fc", C.PRE_LOGITS),
    *torch_norm("fc_norm", C.POOLED_NORM),
    *torch_linear("head", C.HEAD),
    *torch_linear("head_dist", C.HEAD_DIST),
)
TABLE = RuleTable(_RULES + torch_linear(BLOCK + "mlp.fc1", C.MLP_IN) + torch_linear(BLOCK + "mlp.fc2", C.MLP_OUT))
# timm's `SwiGLU` MLP (AIMv2): `fc1_g` the gate, `fc1_x` the up projection, `fc2` down.
SWIGLU_TABLE = RuleTable(
    _RULES
    + torch_linear(BLOCK + "mlp.fc1_g", C.MLP_GATE_UP.replace("{part}", "gate"))
    + torch_linear(BLOCK + "mlp.fc1_x", C.MLP_GATE_UP.replace("{part}", "up"))
    + torch_linear(BLOCK + "mlp.fc2", C.MLP_DOWN)
)


def to_canonical(state, num_heads, table=TABLE):
    """Converts a timm ViT state dict to canonical keys and layouts.

    Keys no rule knows are kept under their timm name, so that strict
    loading reports them as unexpected.

    Args:
        state: `{timm key: NumPy array}`.
        num_heads: int, number of attention heads.
        table: the `RuleTable`, default `TABLE` (`SWIGLU_TABLE` for timm's SwiGLU MLP).

    Returns:
        `{canonical key: NumPy array}`.

    Example:

    >>> import numpy as np
    >>> qkv = np.zeros((3 * 8, 8), "float32")
    >>> out = to_canonical({"blocks.0.attn.qkv.weight": qkv}, num_heads=2)
    >>> out["Transformer/encoderblock_0/MultiHeadDotProductAttention_1/key/kernel"].shape
    (8, 2, 4)
    """
    params, unknown = table.to_canonical(state, num_heads)
    params.update({key: state[key] for key in unknown})
    return params


def fold_prefix_rows(params, no_embed_class):
    """Brings the position rows of timm's prefix tokens to keras_vit's layout.

    Args:
        params: canonical dict from `to_canonical` (modified in place).
        no_embed_class: bool, timm's flag: the position embedding has no
            rows for the prefix tokens.

    Returns:
        `params`.

    Example:

    >>> import numpy as np
    >>> p = {"Transformer/posembed_input/pos_embedding": np.ones((1, 4, 2)),
    ...      "reg": np.zeros((1, 2, 2))}
    >>> p = fold_prefix_rows(p, no_embed_class=False)
    >>> p["Transformer/posembed_input/pos_embedding"].shape, p["reg"].tolist()
    ((1, 2, 2), [[[1.0, 1.0], [1.0, 1.0]]])
    """
    key = C.POSEMB
    if key not in params:
        return params
    posemb = params[key]
    rows = sum(k in params for k in C.POSITION_PREFIX_KEYS)
    registers = params[C.REG].shape[1] if C.REG in params else 0
    if no_embed_class:
        zeros = np.zeros(posemb.shape[:1] + (rows,) + posemb.shape[2:], posemb.dtype)
        params[key] = np.concatenate([zeros, posemb], axis=1)
    elif registers:
        # timm: [class][registers][patches] rows; registers keep no row.
        params[C.REG] = params[C.REG] + posemb[:, rows : rows + registers]
        params[key] = np.concatenate([posemb[:, :rows], posemb[:, rows + registers :]], axis=1)
    return params


# Width, depth, heads and MLP ratio of timm's ViT sizes.
_SIZES = {
    "tiny": (192, 12, 3, 4.0),
    "small": (384, 12, 6, 4.0),
    "base": (768, 12, 12, 4.0),
    "large": (1024, 24, 16, 4.0),
    "huge": (1280, 32, 16, 4.0),
    "giant": (1408, 40, 16, 48 / 11),
    "gigantic": (1664, 48, 16, 64 / 13),
}
_PLAIN = re.compile(r"^(vit|deit)_(?P<size>[a-z]+)_(?P<distilled>distilled_)?patch(?P<patch>\d+)_(?P<res>\d+)$")


def _size_args(size, sizes=None, **extra):
    dim, depth, heads, ratio = {**_SIZES, **(sizes or {})}[size]
    return dict(embed_dim=dim, depth=depth, num_heads=heads, mlp_ratio=ratio, **extra)


# Models whose names carry more than size, patch and resolution.
_NAMED = {
    "vit_base_patch16_224_miil": dict(_size_args("base"), patch_size=16, img_size=224, qkv_bias=False),
    "vit_base_patch16_gap_224": dict(
        _size_args("base"), num_heads=16, patch_size=16, img_size=224,
        class_token=False, global_pool="avg", fc_norm=False,
    ),
    "vit_base_patch16_reg4_gap_256": dict(
        _size_args("base"), patch_size=16, img_size=256, class_token=False,
        no_embed_class=True, global_pool="avg", reg_tokens=4,
    ),
}
for _res in (256, 384):
    _NAMED[f"vit_so150m_patch16_reg4_gap_{_res}"] = dict(
        embed_dim=896, depth=18, num_heads=14, mlp_ratio=2.572, patch_size=16,
        img_size=_res, class_token=False, reg_tokens=4, global_pool="avg", fc_norm=False,
    )
# Register-token models with LayerScale: (name, width, depth, heads, MLP ratio, registers).
_REGISTER = (
    ("vit_little_patch16_reg1_gap_256", 320, 14, 5, 5.6, 1),
    ("vit_little_patch16_reg4_gap_256", 320, 14, 5, 5.6, 4),
    ("vit_medium_patch16_reg1_gap_256", 512, 12, 8, 4.0, 1),
    ("vit_medium_patch16_reg4_gap_256", 512, 12, 8, 4.0, 4),
    ("vit_mediumd_patch16_reg4_gap_256", 512, 20, 8, 4.0, 4),
    ("vit_mediumd_patch16_reg4_gap_384", 512, 20, 8, 4.0, 4),
    ("vit_betwixt_patch16_reg1_gap_256", 640, 12, 10, 4.0, 1),
    ("vit_betwixt_patch16_reg4_gap_256", 640, 12, 10, 4.0, 4),
    ("vit_betwixt_patch16_reg4_gap_384", 640, 12, 10, 4.0, 4),
)
for _name, _dim, _depth, _heads, _ratio, _reg in _REGISTER:
    _NAMED[_name] = dict(
        embed_dim=_dim, depth=_depth, num_heads=_heads, mlp_ratio=_ratio, patch_size=16,
        img_size=int(_name.rsplit("_", 1)[1]), init_values=1e-5, class_token=False,
        no_embed_class=True, reg_tokens=_reg, global_pool="avg",
    )
# DINOv2 (LayerScale, 518 px; the register models' position embedding has no
# prefix rows; without a head the output is the pooled class token, resized
# as timm resizes, like the CLIP and SigLIP towers below). timm builds the
# giant with a SwiGLU MLP: not listed.
for _size in ("small", "base", "large"):
    _NAMED[f"vit_{_size}_patch14_dinov2"] = dict(
        _size_args(_size), patch_size=14, img_size=518, init_values=1e-5, family="dinov2"
    )
    _NAMED[f"vit_{_size}_patch14_reg4_dinov2"] = dict(
        _size_args(_size), patch_size=14, img_size=518, init_values=1e-5, reg_tokens=4,
        no_embed_class=True, family="dinov2",
    )

# CLIP image towers (timm's `vit_*_clip_*`): a LayerNorm before the blocks
# (`norm_pre`; the patch embedding then has no bias), LayerNorms of epsilon
# 1e-5, the class token through `norm` and `head` (the image-embedding
# projection for the CLIP-pretrained tags: num_classes 512, 768, ...). The
# `_quickgelu` names use OpenAI's QuickGELU, the others the erf GELU, also
# for weights trained with QuickGELU (timm's `.openai` Hub directories name
# `vit_*_clip_224` and note that the `_quickgelu` name gives the original
# results). `norm_eps` is keras_vit's spelling of timm's
# `norm_layer=partial(LayerNorm, eps=...)`, and `family` names the
# families keras_vit resizes as timm does (`position_interpolation="timm"`).
_CLIP_SIZES = dict(
    xsmall=(256, 10, 4, 4.0), medium=(512, 12, 8, 4.0), betwixt=(640, 12, 10, 4.0),
    base_plus=(896, 12, 14, 4.0),
)
# (size, patch, resolutions, resolutions with a `_quickgelu` name)
_CLIP = (
    ("xsmall", 16, (224,), ()), ("medium", 32, (224,), ()), ("medium", 16, (224,), ()),
    ("betwixt", 32, (224,), ()), ("base", 32, (224, 256, 384, 448), (224,)),
    ("base", 16, (224, 384), (224,)), ("base_plus", 16, (240,), ()),
    ("large", 14, (224, 336), (224, 336)), ("huge", 14, (224, 336, 378), (224, 378)),
    ("giant", 14, (224,), ()), ("gigantic", 14, (224, 378), (224,)),
)
for _size, _patch, _plain, _quick in _CLIP:
    _width, _, _plus = _size.partition("_")
    _stem = f"vit_{_width}_patch{_patch}{'_' + _plus if _plus else ''}_clip_"
    for _res, _act in [(r, None) for r in _plain] + [(r, "quick_gelu") for r in _quick]:
        _NAMED[_stem + ("quickgelu_" if _act else "") + str(_res)] = dict(
            _size_args(_size, _CLIP_SIZES), patch_size=_patch, img_size=_res,
            pre_norm=True, norm_eps=1e-5, act_layer=_act, family="clip",
        )
# SigLIP image towers (timm's `vit_*_siglip_*`): no class token, the
# attention-pool head (`attn_pool`, timm's `AttentionPoolLatent`) or, for the
# `_gap` names, the mean of the tokens after `norm`. timm gives some the tanh
# GELU and the others the erf GELU, model by model:
# (size, patch, MAP resolutions, `_gap`-only resolutions, act_layer).
_SIGLIP_SIZES = dict(so400m=(1152, 27, 16, 3.7362), giantopt=(1536, 40, 16, 4.0))
_SIGLIP = (
    ("base", 32, (256,), (), "gelu_tanh"), ("base", 16, (224, 256, 384, 512), (), None),
    ("large", 16, (256, 384), (), None), ("large", 16, (512,), (), "gelu_tanh"),
    ("so400m", 14, (224, 378, 384), (448, 896), None), ("so400m", 16, (256, 384, 512), (), "gelu_tanh"),
    ("giantopt", 16, (256, 384), (), "gelu_tanh"),
)
for _size, _patch, _map, _gap_only, _act in _SIGLIP:
    _common = dict(
        _size_args(_size, _SIGLIP_SIZES), patch_size=_patch, class_token=False, act_layer=_act,
        family="siglip",
    )
    for _res in _map:
        _NAMED[f"vit_{_size}_patch{_patch}_siglip_{_res}"] = dict(_common, img_size=_res, global_pool="map")
    for _res in _map + _gap_only:
        _NAMED[f"vit_{_size}_patch{_patch}_siglip_gap_{_res}"] = dict(
            _common, img_size=_res, global_pool="avg", fc_norm=False
        )

# AIMv2 (timm's `aimv2_*`): no class token, RMSNorm (epsilon 1e-5) in the
# blocks, after the patch embedding (`patch_embed.norm`) and after the
# blocks, the split SwiGLU MLP (`fc1_g`, `fc1_x`, `fc2`), no query, key,
# value, output or MLP biases, the mean of the tokens after `norm`; timm
# has no attention-pool head for it. `norm_layer`, `embed_norm_layer` and
# `mlp_layer` are keras_vit's spellings of timm's `partial(RmsNorm, ...)`
# and `SwiGLU`.
_AIMV2_SIZES = dict(large=(1024, 24, 8, 2.75), huge=(1536, 24, 12, 2.6667), **{"1b": (2048, 24, 16, 2.75)},
                    **{"3b": (3072, 24, 24, 2.6667)})
for _size in _AIMV2_SIZES:
    for _res in (224, 336, 448):
        _NAMED[f"aimv2_{_size}_patch14_{_res}"] = dict(
            _size_args(_size, _AIMV2_SIZES), patch_size=14, img_size=_res, class_token=False, fc_norm=False,
            global_pool="avg", qkv_bias=False, proj_bias=False, act_layer="silu", norm_layer="rmsnorm",
            embed_norm_layer="rmsnorm", mlp_layer="swiglu", norm_eps=1e-5, family="aimv2",
        )

# timm's VisionTransformer arguments, with timm's defaults: the one list of
# what a config's `model_args` may say.
TIMM_DEFAULTS = dict(
    img_size=224, patch_size=16, in_chans=3, num_classes=1000, global_pool="token",
    embed_dim=768, depth=12, num_heads=12, mlp_ratio=4.0, qkv_bias=True,
    class_token=True, reg_tokens=0, no_embed_class=False, fc_norm=None,
    act_layer=None, distilled=False, drop_rate=0.0, pos_drop_rate=0.0,
    proj_drop_rate=0.0, attn_drop_rate=0.0, drop_path_rate=0.0, init_values=None,
    pre_norm=False, final_norm=True, qk_norm=False, proj_bias=True,
    pos_embed="learn", dynamic_img_size=False, dynamic_img_pad=False,
    norm_layer=None, embed_layer=None, weight_init="", fix_init=False,
    patch_drop_rate=0.0, class_token_init=None, embed_norm_layer=None, mlp_layer=None,
)
# The arguments `model_arguments` reads (the dropout rates change training
# only); every other one must keep its default.
READ = frozenset((
    "img_size", "patch_size", "in_chans", "num_classes", "global_pool", "embed_dim", "depth",
    "num_heads", "mlp_ratio", "qkv_bias", "class_token", "reg_tokens", "no_embed_class",
    "fc_norm", "act_layer", "distilled", "init_values", "drop_rate", "pos_drop_rate",
    "proj_drop_rate", "attn_drop_rate", "drop_path_rate", "pre_norm", "proj_bias", "norm_layer",
    "embed_norm_layer", "mlp_layer",
))
# timm's `norm_layer` / `embed_norm_layer` (None: LayerNorm for the blocks,
# none after the patch embedding) and `mlp_layer` as keras_vit reads them.
_NORMS = {None: "layernorm", "layernorm": "layernorm", "rmsnorm": "rmsnorm"}
_MLPS = {None: "plain", "swiglu": "swiglu"}
# timm's `act_layer` -> keras_vit's `mlp_activation` (None: nn.GELU).
_ACTIVATIONS = {None: "gelu", "gelu": "gelu", "gelu_tanh": "gelu_tanh", "quick_gelu": "quick_gelu"}


def architecture_arguments(name):
    """timm's constructor arguments of the model function `name`.

    Raises:
        ValueError: for a name keras_vit does not know.

    Example:

    >>> args = architecture_arguments("deit_tiny_distilled_patch16_224")
    >>> args["embed_dim"], args["num_heads"], args["distilled"]
    (192, 3, True)
    """
    if name in _NAMED:
        return dict(_NAMED[name])
    match = _PLAIN.match(name)
    if match and match["size"] in _SIZES and (match["distilled"] is None or match[1] == "deit"):
        return _size_args(
            match["size"],
            patch_size=int(match["patch"]),
            img_size=int(match["res"]),
            distilled=bool(match["distilled"]),
        )
    raise ValueError(
        f"Cannot build timm architecture {name!r}: keras_vit knows the plain "
        f"vit_{{{','.join(_SIZES)}}}_patchP_R and deit_*[_distilled]_patchP_R "
        f"models and {len(_NAMED)} named ones (register-token, DINOv2, CLIP "
        f"`vit_*_clip_*`, SigLIP `vit_*_siglip_*`, ...); the closest: "
        f"{difflib.get_close_matches(name, _NAMED, n=5, cutoff=0.5)}. A config.json "
        "`model_args` entry with embed_dim, depth, num_heads and mlp_ratio "
        "describes any other plain ViT."
    )


def _unsupported(name, args):
    bad = {
        k: v for k, v in args.items()
        if k not in READ and (k not in TIMM_DEFAULTS or v != TIMM_DEFAULTS[k])
    }
    swiglu = args.get("mlp_layer") == "swiglu"
    if (args.get("act_layer") != "silu") if swiglu else (args.get("act_layer") not in _ACTIVATIONS):
        # keras_vit's SwiGLU gates with SiLU, as timm's with `act_layer="silu"`.
        bad["act_layer"] = f"{args['act_layer']} with mlp_layer={args.get('mlp_layer')!r}"
    if args.get("mlp_layer") not in _MLPS:
        bad["mlp_layer"] = args["mlp_layer"]
    if args.get("norm_layer") not in _NORMS:
        bad["norm_layer"] = args["norm_layer"]
    if args.get("embed_norm_layer") not in (None, args.get("norm_layer") or "layernorm"):
        # The patch norm is of the blocks' kind.
        bad["embed_norm_layer"] = f"{args['embed_norm_layer']} with norm_layer={args.get('norm_layer')!r}"
    if args.get("global_pool") not in ("token", "avg", "", "map"):
        bad["global_pool"] = args["global_pool"]
    if args.get("global_pool") == "avg" and args.get("class_token"):
        bad["global_pool"] = "avg with a class token"
    if any(s % p for s, p in zip(pair(args["img_size"], "img_size"), pair(args["patch_size"], "patch_size"))):
        # timm's patch convolution drops the last pixels (e.g.
        # vit_so400m_patch14_siglip_384; its `_378` twin is the exact one).
        bad["img_size"] = f"{args['img_size']} (not a multiple of patch_size={args['patch_size']})"
    prefix = args.get("class_token") or args.get("reg_tokens") or args.get("distilled")
    if args.get("global_pool") == "map" and prefix:
        # timm's attention pool leaves the prefix tokens out; keras_vit's
        # pools every token, so only a model without prefix tokens matches.
        bad["global_pool"] = "map with class, distillation or register tokens"
    if bad:
        raise ValueError(
            f"Cannot build timm model {name!r}: keras_vit has no equivalent of "
            + ", ".join(f"{k}={v!r}" for k, v in sorted(bad.items()))
            + " (query/key norms, other blocks, activations or norms are not "
            "ViT options keras_vit reads from timm)."
        )


def split_config(config):
    """`(architecture, model_args, pretrained_cfg, top level)` of a config dict."""
    if "pretrained_cfg" not in config:  # the older single-dict files
        config = dict(config)
        pretrained = {k: v for k, v in config.items() if k != "architecture"}
        return config["architecture"], {}, pretrained, config
    return (
        config["architecture"],
        dict(config.get("model_args") or {}),
        dict(config["pretrained_cfg"]),
        config,
    )


def model_arguments(config):
    """keras_vit `ViT` arguments for a timm Hub `config.json` dict.

    Returns:
        `(arguments, no_embed_class)`; the flag tells the reader how the
        position embedding is laid out (`fold_prefix_rows`).
    """
    name, overrides, pretrained, top = split_config(config)
    args = dict(TIMM_DEFAULTS)
    args.update(architecture_arguments(name))
    args.update(overrides)
    if "num_classes" in top:
        args["num_classes"] = top["num_classes"]
    if top.get("global_pool") is not None:
        args["global_pool"] = top["global_pool"]
    epsilon = float(args.pop("norm_eps", 1e-6))
    family = args.pop("family", None)
    _unsupported(name, args)
    pool = args["global_pool"]
    # timm: `fc_norm=None` normalises after pooling for the average pools only.
    fc_norm = (pool == "avg") if args["fc_norm"] is None else bool(args["fc_norm"])
    classes = args["num_classes"]
    out = C.encoder_arguments(
        args["img_size"],
        args["patch_size"],
        args["embed_dim"],
        args["depth"],
        args["num_heads"],
        int(args["embed_dim"] * args["mlp_ratio"]),
        channels=args["in_chans"],
        classifier="map" if pool == "map" else "gap" if pool == "avg" or not args["class_token"] else "token",
        pooled_norm=fc_norm,
        qkv_bias=bool(args["qkv_bias"]),
        num_register_tokens=args["reg_tokens"],
        distillation_token=bool(args["distilled"]),
        distillation_head=bool(args["distilled"]),
        layer_scale_init=None if args["init_values"] is None else float(args["init_values"]),
        layer_norm_epsilon=epsilon,
        include_top=bool(classes) and pool != "",
        classifier_activation=None,
    )
    if family:
        # timm's resize; the other timm layouts keep the official one, which
        # transformers' ViT writer accepts.
        out["position_interpolation"] = "timm"
    out.update(_block_options(args, out["include_top"], family))
    if out["include_top"]:
        out["classes"] = classes
        out["class_names"] = class_names(top, pretrained, classes)
    return out, bool(args["no_embed_class"])


def _block_options(args, include_top, family):
    """The activation, norms, MLP, biases, `norm_pre` and pooling arguments of timm `args`."""
    options = {
        "norm_kind": _NORMS[args["norm_layer"]],
        "patch_norm": args["embed_norm_layer"] is not None,
        "mlp_kind": _MLPS[args["mlp_layer"]],
        # timm's `proj_bias` is the attention output's and the MLP's.
        "attention_out_bias": bool(args["proj_bias"]),
        "mlp_bias": bool(args["proj_bias"]),
    }
    defaults = {**BlockConfig.defaults(), **EncoderConfig.defaults()}
    out = {k: v for k, v in options.items() if v != defaults[k]}
    if options["mlp_kind"] == "plain":
        out["mlp_activation"] = _ACTIVATIONS[args["act_layer"]]
    if args["pre_norm"]:
        # timm drops the patch embedding's bias when it adds `norm_pre`.
        out.update(pre_norm=True, patch_bias=False)
    pool = args["global_pool"]
    if not include_top and (pool == "map" or (family and pool)):
        # Without a head (num_classes=0) timm's output is the pooled
        # features: the DINOv2, CLIP and SigLIP towers give them (the other timm
        # layouts give the tokens), and MAP always (its weights are in the
        # checkpoint).
        out["pooling"] = pool
    return out


def class_names(top, pretrained, classes):
    """Names in head order from `label_names` and `label_descriptions`."""
    names = top.get("label_names", pretrained.get("label_names"))
    if isinstance(names, dict):
        names = [names.get(str(i), names.get(i)) for i in range(classes)]
    if not names or len(names) != classes or any(n is None for n in names):
        return None
    descriptions = top.get("label_descriptions", pretrained.get("label_descriptions")) or {}
    return [descriptions.get(n, n) for n in names]


def preprocessing(config):
    """A `Preprocessing` record from the `pretrained_cfg` of a config dict."""
    _, _, cfg, _ = split_config(config)
    size = tuple(cfg.get("input_size", (3, 224, 224))[1:])
    crop = float(cfg.get("crop_pct") or 1.0)
    # timm's eval transform: resize to floor(size / crop_pct) (the shorter
    # side when square, exactly otherwise; "squash" always exactly), then
    # crop the centre `size`.
    scaled = tuple(int(s / crop) for s in size)
    if cfg.get("crop_mode", "center") == "squash" or scaled[0] != scaled[1]:
        resize = scaled
    else:
        resize = scaled[0]
    interpolation = cfg.get("interpolation", "bicubic")
    return Preprocessing(
        mean=cfg.get("mean", (0.485, 0.456, 0.406)),
        std=cfg.get("std", (0.229, 0.224, 0.225)),
        image_size=size,
        resize=None if resize == size else resize,
        interpolation=interpolation if interpolation != "random" else "bicubic",
    )


def read(state, num_heads, path, no_embed_class=False, mlp_kind="plain"):
    """A timm state dict as a `Checkpoint` (the one timm read path).

    Args:
        state: `{timm key: NumPy array}`.
        num_heads: int, attention heads (the fused qkv weight does not say).
        path: the file it came from, for messages.
        no_embed_class: bool, timm's flag (see `fold_prefix_rows`).
        mlp_kind: "plain" (default) or "swiglu": the MLP's names.
    """
    try:
        params = to_canonical(state, num_heads, SWIGLU_TABLE if mlp_kind == "swiglu" else TABLE)
    except ValueError as error:
        raise ValueError(f"Cannot read checkpoint {os.fspath(path)!r}: {error}") from None
    return C.Checkpoint(os.fspath(path), "timm", fold_prefix_rows(params, no_embed_class), {})


def read_file(path, num_heads):
    """Reads a timm ViT state dict file (`.safetensors`, `.pth`, ...) into a `Checkpoint`."""
    return read(read_state_dict(path), num_heads, path)


def hub_source(directory, arguments, reader):
    """A `PresetSource` for a timm Hub directory, given its family's
    `arguments(config) -> (ViT arguments, layout)` and
    `reader(state, path, config, arguments, layout) -> Checkpoint`."""
    config = read_json(os.path.join(directory, "config.json"))
    args, layout = arguments(config)
    args["preprocessing"] = preprocessing(config).get_config()

    def read_weights(model):
        state, path = shards.read_state(directory)
        return reader(state, path, config, args, layout)

    return C.PresetSource("timm", directory, "ViT", args, read_weights)


def _read_hub_state(state, path, config, args, no_embed_class):
    return read(state, args["num_heads"], path, no_embed_class, args.get("mlp_kind", "plain"))


def preset_source(directory):
    """A `PresetSource` for a timm Hub directory."""
    return hub_source(directory, model_arguments, _read_hub_state)
