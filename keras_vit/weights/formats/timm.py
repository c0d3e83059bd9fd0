"""timm ViT state dicts and timm Hub directories <-> the canonical layout.

State dicts keep PyTorch conventions: `Linear` weights are `(out, in)`, the
patch embedding is an OIHW convolution, and the attention's query, key and
value projections are fused into one `qkv` Linear whose output splits as
`(3, heads, head_dim)`. `TABLE` renames each key and names the transform
that brings its tensor to the canonical layout (and back); `tables` gives
the table of a model's MLP (plain `fc1`/`fc2`, SwiGLU split in
`fc1_g`/`fc1_x`, or packed in `fc1`, gate rows first: timm's `GluMlp`).

Prefix tokens: timm orders them class token, distillation token (DeiT) or
register tokens (`reg_token`, `(1, R, D)`), then the patches. Its position
embedding has a row for each prefix token, or for none of them
(`no_embed_class=True`: added to the patches before the prefix tokens are
prepended). keras_vit gives the class and distillation tokens a row and the
register tokens none; `fold_prefix_rows` converts exactly (a zero row adds
nothing; a register token's row is a constant that folds into the token).

A timm Hub directory holds `model.safetensors` (or `pytorch_model.bin`) and
a `config.json`:

- `architecture`: the timm model function, e.g. "vit_base_patch16_224";
  its arguments (width, depth, heads, ...) are not in the file: they are
  in keras_vit's table of timm's model functions,
  `keras_vit.weights.formats.timm_architectures` (generated from timm by
  `tools/timm_table.py`), over the model class's defaults; `model_args`,
  when present, overrides them (`resolve`);
- `num_classes`, `global_pool`, `label_names` (list, or `{index: name}`) and
  `label_descriptions` (`{name: description}`);
- `pretrained_cfg`: `input_size` `[C, H, W]`, `crop_pct`, `crop_mode`,
  `interpolation`, `mean`, `std`. Older files put all of it at the top level.

This module reads timm's `VisionTransformer` (and DeiT's distilled
subclass): norms and activations by timm's names, LayerScale (`ls1`,
`ls2`), register tokens, `fc_norm`, `final_norm=False`, the CLIP towers'
`norm_pre` (the patch embedding then has no bias), SigLIP's attention pool
(`attn_pool`, timm's `AttentionPoolLatent`: the probe `latent`, `q`, the
fused `kv` split as `(2, heads, head_dim)`, `proj`, then
`x + mlp(norm(x))`: keras_vit's `MapHead`), the residual post-norm block
(`ResPostBlock`), the parallel blocks (`ParallelScalingBlock`,
`DiffParallelScalingBlock`: their fused `in_proj` is split into the MLP's
first Linear and `qkv` before the table reads it) and differential
attention (`attn_layer="diff"`: `lambda_q1`, ..., `sub_norm`; the fused
`qkv` splits into twice the heads). Without a head (`num_classes=0`)
timm's output is the pooled features. timm's `Eva` models, the relative-position
and hybrid ViTs and SAM's encoders are read by their families' modules
(`keras_vit.families.eva`, `vit_relpos`, `vit_hybrid`, `sam`); `keras_vit.families.timm_zoo` chooses.

Images of another size: the plain ViTs resize their position embedding as
the official code does (keras_vit's default, which transformers' ViT writer
accepts); the other timm layouts as timm's `resample_abs_pos_embed`
(antialiased bicubic in float32, `position_interpolation="timm"`).
"""

import os

import numpy as np

from keras_vit.weights.formats.timm_architectures import CLASS_DEFAULTS
from keras_vit.validation import pair
from keras_vit.weights import canonical as C
from keras_vit.weights import shards
from keras_vit.weights.files import read_json, read_state_dict
from keras_vit.weights.formats.conventions import torch_linear, torch_map_head_tail, torch_norm
from keras_vit.weights.formats.timm_args import (  # noqa: F401  (the readers' shared names)
    ACTIVATIONS, TRAINING, activation_of, architecture_entry, mlp_of, norm_of, refuse, resolve, split_config,
)
from keras_vit.weights.record import Preprocessing
from keras_vit.weights.rules import RuleTable

