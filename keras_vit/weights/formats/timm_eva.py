"""timm Hub directories of timm's `Eva` models (`timm/models/eva.py`):
DINOv3 (`vit_*_patch16_dinov3*`), EVA02 (`eva02_*`), Perception Encoder
(`vit_pe_core_*`) and RoPE-ViT (`vit_*_patch16_rope_*`) -> the canonical layout.

What the files hold (`config.json` as for every timm Hub directory,
`keras_vit.weights.formats.timm`; the tensors of timm's `Eva`):

- `cls_token`, `reg_token` (`num_reg_tokens`, after the class token),
  `pos_embed` (with rows for the prefix tokens, or none with
  `no_embed_class`; absent without `use_abs_pos_emb`), `patch_embed.proj`
  (no bias with `use_pre_transformer_norm`, which adds `norm_pre`),
  `rope.freqs` (RoPE-ViT mixed: `(2, depth, heads, head_dim / 2)`); the
  other rotary embeddings hold no tensor;
- blocks `blocks.{i}.`: `norm1`; attention `attn.` as `qkv` (fused, no
  bias) with `q_bias`/`v_bias` (the key's bias is a zero buffer) or
  separate `q_proj`, `k_proj` (no bias), `v_proj` (timm's `EvaAttention`),
  or `qkv` with its bias (`attn_type="rope"`: PE, RoPE-ViT); `attn.norm`
  (`scale_attn_inner`); `attn.proj`; `gamma_1`/`gamma_2` (LayerScale,
  `init_values`); `norm2`; the MLP `mlp.fc1`/`mlp.fc2` (GELU), or SwiGLU
  (`swiglu_mlp`) packed in `mlp.fc1` (gate rows first) or split in
  `mlp.fc1_g`/`mlp.fc1_x` (with `scale_mlp`'s `mlp.norm`, or
  `swiglu_align_to`), then `mlp.fc2`;
- `norm` (after the blocks) or `fc_norm` (after pooling: by default with
  `global_pool="avg"`), `attn_pool` (`global_pool="map"`, timm's
  `AttentionPoolLatent` on every token), `head`.

The architecture's arguments are not in the file: `ARCHITECTURES` keeps
timm's registered ones by name (read from `timm/models/eva.py`), and a
`config.json` `model_args` entry overrides them. The rotary settings map
onto `keras_vit.layers.rotary.RotarySpec`: `rope_type="dinov3"` is
keras_vit's "dinov3"; timm's `RotaryEmbeddingCat` is "eva02" (index
coordinates, `ref_feat_shape` the reference grid, `rope_grid_offset`,
`rope_grid_indexing="xy"` the "xy" order, `rope_temperature` the base,
`rope_rotate_half` the half layout), named "pe" or "axial" where those
rows say it; `rope_mixed_mode` is "mixed". Other image sizes resize the
position table as timm does (`position_interpolation="timm"`) and compute
the rotary tables for the new grid, as timm's `dynamic_img_size`.
"""

import math
import os

from keras_vit.layers.config import check_qkv_bias
from keras_vit.layers.rotary import VARIANTS, RotarySpec
from keras_vit.validation import pair
from keras_vit.weights import canonical as C
from keras_vit.weights.formats.conventions import torch_linear, torch_map_head_tail, torch_norm
from keras_vit.weights.formats.timm import class_names, fold_prefix_rows, hub_source, split_config
from keras_vit.weights.rules import RuleTable

