"""timm's model arguments as keras_vit reads them: the table entry of a
model function, the arguments timm's `create_model` resolves for a Hub
`config.json`, and timm's names of norms, activations and MLPs.

The facts come from keras_vit's table of timm's model functions
(`keras_vit.weights.formats.timm_architectures`, generated from timm by
`tools/timm_table.py`); every timm reader (`keras_vit.weights.formats.timm`, the
timm readers of `keras_vit.families`) resolves a directory's arguments here and
refuses, by name, the ones it cannot build (`refuse`).
"""

import difflib

from keras_vit.weights.formats.timm_architectures import ARCHITECTURES, CLASS_DEFAULTS, TIMM_VERSION

# timm arguments that change training only (or only how timm pads or
# initialises), never the weights: every reader accepts any value.
TRAINING = frozenset(("drop_rate", "pos_drop_rate", "patch_drop_rate", "proj_drop_rate", "attn_drop_rate",
                      "drop_path_rate", "weight_init", "fix_init", "dynamic_img_size", "head_init_scale"))


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


def architecture_entry(name):
    """The table's entry of timm's model function `name` (`{"module", "cls", "args", "tags"}`).

    Raises:
        ValueError: for a name timm's ViT families do not have, with the closest.

    Example:

    >>> architecture_entry("deit_tiny_distilled_patch16_224")["args"]["embed_dim"]
    192
    """
    if name in ARCHITECTURES:
        return ARCHITECTURES[name]
    raise ValueError(
        f"Cannot build timm architecture {name!r}: timm {TIMM_VERSION} has no ViT-family model of that "
        f"name (keras_vit.list_models() lists them); the closest: "
        f"{difflib.get_close_matches(name, ARCHITECTURES, n=5, cutoff=0.5)}."
    )


def resolve(config):
    """`(architecture, timm class, arguments)` of a timm Hub config dict, as
    timm's `create_model` resolves them: the model function's arguments with
    `model_args` over them; then, where those do not set them, the
    `pretrained_cfg`'s `num_classes` (the top-level one first), `global_pool`,
    `in_chans` and, with `fixed_input_size`, `img_size` (timm's
    `_update_default_model_kwargs`); then the class's defaults. A config
    without `pretrained_cfg` takes the architecture's default one.

    Raises:
        ValueError: for an unknown architecture, or a `model_args` entry the
            class does not take (naming it).

    Example:

    >>> name, cls, args = resolve({"architecture": "vit_small_patch16_224", "num_classes": 10,
    ...                            "pretrained_cfg": {"input_size": [3, 32, 32], "fixed_input_size": True}})
    >>> cls, args["embed_dim"], args["img_size"], args["num_classes"]
    ('VisionTransformer', 384, [32, 32], 10)
    """
    name, overrides, pretrained, top = split_config(config)
    entry = architecture_entry(name)
    defaults = CLASS_DEFAULTS[entry["cls"]]
    unknown = sorted(set(overrides) - set(defaults) - set(entry["args"]))
    if unknown:
        raise ValueError(
            f"Cannot build timm model {name!r}: its `model_args` name arguments timm's {entry['cls']} "
            f"does not take: {unknown}."
        )
    kwargs = {**entry["args"], **overrides}
    cfg = {**entry["default_cfg"], **pretrained}
    if top.get("num_classes") is not None:
        cfg["num_classes"] = top["num_classes"]
    size = cfg.get("input_size")
    if cfg.get("num_classes") is not None and cfg["num_classes"] >= 0:
        kwargs.setdefault("num_classes", cfg["num_classes"])
    if cfg.get("global_pool") is not None:  # the top-level one only informs
        kwargs.setdefault("global_pool", cfg["global_pool"])
    if size is not None:
        kwargs.setdefault("in_chans", size[0])
        if cfg.get("fixed_input_size"):
            kwargs.setdefault("img_size", list(size[1:]))
    return name, entry["cls"], {**defaults, **kwargs}


def refuse(name, args, read, defaults, extra=None):
    """Raises a ValueError naming each argument of `args` a reader cannot
    build: those outside `read` that differ from `defaults`, and `extra`
    (`{argument: why}`)."""
    bad = {k: repr(v) for k, v in args.items() if k not in read and k in defaults and v != defaults[k]}
    bad.update(extra or {})
    if bad:
        raise ValueError(
            f"Cannot build timm model {name!r}: keras_vit has no equivalent of "
            + ", ".join(f"{k}={v}" for k, v in sorted(bad.items())) + "."
        )


# timm's norm layers by name, with the epsilon each takes by default
# (timm's own LayerNorm: 1e-6; torch's: 1e-5).
_NORM_KINDS = {"layernorm": ("layernorm", 1e-6), "rmsnorm": ("rmsnorm", 1e-6)}


def norm_of(value, default=("layernorm", 1e-6)):
    """`(keras_vit norm_kind, epsilon)` of a timm `norm_layer` value (a name,
    `{"fn": name, "eps": ...}` or None for `default`), or None when keras_vit
    has no such norm.

    Example:

    >>> norm_of({"fn": "LayerNorm", "eps": 1e-05}), norm_of("rmsnorm"), norm_of(None)
    (('layernorm', 1e-05), ('rmsnorm', 1e-06), ('layernorm', 1e-06))
    """
    if value is None:
        return default
    name, options = (value["fn"], {k: v for k, v in value.items() if k != "fn"}) if isinstance(value, dict) \
        else (value, {})
    found = _NORM_KINDS.get(str(name).lower().replace("_", ""))
    if found is None or set(options) - {"eps"}:
        return None
    return found[0], float(options.get("eps", found[1]))


# timm's `act_layer` names -> keras_vit's MLP activations (None: nn.GELU);
# "silu" is the gate of the SwiGLU MLPs.
ACTIVATIONS = {None: "gelu", "gelu": "gelu", "gelu_tanh": "gelu_tanh", "quick_gelu": "quick_gelu",
               "quickgelu": "quick_gelu", "silu": "silu"}


def activation_of(value):
    """keras_vit's name of a timm `act_layer` value, or None when it has none.

    Example:

    >>> activation_of("GELU"), activation_of("SiLU"), activation_of("relu")
    ('gelu', 'silu', None)
    """
    return ACTIVATIONS.get(None if value is None else str(value).lower())


def mlp_of(value, activation):
    """`(mlp_kind, table name, hidden ratio)` of a timm `mlp_layer` value, or
    None: timm's `Mlp` is plain, `SwiGLU` the split SwiGLU, `GluMlp` with
    SiLU (gate first) the packed one, whose hidden width is half its `fc1`.

    Example:

    >>> mlp_of("Mlp", "gelu"), mlp_of({"fn": "GluMlp", "act_layer": "SiLU", "gate_last": False}, "silu")
    (('plain', 'plain', 1.0), ('swiglu', 'packed', 0.5))
    """
    name = value["fn"] if isinstance(value, dict) else value
    options = {k: v for k, v in value.items() if k != "fn"} if isinstance(value, dict) else {}
    if name in ("Mlp", None) and not options and activation in ("gelu", "gelu_tanh", "quick_gelu"):
        return "plain", "plain", 1.0
    if str(name).lower() == "swiglu" and not options and activation == "silu":
        return "swiglu", "split", 1.0
    glu = options == {"act_layer": "SiLU", "gate_last": False} or (
        options == {"gate_last": False} and activation == "silu")
    if name == "GluMlp" and glu:
        return "swiglu", "packed", 0.5
    return None