BLOCK = "blocks.{i}."
_ATTENTION = (
    *torch_linear(BLOCK + "attn.qkv", C.ATTENTION + "{part}/", "qkv_kernel", "qkv_bias"),
    *torch_norm(BLOCK + "attn.norm", C.ATTENTION + "norm/"),
    *torch_linear(BLOCK + "attn.proj", C.ATTENTION + "out/", "heads_out"),
    # Differential attention's lambdas and the norm of each head's output.
    *((BLOCK + f"attn.lambda_{n}", C.ATTENTION + f"lambda_{n}") for n in ("q1", "k1", "q2", "k2")),
    (BLOCK + "attn.sub_norm.weight", C.ATTENTION + "sub_norm/scale"),
    # A relative-position MLP of the block's own (`vision_transformer_relpos`).
    *torch_linear(BLOCK + "attn.rel_pos.mlp.fc1", C.ATTENTION + "rel_pos/Dense_0/"),
    *torch_linear(BLOCK + "attn.rel_pos.mlp.fc2", C.ATTENTION + "rel_pos/Dense_1/"),
)
_RULES = (
    ("cls_token", C.CLS),
    ("dist_token", C.DIST),
    ("reg_token", C.REG),
    ("pos_embed", C.POSEMB),
    *torch_linear("patch_embed.proj", C.EMBEDDING, "conv"),
    *torch_norm("patch_embed.norm", C.EMBEDDING_NORM),
    *torch_norm(BLOCK + "norm1", C.NORM_1),
    *_ATTENTION,
    *torch_norm(BLOCK + "norm2", C.NORM_2),
    (BLOCK + "ls1.gamma", C.ATTENTION_SCALE),
    (BLOCK + "ls2.gamma", C.MLP_SCALE),
    *torch_norm(BLOCK + "mlp.norm", C.BLOCK + "MlpBlock_3/norm/"),
    *torch_norm("norm_pre", C.PRE_NORM),
    *torch_norm("norm", C.ENCODER_NORM),
    # timm's `AttentionPoolLatent`: the probe, its query, key and value
    # (one fused Linear), output, norm and MLP.
    ("attn_pool.latent", C.MAP_HEAD + "probe"),
    *torch_linear("attn_pool.q", C.MAP_ATTENTION + "query/", "heads_in", "heads_bias"),
    *torch_linear("attn_pool.kv", C.MAP_ATTENTION + "{part}/", "kv_kernel", "kv_bias"),
    *torch_linear("attn_pool.proj", C.MAP_ATTENTION + "out/", "heads_out"),
    *torch_map_head_tail("attn_pool.norm", "attn_pool.mlp.fc1", "attn_pool.mlp.fc2"),
    # The relative-position MLP shared by every block.
    *torch_linear("shared_rel_pos.mlp.fc1", "rel_pos/mlp/Dense_0/"),
    *torch_linear("shared_rel_pos.mlp.fc2", "rel_pos/mlp/Dense_1/"),
    *torch_linear("pre_logits.fc", C.PRE_LOGITS),
    *torch_norm("fc_norm", C.POOLED_NORM),
    *torch_linear("head", C.HEAD),
    *torch_linear("head_dist", C.HEAD_DIST),
)
# The MLP's tables: plain, timm's `SwiGLU` (`fc1_g` the gate, `fc1_x` the
# up projection: AIMv2) and its `GluMlp` (both in `fc1`, gate rows first:
# DINOv2-giant).
TABLES = {
    "plain": RuleTable(_RULES + torch_linear(BLOCK + "mlp.fc1", C.MLP_IN) + torch_linear(BLOCK + "mlp.fc2", C.MLP_OUT)),
    "split": RuleTable(
        _RULES
        + torch_linear(BLOCK + "mlp.fc1_g", C.MLP_GATE_UP.replace("{part}", "gate"))
        + torch_linear(BLOCK + "mlp.fc1_x", C.MLP_GATE_UP.replace("{part}", "up"))
        + torch_linear(BLOCK + "mlp.fc2", C.MLP_DOWN)
    ),
    "packed": RuleTable(
        _RULES + torch_linear(BLOCK + "mlp.fc1", C.MLP_GATE_UP, "gate_up_kernel", "gate_up_bias")
        + torch_linear(BLOCK + "mlp.fc2", C.MLP_DOWN)
    ),
}
TABLE = TABLES["plain"]
SWIGLU_TABLE = TABLES["split"]