# timm's `Eva.__init__` arguments with timm's defaults (`norm_eps`: the
# epsilon of `norm_layer`, timm's LayerNorm's 1e-6 unless the registered
# function passes another).
EVA_DEFAULTS = dict(
    img_size=224, patch_size=16, in_chans=3, num_classes=1000, global_pool="avg", embed_dim=768, depth=12,
    num_heads=12, qkv_bias=True, qkv_fused=True, mlp_ratio=4.0, swiglu_mlp=False, swiglu_align_to=0,
    scale_mlp=False, scale_attn_inner=False, attn_type="eva", drop_rate=0.0, pos_drop_rate=0.0,
    patch_drop_rate=0.0, proj_drop_rate=0.0, attn_drop_rate=0.0, drop_path_rate=0.0, norm_eps=1e-6,
    init_values=None, class_token=True, num_reg_tokens=0, no_embed_class=False, use_abs_pos_emb=True,
    use_rot_pos_emb=False, rope_type="cat", rope_grid_offset=0.0, rope_grid_indexing="ij",
    rope_temperature=10000.0, rope_rotate_half=False, rope_mixed_mode=False, use_post_norm=False,
    use_pre_transformer_norm=False, use_post_transformer_norm=None, use_fc_norm=None,
    attn_pool_num_heads=None, attn_pool_mlp_ratio=None, dynamic_img_size=False, dynamic_img_pad=False,
    ref_feat_shape=None, head_init_scale=0.001,
)
# Arguments that change training only (or how timm pads inputs keras_vit refuses anyway).
_TRAINING = ("drop_rate", "pos_drop_rate", "patch_drop_rate", "proj_drop_rate", "attn_drop_rate",
             "drop_path_rate", "dynamic_img_size", "dynamic_img_pad", "head_init_scale")

_SIZES = {"tiny": (192, 12, 3), "small": (384, 12, 6), "base": (768, 12, 12), "large": (1024, 24, 16)}
ARCHITECTURES = {}
# DINOv3: class token and four registers, no position table, DINOv3's
# rotary embedding (half layout), LayerScale, LayerNorm 1e-5, the mean of
# the patch tokens after `norm` (no `fc_norm`); `_qkvb`: q/v biases.
_DINOV3 = dict(
    patch_size=16, init_values=1e-5, rope_type="dinov3", rope_temperature=100.0, rope_rotate_half=True,
    use_rot_pos_emb=True, use_abs_pos_emb=False, num_reg_tokens=4, use_fc_norm=False, norm_eps=1e-5,
)
for _name, _dim, _depth, _heads, _swiglu in (
    ("small", 384, 12, 6, False), ("small_plus", 384, 12, 6, True), ("base", 768, 12, 12, False),
    ("large", 1024, 24, 16, False), ("huge_plus", 1280, 32, 20, True),
):
    for _suffix, _bias in (("", False), ("_qkvb", True)):
        ARCHITECTURES[f"vit_{_name}_patch16_dinov3{_suffix}"] = dict(
            _DINOV3, embed_dim=_dim, depth=_depth, num_heads=_heads, qkv_bias=_bias,
            **(dict(swiglu_mlp=True, swiglu_align_to=8) if _swiglu else {}),
        )
# EVA02: class token, position table, rotary embedding on a 16 x 16
# reference grid, SwiGLU at ratio 4 * 2 / 3 (tiny, small: packed, fused
# qkv; base, large: split q/k/v and the MLP's norm), mean pooling with
# `fc_norm`; the CLIP towers also normalise the attention output and pool
# the class token after `norm`.
_EVA02 = dict(mlp_ratio=4 * 2 / 3, swiglu_mlp=True, use_rot_pos_emb=True, ref_feat_shape=(16, 16))
for _size in ("tiny", "small"):
    _dim, _depth, _heads = _SIZES[_size]
    for _res in (224, 336):
        ARCHITECTURES[f"eva02_{_size}_patch14_{_res}"] = dict(
            _EVA02, img_size=_res, patch_size=14, embed_dim=_dim, depth=_depth, num_heads=_heads)
for _size in ("base", "large"):
    _dim, _depth, _heads = _SIZES[_size]
    for _res in (224, 448):
        ARCHITECTURES[f"eva02_{_size}_patch14_{_res}"] = dict(
            _EVA02, img_size=_res, patch_size=14, embed_dim=_dim, depth=_depth, num_heads=_heads,
            qkv_fused=False, scale_mlp=True)
ARCHITECTURES["eva02_base_patch16_clip_224"] = dict(
    _EVA02, img_size=224, patch_size=16, embed_dim=768, depth=12, num_heads=12, qkv_fused=False,
    scale_mlp=True, scale_attn_inner=True, global_pool="token", num_classes=512)
for _res in (224, 336):
    ARCHITECTURES[f"eva02_large_patch14_clip_{_res}"] = dict(
        _EVA02, img_size=_res, patch_size=14, embed_dim=1024, depth=24, num_heads=16, qkv_fused=False,
        scale_mlp=True, scale_attn_inner=True, global_pool="token", num_classes=768)
