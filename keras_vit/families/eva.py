"""EVA and the other families timm builds with its `Eva` class
(`timm/models/eva.py`): timm Hub directories of EVA (`eva_*`), EVA02
(`eva02_*`), Perception Encoder (`vit_pe_*`), RoPE-ViT
(`vit_*_patch16_rope_*`) and DINOv3 (`vit_*_patch16_dinov3*`) -> the
canonical layout.

The tensor names below are the `Eva` class's, shared by those families;
what is DINOv3's own (its rotary settings, `dinov3.timm_rotary`) sits with
its transformers and keras-hub readers in `keras_vit.families.dinov3`.

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

The architecture's arguments are not in the file: keras_vit's table of
timm's model functions (`keras_vit.weights.formats.timm_architectures`) keeps
them by name, and a `config.json` `model_args` entry overrides them
(`keras_vit.weights.formats.timm.resolve`). `use_post_norm` is the
residual post-norm block (`norm_position="post"`, no LayerScale), and both
final norms off (`use_fc_norm=False`, `use_post_transformer_norm=False`:
Perception Encoder's language and spatial towers) is `final_norm=False`. The rotary settings map
onto `keras_vit.layers.rotary.RotarySpec` by `ROTARY_TYPES`:
`rope_type="dinov3"` is keras_vit's "dinov3"; timm's `RotaryEmbeddingCat` is "eva02" (index
coordinates, `ref_feat_shape` the reference grid, `rope_grid_offset`,
`rope_grid_indexing="xy"` the "xy" order, `rope_temperature` the base,
`rope_rotate_half` the half layout), named "pe" or "axial" where those
rows say it; `rope_type="mixed"` is "mixed". Other image sizes resize the
position table as timm does (`position_interpolation="timm"`) and compute
the rotary tables for the new grid, as timm's `dynamic_img_size`.
"""

import math
import os

import numpy as np

from keras_vit.families import dinov3
from keras_vit.layers.config import check_qkv_bias
from keras_vit.layers.rotary import VARIANTS, RotarySpec
from keras_vit.validation import pair
from keras_vit.weights import canonical as C
from keras_vit.weights.formats.conventions import torch_linear, torch_map_head_tail, torch_norm
from keras_vit.weights.formats.timm_architectures import ARCHITECTURES, CLASS_DEFAULTS
from keras_vit.weights.formats.timm import (
    TRAINING, classifier, fold_prefix_rows, head, hub_source, norm_of, refuse, split_config,
)
from keras_vit.weights.formats.timm import resolve as timm_resolve
from keras_vit.weights.rules import RuleTable

# The Eva arguments `model_arguments` reads (the others must keep their
# defaults); `TRAINING` (timm's module) and the RoPE coordinate jitters
# change training only.
_READ = frozenset((
    "img_size", "patch_size", "in_chans", "num_classes", "global_pool", "embed_dim", "depth", "num_heads",
    "num_kv_heads", "qkv_bias", "qkv_fused", "mlp_ratio", "swiglu_mlp", "swiglu_align_to", "scale_mlp",
    "scale_attn_inner", "attn_type", "norm_layer", "init_values", "class_token", "num_reg_tokens",
    "no_embed_class", "use_abs_pos_emb", "use_rot_pos_emb", "rope_type", "rope_grid_offset",
    "rope_grid_indexing", "rope_temperature", "rope_rotate_half", "use_post_norm", "use_pre_transformer_norm",
    "use_post_transformer_norm", "use_fc_norm", "attn_pool_num_heads", "attn_pool_mlp_ratio", "ref_feat_shape",
    "qk_norm", "attn_only_layer_scale",
))
_TRAINING = TRAINING | {"rope_shift_coords", "rope_jitter_coords", "rope_rescale_coords", "dynamic_img_pad"}


def is_eva(config):
    """Whether a timm Hub `config.json` dict names one of timm's `Eva` models."""
    entry = ARCHITECTURES.get(split_config(config)[0])
    return entry is not None and entry["cls"] == "Eva"