def to_canonical(state, num_heads, table=TABLE):
    """Converts a timm ViT state dict to canonical keys and layouts.

    Keys no rule knows are kept under their timm name, so that strict
    loading reports them as unexpected.

    Args:
        state: `{timm key: NumPy array}`.
        num_heads: int, number of attention heads.
        table: the `RuleTable`, default `TABLE` (see `TABLES`).

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


# The VisionTransformer arguments `model_arguments` reads (`TRAINING`, of
# `timm_args`, change training only).
READ = frozenset((
    "img_size", "patch_size", "in_chans", "num_classes", "global_pool", "embed_dim", "depth", "num_heads",
    "mlp_ratio", "qkv_bias", "class_token", "reg_tokens", "no_embed_class", "fc_norm", "act_layer",
    "init_values", "pre_norm", "final_norm", "proj_bias", "norm_layer", "embed_norm_layer", "mlp_layer",
    "block_fn", "attn_layer", "scale_attn_norm", "scale_mlp_norm", "pos_embed",
))
# timm's blocks -> keras_vit's block options.
BLOCKS = {
    "Block": {},
    "ResPostBlock": {"norm_position": "post"},
    "ParallelScalingBlock": {"parallel": True},
    "DiffParallelScalingBlock": {"parallel": True, "differential_attention": True},
}
_ATTENTIONS = {"Attention": {}, "attn": {}, "diff": {"differential_attention": True}}
# timm's `global_pool` -> keras_vit's pooling ("" and None: the tokens).
POOLS = {"token": "token", "avg": "avg", "max": "max", "map": "map"}


def _checks(args):
    """`{argument: why}` for the VisionTransformer arguments keras_vit cannot build."""
    bad = {}
    pool = args["global_pool"]
    if pool not in POOLS and pool != "":
        bad["global_pool"] = repr(pool)
    if args["pool_include_prefix"]:
        bad["pool_include_prefix"] = "True"
    if args["embed_layer"] != "PatchEmbed":
        bad["embed_layer"] = repr(args["embed_layer"])
    if args["pos_embed"] not in ("learn", "", "none"):
        bad["pos_embed"] = repr(args["pos_embed"])
    if args["block_fn"] not in BLOCKS:
        bad["block_fn"] = repr(args["block_fn"])
    if args["attn_layer"] not in _ATTENTIONS:
        bad["attn_layer"] = repr(args["attn_layer"])
    if args["qk_norm"]:
        bad["qk_norm"] = "True"
    if args["dynamic_img_pad"]:
        bad["dynamic_img_pad"] = "True"
    if norm_of(args["norm_layer"]) is None:
        bad["norm_layer"] = repr(args["norm_layer"])
    if args["embed_norm_layer"] not in (None, args["norm_layer"]):
        # keras_vit's patch norm is of the blocks' kind and epsilon.
        bad["embed_norm_layer"] = f"{args['embed_norm_layer']!r} with norm_layer={args['norm_layer']!r}"
    activation = activation_of(args["act_layer"])
    if activation is None or mlp_of(args["mlp_layer"], activation) is None:
        bad["act_layer"] = f"{args['act_layer']!r} with mlp_layer={args['mlp_layer']!r}"
    prefix = args["class_token"] or args["reg_tokens"] or args.get("distilled")
    if pool == "map" and prefix:
        # timm's attention pool leaves the prefix tokens out; keras_vit's
        # pools every token, so only a model without prefix tokens matches.
        bad["global_pool"] = "'map' with class, distillation or register tokens"
    return bad


def norms(args):
    """`(norm_kind, epsilon, fc_norm, final norm)` of VisionTransformer arguments:
    timm normalises after pooling (`fc_norm`) by default for the average
    and max pools; `final_norm=False` leaves out whichever it would be."""
    kind, epsilon = norm_of(args["norm_layer"])
    pool = args["global_pool"]
    fc_norm = pool in ("avg", "max") if args["fc_norm"] is None else bool(args["fc_norm"])
    return kind, epsilon, fc_norm, bool(args["final_norm"])


def model_arguments(config):
    """keras_vit `ViT` arguments for a timm Hub `config.json` dict of a
    `VisionTransformer` (or DeiT's distilled one).

    Returns:
        `(arguments, layout)`: `layout` tells the reader how the state dict
        is laid out (`no_embed_class`, the MLP's `table`, the `heads` the
        fused projections split into).

    Example:

    >>> args, layout = model_arguments({"architecture": "deit3_small_patch16_224", "pretrained_cfg": {}})
    >>> args["layer_scale_init"], args["mlp_activation"], layout["no_embed_class"]
    (1e-06, 'gelu', True)
    """
    name, cls, args = resolve(config)
    if cls not in ("VisionTransformer", "VisionTransformerDistilled"):
        raise ValueError(f"timm builds {name!r} with its {cls}, not its VisionTransformer: "
                         "keras_vit.families.timm_zoo.model_arguments reads every timm model.")
    args.setdefault("distilled", cls == "VisionTransformerDistilled")
    refuse(name, args, READ | TRAINING, CLASS_DEFAULTS[cls], _checks(args))
    kind, epsilon, fc_norm, final = norms(args)
    activation = activation_of(args["act_layer"])
    mlp_kind, table, ratio = mlp_of(args["mlp_layer"], activation)
    options = {**BLOCKS[args["block_fn"]], **_ATTENTIONS[args["attn_layer"]]}
    distilled = bool(args["distilled"])
    pool = classifier(args["global_pool"], args["class_token"])
    # Stated only where it differs from the classifier's own (a token
    # classifier has one, the others none): the other formats then see the
    # model as a plain ViT of that classifier.
    class_token = None if bool(args["class_token"]) == (pool == "token") else bool(args["class_token"])
    out = C.encoder_arguments(
        args["img_size"], args["patch_size"], args["embed_dim"], args["depth"], args["num_heads"],
        int(int(args["embed_dim"] * args["mlp_ratio"]) * ratio), channels=args["in_chans"],
        classifier=pool, class_token=class_token, pooled_norm=fc_norm and final, final_norm=final,
        qkv_bias=bool(args["qkv_bias"]), num_register_tokens=args["reg_tokens"],
        distillation_token=distilled, distillation_head=distilled,
        # timm's `init_values` only initialises the post-norm block's norms.
        layer_scale_init=None if not args["init_values"] or options.get("norm_position") else float(
            args["init_values"]),
        layer_norm_epsilon=epsilon, norm_kind=kind, mlp_kind=mlp_kind,
        patch_norm=args["embed_norm_layer"] is not None,
        # timm's `proj_bias` is the attention output's and the MLP's.
        attention_out_bias=bool(args["proj_bias"]), mlp_bias=bool(args["proj_bias"]),
        attention_out_norm=bool(args["scale_attn_norm"]), mlp_norm=bool(args["scale_mlp_norm"]),
        position_embedding="learned" if args["pos_embed"] == "learn" else "none",
        classifier_activation=None, **options,
    )
    if mlp_kind == "plain":
        out["mlp_activation"] = activation
    if args["pre_norm"]:
        # timm drops the patch embedding's bias when it adds `norm_pre`.
        out.update(pre_norm=True, patch_bias=False)
    if not _plain(args):
        out["position_interpolation"] = "timm"
    if any(s % p for s, p in zip(pair(args["img_size"], "img_size"), pair(args["patch_size"], "patch_size"))):
        # timm's patch convolution drops the last pixels (vit_so400m_patch14_siglip_384).
        out["crop_to_patches"] = True
    out.update(head(config, args["global_pool"], args["num_classes"]))
    layout = dict(no_embed_class=bool(args["no_embed_class"]), table=table,
                  heads=args["num_heads"] * (2 if options.get("differential_attention") else 1),
                  parallel=bool(options.get("parallel")))
    return out, layout


def _plain(args):
    """Whether a VisionTransformer is one transformers' ViT and DeiT classes
    hold: its position embedding is then resized as the official code does."""
    plain = dict(block_fn="Block", attn_layer="Attention", mlp_layer="Mlp", act_layer=None, norm_layer=None,
                 embed_norm_layer=None, init_values=None, reg_tokens=0, pre_norm=False, global_pool="token",
                 class_token=True, final_norm=True)
    return all(args[k] == v for k, v in plain.items())


def classifier(pool, class_token):
    """keras_vit's `classifier` for timm's `global_pool` (a model without
    head keeps the one its tokens allow)."""
    if pool in ("avg", "max"):
        return "gap"
    if pool == "map":
        return "map"
    return "token" if class_token else "gap"


def head(config, pool, classes):
    """The head's keras_vit arguments for timm's `global_pool` and
    `num_classes`: a classifier, or without one timm's pooled features
    (the tokens with `global_pool=""`)."""
    pool = POOLS.get(pool)
    if classes and pool is not None:
        if pool == "max":
            raise ValueError("Cannot build a timm model with global_pool='max' and a head: keras_vit's "
                             "classifiers pool the class token, the mean or by attention.")
        _, _, pretrained, top = split_config(config)
        return dict(include_top=True, classes=classes, class_names=class_names(top, pretrained, classes))
    # Without a head timm's output is the pooled features.
    return dict(include_top=False, **({} if pool is None else {"pooling": pool}))


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


def unfuse_parallel(state):
    """A state dict of timm's parallel blocks in the names of its plain
    ones: `in_norm` is `norm1`; `in_proj` (MLP rows first, then q, k, v)
    splits into `mlp.fc1` and `attn.qkv` (`mlp_bias`, without qkv biases,
    is `mlp.fc1.bias`); `attn_out_proj`, `mlp_out_proj` are `attn.proj`,
    `mlp.fc2`, or the fused `out_proj` splits into them (its bias goes to
    `attn.proj`, `mlp.fc2` gets a zero one); `ls.gamma` scales both
    branches (`ls1`, `ls2`)."""
    out = {}
    for key, value in state.items():
        block, dot, rest = key.partition(".")
        index, _, leaf = rest.partition(".")
        if block != "blocks" or not dot:
            out[key] = value
            continue
        b = f"blocks.{index}."
        if leaf.startswith("in_norm."):
            out[b + "norm1." + leaf[len("in_norm."):]] = value
        elif leaf in ("in_proj.weight", "in_proj.bias"):
            dim = state[b + "in_proj.weight"].shape[1]
            hidden = value.shape[0] - 3 * dim
            part = leaf.split(".")[1]
            out[b + "mlp.fc1." + part], out[b + "attn.qkv." + part] = value[:hidden], value[hidden:]
        elif leaf == "mlp_bias":
            out[b + "mlp.fc1.bias"] = value
        elif leaf.startswith(("attn_out_proj.", "mlp_out_proj.")):
            name = "attn.proj." if leaf.startswith("attn_") else "mlp.fc2."
            out[b + name + leaf.split(".")[1]] = value
        elif leaf == "out_proj.weight":
            dim = value.shape[0]
            out[b + "attn.proj.weight"], out[b + "mlp.fc2.weight"] = value[:, :dim], value[:, dim:]
        elif leaf == "out_proj.bias":
            out[b + "attn.proj.bias"], out[b + "mlp.fc2.bias"] = value, np.zeros_like(value)
        elif leaf == "ls.gamma":
            out[b + "ls1.gamma"], out[b + "ls2.gamma"] = value, value
        elif leaf.startswith(("lambda_", "sub_norm.")):
            out[b + "attn." + leaf] = value
        else:
            out[key] = value
    return out


def read(state, num_heads, path, no_embed_class=False, table="plain", parallel=False):
    """A timm state dict as a `Checkpoint` (the one timm read path).

    Args:
        state: `{timm key: NumPy array}`.
        num_heads: int, the heads the fused projections split into.
        path: the file it came from, for messages.
        no_embed_class: bool, timm's flag (see `fold_prefix_rows`).
        table: the MLP's table, a key of `TABLES`.
        parallel: bool, whether the blocks are timm's parallel ones (see
            `unfuse_parallel`).
    """
    if parallel:
        state = unfuse_parallel(state)
    try:
        params = to_canonical(state, num_heads, TABLES[table])
    except ValueError as error:
        raise ValueError(f"Cannot read checkpoint {os.fspath(path)!r}: {error}") from None
    return C.Checkpoint(os.fspath(path), "timm", fold_prefix_rows(params, no_embed_class), {})


def read_file(path, num_heads):
    """Reads a timm ViT state dict file (`.safetensors`, `.pth`, ...) into a `Checkpoint`."""
    return read(read_state_dict(path), num_heads, path)


def hub_source(directory, arguments, reader, model_class="ViT", config=None):
    """A `PresetSource` for a timm Hub directory, given its family's
    `arguments(config) -> (ViT arguments, layout)` and
    `reader(state, path, config, arguments, layout) -> Checkpoint`;
    `config`: its `config.json` dict, already read (None: read here)."""
    config = read_json(os.path.join(directory, "config.json")) if config is None else config
    args, layout = arguments(config)
    args["preprocessing"] = preprocessing(config).get_config()

    def read_weights(model):
        state, path = shards.read_state(directory)
        return reader(state, path, config, args, layout)

    return C.PresetSource("timm", directory, model_class, args, read_weights)


def read_hub_state(state, path, config, args, layout):
    """`hub_source`'s reader of a timm ViT state dict, as `model_arguments` lays it out."""
    return read(state, layout["heads"], path, layout["no_embed_class"], layout["table"], layout["parallel"])


def preset_source(directory, config=None):
    """A `PresetSource` for a timm Hub directory of a `VisionTransformer`
    (`config`: its `config.json` dict, None: read here)."""
    return hub_source(directory, model_arguments, read_hub_state, config=config)