# Perception Encoder (core): `norm_pre` (patch embedding without bias), the
# rotary embedding in "xy" order, offset by the class token, on the
# pretraining grid, LayerNorm 1e-5, `attn_pool` with 8 heads.
ARCHITECTURES["vit_pe_core_base_patch16_224"] = dict(
    img_size=224, patch_size=16, embed_dim=768, depth=12, num_heads=12, global_pool="map",
    attn_type="rope", use_pre_transformer_norm=True, use_rot_pos_emb=True, ref_feat_shape=(14, 14),
    rope_grid_offset=1.0, rope_grid_indexing="xy", attn_pool_num_heads=8, attn_pool_mlp_ratio=4.0,
    norm_eps=1e-5, num_classes=1024)
# RoPE-ViT: class token, axial rotary embedding ("xy", temperature 100) or
# the mixed one (learned frequencies, initial temperature 10), LayerScale,
# the class token after `norm`; `_ape` adds a position table without prefix rows.
_ROPE_VIT = dict(
    patch_size=16, img_size=224, attn_type="rope", init_values=1e-5, global_pool="token", use_abs_pos_emb=False,
    use_rot_pos_emb=True, rope_grid_indexing="xy", rope_temperature=100.0, use_fc_norm=False)
for _size in ("small", "base", "large"):
    _dim, _depth, _heads = _SIZES[_size]
    for _kind, _extra in (
        ("", {}), ("mixed_", dict(rope_temperature=10.0, rope_mixed_mode=True)),
        ("ape_", dict(use_abs_pos_emb=True, no_embed_class=True)),
        ("mixed_ape_", dict(rope_temperature=10.0, rope_mixed_mode=True, use_abs_pos_emb=True,
                            no_embed_class=True)),
    ):
        ARCHITECTURES[f"vit_{_size}_patch16_rope_{_kind}224"] = dict(
            _ROPE_VIT, embed_dim=_dim, depth=_depth, num_heads=_heads, **_extra)


def is_eva(config):
    """Whether a timm Hub `config.json` dict names one of `ARCHITECTURES`."""
    return split_config(config)[0] in ARCHITECTURES


def resolve(config):
    """timm's arguments for a config dict: the registered ones, `model_args`
    over them, then the top-level `num_classes` and `global_pool`.

    Raises:
        ValueError: naming each argument keras_vit has no equivalent for.
    """
    name, overrides, _, top = split_config(config)
    args = {**EVA_DEFAULTS, **ARCHITECTURES[name], **overrides}
    if "num_classes" in top:
        args["num_classes"] = top["num_classes"]
    if top.get("global_pool") is not None:
        args["global_pool"] = top["global_pool"]
    unknown = sorted(set(args) - set(EVA_DEFAULTS))
    bad = {k: args[k] for k in unknown}
    if args["use_post_norm"]:
        bad["use_post_norm"] = True
    if args["global_pool"] not in ("avg", "token", "map", ""):
        bad["global_pool"] = args["global_pool"]
    fc_norm, post_norm = norms(args)
    if fc_norm == post_norm:
        bad["use_fc_norm"] = f"{fc_norm} with use_post_transformer_norm={post_norm} (one final norm is read)"
    if bad:
        raise ValueError(
            f"Cannot build timm model {name!r}: keras_vit has no equivalent of "
            + ", ".join(f"{k}={v!r}" for k, v in sorted(bad.items())) + "."
        )
    return args


def norms(args):
    """`(fc_norm, post norm)`: timm's defaults, `fc_norm` for the mean pool."""
    fc_norm = args["use_fc_norm"] if args["use_fc_norm"] is not None else args["global_pool"] == "avg"
    post = args["use_post_transformer_norm"]
    return bool(fc_norm), bool(not fc_norm if post is None else post)


def mlp_width(args):
    """The MLP's hidden width: `int(embed_dim * mlp_ratio)`, rounded up to
    `swiglu_align_to` for the aligned SwiGLU."""
    width = int(args["embed_dim"] * args["mlp_ratio"])
    align = args["swiglu_align_to"] if args["swiglu_mlp"] else 0
    return math.ceil(width / align) * align if align else width


def split_mlp(args):
    """Whether a SwiGLU MLP is held split (`fc1_g`, `fc1_x`) rather than packed."""
    return bool(args["swiglu_mlp"] and (args["scale_mlp"] or args["swiglu_align_to"]))