def resolve(config):
    """timm's Eva arguments for a config dict (`keras_vit.weights.formats.timm.resolve`).

    Raises:
        ValueError: naming each argument keras_vit has no equivalent for.
    """
    name, cls, args = timm_resolve(config)
    extra = {}
    if args["global_pool"] not in ("avg", "token", "map", ""):
        extra["global_pool"] = repr(args["global_pool"])
    fc_norm, post_norm = norms(args)
    if fc_norm and post_norm:
        extra["use_fc_norm"] = f"{fc_norm} with use_post_transformer_norm={post_norm} (one final norm is read)"
    if norm_of(args["norm_layer"]) is None:
        extra["norm_layer"] = repr(args["norm_layer"])
    if args["use_rot_pos_emb"] and args["rope_type"] not in ROTARY_TYPES:
        extra["rope_type"] = repr(args["rope_type"])
    heads = kv_heads(args)
    if any(h is not None and h != args["num_heads"] for h in heads) and (
            args["attn_type"] != "rope" or args["qkv_fused"] or any(h is None or args["num_heads"] % h for h in heads)):
        # timm's grouped-query attention: `AttentionRope` with separate projections.
        extra["num_kv_heads"] = f"{args['num_kv_heads']!r} (grouped-query attention needs attn_type='rope', " \
                                "qkv_fused=False and counts dividing num_heads)"
    refuse(name, args, _READ | _TRAINING, CLASS_DEFAULTS[cls], extra)
    return args


def kv_heads(args):
    """The key/value heads of each block (None: `num_heads`), from timm's
    `num_kv_heads` (None, an int, or one per block)."""
    value = args["num_kv_heads"]
    return tuple(value) if isinstance(value, list) else (value,) * args["depth"]


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


def _cat_rotary(args):
    """`(candidate variants, RotarySpec)` of timm's `RotaryEmbeddingCat`
    (`rope_type="cat"`: EVA02, Perception Encoder, RoPE-ViT axial) or the
    learned-frequency `RotaryEmbeddingMixed` (`rope_type="mixed"`)."""
    mixed = args["rope_type"] == "mixed"
    reference = None if args["ref_feat_shape"] is None or mixed else args["ref_feat_shape"]
    spec = RotarySpec(
        "mixed" if mixed else "index", args["rope_temperature"],
        "xy" if args["rope_grid_indexing"] == "xy" else "yx",
        "half" if args["rope_rotate_half"] else "interleaved", float(args["rope_grid_offset"]),
        None if reference is None else pair(reference, "ref_feat_shape"),
    )
    return ("mixed",) if mixed else ("eva02", "pe", "axial"), spec


# timm's `rope_type` -> `(candidate keras_vit variants, RotarySpec)` of the
# resolved arguments; `resolve` refuses any other type.
ROTARY_TYPES = {"cat": _cat_rotary, "mixed": _cat_rotary, "dinov3": dinov3.timm_rotary}