def _variant(args, name):
    """The keras_vit rotary variant and settings of timm's rotary arguments."""
    if args["rope_type"] == "dinov3":
        variant = "dinov3"
        spec = RotarySpec("centered", args["rope_temperature"], "yx",
                          "half" if args["rope_rotate_half"] else "interleaved")
    else:
        variant = "mixed" if args["rope_mixed_mode"] else (
            "pe" if name.startswith("vit_pe_") else "axial" if "_rope_" in name else "eva02")
        reference = None if args["ref_feat_shape"] is None or variant == "mixed" else args["ref_feat_shape"]
        spec = RotarySpec(
            "mixed" if variant == "mixed" else "index", args["rope_temperature"],
            "xy" if args["rope_grid_indexing"] == "xy" else "yx",
            "half" if args["rope_rotate_half"] else "interleaved", float(args["rope_grid_offset"]),
            None if reference is None else pair(reference, "ref_feat_shape"),
        )
    row = VARIANTS[variant]
    settings = {k: v for k, v in spec.get_config().items() if getattr(row, k) != v}
    return variant, settings or None


def model_arguments(config):
    """keras_vit `ViT` arguments for a timm Hub `config.json` dict of an Eva model.

    Returns:
        `(arguments, no_embed_class)`, as `keras_vit.weights.formats.timm.model_arguments`.

    Example:

    >>> args, _ = model_arguments({"architecture": "vit_base_patch16_dinov3", "num_classes": 0,
    ...                            "pretrained_cfg": {}})
    >>> args["rope"], args["qkv_bias"], args["classifier"], args["pooling"], args["num_register_tokens"]
    ('dinov3', False, 'gap', 'avg', 4)
    """
    name = split_config(config)[0]
    args = resolve(config)
    fc_norm, _ = norms(args)
    pool = args["global_pool"]
    eva_attention = args["attn_type"] == "eva"
    bias = bool(args["qkv_bias"])
    out = C.encoder_arguments(
        args["img_size"], args["patch_size"], args["embed_dim"], args["depth"], args["num_heads"],
        mlp_width(args), channels=args["in_chans"],
        classifier={"avg": "gap", "map": "map"}.get(pool, "token"),
        class_token=bool(args["class_token"]),
        num_register_tokens=int(args["num_reg_tokens"]),
        pooled_norm=fc_norm,
        # EvaAttention's key has no bias; AttentionRope's has.
        qkv_bias=check_qkv_bias((bias, False, bias) if eva_attention else bias),
        attention_out_norm=bool(args["scale_attn_inner"]),
        mlp_kind="swiglu" if args["swiglu_mlp"] else "plain",
        mlp_norm=bool(args["scale_mlp"]),
        mlp_activation="gelu",
        layer_scale_init=None if args["init_values"] is None else float(args["init_values"]),
        layer_norm_epsilon=float(args["norm_eps"]),
        pre_norm=bool(args["use_pre_transformer_norm"]),
        patch_bias=not args["use_pre_transformer_norm"],
        position_embedding="learned" if args["use_abs_pos_emb"] else "none",
        position_interpolation="timm",
        classifier_activation=None,
    )
    if args["use_rot_pos_emb"]:
        out["rope"], out["rope_settings"] = _variant(args, name)
    if pool == "map":  # `AttentionPoolLatent`'s own heads and MLP ratio, where they differ
        heads = args["attn_pool_num_heads"] or args["num_heads"]
        width = int(args["embed_dim"] * (args["attn_pool_mlp_ratio"] or args["mlp_ratio"]))
        out["map_num_heads"] = None if heads == args["num_heads"] else heads
        out["map_mlp_dim"] = None if width == out["mlp_dim"] else width
    classes = args["num_classes"]
    out["include_top"] = bool(classes) and pool != ""
    if out["include_top"]:
        _, _, pretrained, top = split_config(config)
        out.update(classes=classes, class_names=class_names(top, pretrained, classes))
    elif pool:
        # Without a head timm's output is the pooled features.
        out["pooling"] = pool
    return out, bool(args["no_embed_class"])


_B = "blocks.{i}."
_A = C.ATTENTION
_COMMON = (
    ("cls_token", C.CLS),
    ("reg_token", C.REG),
    ("pos_embed", C.POSEMB),
    ("rope.freqs", "rope/frequencies"),
    *torch_linear("patch_embed.proj", C.EMBEDDING, "conv"),
    *torch_norm("norm_pre", C.PRE_NORM),
    *torch_norm(_B + "norm1", C.NORM_1),
    *torch_linear(_B + "attn.qkv", _A + "{part}/", "qkv_kernel", "qkv_bias"),
    (_B + "attn.q_bias", _A + "query/bias", "heads_bias"),
    (_B + "attn.v_bias", _A + "value/bias", "heads_bias"),
    *(rule for p, n in (("q", "query"), ("k", "key"), ("v", "value"))
      for rule in torch_linear(_B + f"attn.{p}_proj", _A + f"{n}/", "heads_in", "heads_bias")),
    *torch_norm(_B + "attn.norm", _A + "norm/"),
    *torch_linear(_B + "attn.proj", _A + "out/", "heads_out"),
    (_B + "gamma_1", C.ATTENTION_SCALE),
    (_B + "gamma_2", C.MLP_SCALE),
    *torch_norm(_B + "norm2", C.NORM_2),
    *torch_norm(_B + "mlp.norm", C.BLOCK + "MlpBlock_3/norm/"),
    *torch_norm("norm", C.ENCODER_NORM),
    *torch_norm("fc_norm", C.POOLED_NORM),
    ("attn_pool.latent", C.MAP_HEAD + "probe"),
    *torch_linear("attn_pool.q", C.MAP_ATTENTION + "query/", "heads_in", "heads_bias"),
    *torch_linear("attn_pool.kv", C.MAP_ATTENTION + "{part}/", "kv_kernel", "kv_bias"),
    *torch_linear("attn_pool.proj", C.MAP_ATTENTION + "out/", "heads_out"),
    *torch_map_head_tail("attn_pool.norm", "attn_pool.mlp.fc1", "attn_pool.mlp.fc2"),
    *torch_linear("head", C.HEAD),
)
# The MLP: plain, SwiGLU packed in `fc1` (gate rows first), or split.
TABLES = {
    "plain": RuleTable(_COMMON + torch_linear(_B + "mlp.fc1", C.MLP_IN) + torch_linear(_B + "mlp.fc2", C.MLP_OUT)),
    "packed": RuleTable(
        _COMMON + torch_linear(_B + "mlp.fc1", C.MLP_GATE_UP, "gate_up_kernel", "gate_up_bias")
        + torch_linear(_B + "mlp.fc2", C.MLP_DOWN)),
    "split": RuleTable(
        _COMMON + torch_linear(_B + "mlp.fc1_g", C.MLP_GATE_UP.replace("{part}", "gate"))
        + torch_linear(_B + "mlp.fc1_x", C.MLP_GATE_UP.replace("{part}", "up"))
        + torch_linear(_B + "mlp.fc2", C.MLP_DOWN)),
}


def table(args):
    """The `RuleTable` of resolved timm arguments."""
    if not args["swiglu_mlp"]:
        return TABLES["plain"]
    return TABLES["split" if split_mlp(args) else "packed"]


def read(state, config, path):
    """A timm Eva state dict as a `Checkpoint` (keys no rule knows kept for the loader to report)."""
    args = resolve(config)
    _, no_embed_class = model_arguments(config)
    # The attention pool splits its own heads.
    pool = {k: v for k, v in state.items() if k.startswith("attn_pool.")}
    blocks = {k: v for k, v in state.items() if k not in pool}
    params, unknown = {}, []
    try:
        for part, heads in ((blocks, args["num_heads"]), (pool, args["attn_pool_num_heads"] or args["num_heads"])):
            read_params, read_unknown = table(args).to_canonical(part, heads)
            params.update(read_params)
            unknown += read_unknown
    except ValueError as error:
        raise ValueError(f"Cannot read checkpoint {os.fspath(path)!r}: {error}") from None
    params.update({k: state[k] for k in unknown})
    return C.Checkpoint(os.fspath(path), "timm", fold_prefix_rows(params, no_embed_class), {})


def preset_source(directory):
    """A `PresetSource` for a timm Hub directory of an Eva model."""
    return hub_source(directory, model_arguments, lambda state, path, config, args, _: read(state, config, path))