def _variant(args):
    """The keras_vit rotary variant and settings of timm's rotary arguments:
    the variant of `VARIANTS` whose row needs the fewest settings changed."""
    candidates, spec = ROTARY_TYPES[args["rope_type"]](args)
    config = spec.get_config()
    changes = {v: {k: x for k, x in config.items() if getattr(VARIANTS[v], k) != x} for v in candidates}
    variant = min(candidates, key=lambda v: len(changes[v]))
    return variant, changes[variant] or None


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
    args = resolve(config)
    fc_norm, post_norm = norms(args)
    kind, epsilon = norm_of(args["norm_layer"])
    pool = args["global_pool"]
    eva_attention = args["attn_type"] == "eva"
    bias = bool(args["qkv_bias"])
    post = bool(args["use_post_norm"])
    out = C.encoder_arguments(
        args["img_size"], args["patch_size"], args["embed_dim"], args["depth"], args["num_heads"],
        mlp_width(args), channels=args["in_chans"],
        classifier=classifier(pool, args["class_token"]),
        class_token=bool(args["class_token"]),
        num_register_tokens=int(args["num_reg_tokens"]),
        pooled_norm=fc_norm,
        final_norm=fc_norm or post_norm,
        # EvaAttention's key has no bias; AttentionRope's has.
        qkv_bias=check_qkv_bias((bias, False, bias) if eva_attention else bias),
        attention_out_norm=bool(args["scale_attn_inner"]),
        mlp_kind="swiglu" if args["swiglu_mlp"] else "plain",
        mlp_norm=bool(args["scale_mlp"]),
        mlp_activation="gelu",
        # timm's post-norm block has no LayerScale (it ignores `init_values`);
        # with `attn_only_layer_scale` the MLP's is read as ones.
        layer_scale_init=None if args["init_values"] is None or post else float(args["init_values"]),
        qk_norm=bool(args["qk_norm"]),
        norm_position="post" if post else "pre",
        layer_norm_epsilon=epsilon,
        norm_kind=kind,
        pre_norm=bool(args["use_pre_transformer_norm"]),
        patch_bias=not args["use_pre_transformer_norm"],
        position_embedding="learned" if args["use_abs_pos_emb"] else "none",
        position_interpolation="timm",
        classifier_activation=None,
    )
    heads = tuple(args["num_heads"] if h is None else h for h in kv_heads(args))
    if any(h != args["num_heads"] for h in heads):
        out["num_kv_heads"] = heads
    if args["use_rot_pos_emb"]:
        out["rope"], out["rope_settings"] = _variant(args)
    if pool == "map":  # `AttentionPoolLatent`'s own heads and MLP ratio, where they differ
        heads = args["attn_pool_num_heads"] or args["num_heads"]
        width = int(args["embed_dim"] * (args["attn_pool_mlp_ratio"] or args["mlp_ratio"]))
        out["map_num_heads"] = None if heads == args["num_heads"] else heads
        out["map_mlp_dim"] = None if width == out["mlp_dim"] else width
    out.update(head(config, pool, args["num_classes"]))
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
    *torch_norm(_B + "attn.q_norm", _A + "qk_norm/query_norm/"),
    *torch_norm(_B + "attn.k_norm", _A + "qk_norm/key_norm/"),
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


def _grouped_key_values(state, args):
    """`(canonical key and value projections, the rest of state)`: timm's
    `k_proj`/`v_proj` of the blocks with fewer key/value heads than query
    heads, split by the head width (the tables split by the query heads)."""
    width = args["embed_dim"] // args["num_heads"]
    params, rest = {}, dict(state)
    for i, heads in enumerate(kv_heads(args)):
        if heads is None or heads == args["num_heads"]:
            continue
        for source, target in (("k_proj", "key"), ("v_proj", "value")):
            weight, bias = rest.pop(f"blocks.{i}.attn.{source}.weight"), rest.pop(f"blocks.{i}.attn.{source}.bias", None)
            prefix = C.block(_A, i) + f"{target}/"
            params[prefix + "kernel"] = weight.T.reshape(weight.shape[1], heads, width)
            if bias is not None:
                params[prefix + "bias"] = bias.reshape(heads, width)
    return params, rest


def read(state, config, path):
    """A timm Eva state dict as a `Checkpoint` (keys no rule knows kept for the loader to report)."""
    args = resolve(config)
    _, no_embed_class = model_arguments(config)
    params, state = _grouped_key_values(state, args)
    # The attention pool splits its own heads.
    pool = {k: v for k, v in state.items() if k.startswith("attn_pool.")}
    blocks = {k: v for k, v in state.items() if k not in pool}
    unknown = []
    try:
        for part, heads in ((blocks, args["num_heads"]), (pool, args["attn_pool_num_heads"] or args["num_heads"])):
            read_params, read_unknown = table(args).to_canonical(part, heads)
            params.update(read_params)
            unknown += read_unknown
    except ValueError as error:
        raise ValueError(f"Cannot read checkpoint {os.fspath(path)!r}: {error}") from None
    if args["attn_only_layer_scale"] and args["init_values"] is not None and not args["use_post_norm"]:
        # LayerScale on the attention branch alone: the MLP's scales are ones.
        for i in range(args["depth"]):
            params[C.block(C.MLP_SCALE, i)] = np.ones(args["embed_dim"], "float32")
    params.update({k: state[k] for k in unknown})
    return C.Checkpoint(os.fspath(path), "timm", fold_prefix_rows(params, no_embed_class), {})


def preset_source(directory, config=None):
    """A `PresetSource` for a timm Hub directory of an Eva model (`config`:
    its `config.json` dict, None: read here)."""
    return hub_source(directory, model_arguments, lambda state, path, config, args, _: read(state, config, path),
                      config=config)
