"""What the transformers family tables (DINOv2, CLIP, SigLIP, ViTMAE) share."""

# transformers `hidden_act` -> keras_vit `mlp_activation`.
ACTIVATIONS = {
    "gelu": "gelu",
    "gelu_new": "gelu_tanh",
    "gelu_pytorch_tanh": "gelu_tanh",
    "quick_gelu": "quick_gelu",
}
# keras_vit `mlp_activation` -> the `hidden_act` written.
HIDDEN_ACTS = {"gelu": "gelu", "gelu_tanh": "gelu_pytorch_tanh", "quick_gelu": "quick_gelu"}


def pair(value):
    """A config's `image_size`/`patch_size` (an int or a pair) as a pair.

    Example:

    >>> pair(14), pair([224, 160])
    ((14, 14), (224, 160))
    """
    return tuple(value) if isinstance(value, (list, tuple)) else (value, value)


def class_names(config):
    """Class names in head order from a config's `id2label`, or None when generic.

    Example:

    >>> class_names({"id2label": {"1": "dog", "0": "cat"}}), class_names({"id2label": {"0": "LABEL_0"}})
    (['cat', 'dog'], None)
    """
    id2label = config.get("id2label") or {}
    try:
        names = [id2label[k] for k in sorted(id2label, key=int)]
    except (TypeError, ValueError):
        return None
    if not names or all(n == f"LABEL_{i}" for i, n in enumerate(names)):
        return None
    return names


def label_config(names, classes):
    """The `id2label`/`label2id` entries of a config for a head of `classes`
    outputs named `names` (None: transformers' generic `LABEL_i`)."""
    names = list(names) if names else [f"LABEL_{i}" for i in range(classes)]
    return {
        "id2label": {str(i): n for i, n in enumerate(names)},
        "label2id": {n: i for i, n in enumerate(names)},
    }


def refuse(reason):
    """The error of a model a transformers directory cannot hold (nothing is written)."""
    return ValueError(f"transformers has no ViT that represents this model: {reason}.")


def has_class_token(config):
    """Whether a flat keras_vit model config prepends a class token."""
    class_token = config.get("class_token")
    return config.get("classifier", "token") == "token" if class_token is None else class_token


def square(config, architecture):
    """`(image side, patch side)` of a model config, for the transformers
    classes whose config holds one int each (their position table is a square grid).

    Raises:
        ValueError: naming the sizes when either is not square.
    """
    (height, width), (ph, pw) = pair(config["image_size"]), pair(config["patch_size"])
    if height != width or ph != pw:
        raise refuse(
            f"{architecture} takes square images and patches (one int each); "
            f"image_size={(height, width)}, patch_size={(ph, pw)}"
        )
    return height, ph


def refuse_layout(architecture, checks):
    """Raises `refuse` for the first `(failed, reason)` of `checks` that failed."""
    for failed, reason in checks:
        if failed:
            raise refuse(f"{architecture} {reason}")


def shape_checks(config):
    """`(failed, reason)` for what none of the CLIP, SigLIP and ViTMAE towers has."""
    return (
        ("resnet_layers" in config, "has no ResNet stem (a hybrid's resnet_layers)"),
        (config.get("num_register_tokens", 0),
         f"has no register tokens. Received: num_register_tokens={config.get('num_register_tokens')!r}"),
        (config.get("distillation_token", False), "has no distillation token. Received: distillation_token=True"),
        (config.get("representation_size") is not None,
         f"has no pre-logits layer. Received: representation_size={config.get('representation_size')!r}"),
    )


def vision_config(config, defaults):
    """The vision tower's config: `vision_config` of a two-tower `CLIPModel`/
    `SiglipModel` directory, else the config itself; fields it leaves out
    take the transformers class's `defaults`."""
    return {**defaults, **config.get("vision_config", config)}


def tower_config(config, architecture, model_type):
    """The `config.json` fields a ViT-shaped transformers vision tower shares
    (CLIP, SigLIP, SigLIP2, ViTMAE), for a keras_vit model config: the class,
    square sizes, widths, activation and norm epsilon."""
    size, patch = square(config, architecture)
    return {
        "architectures": [architecture],
        "model_type": model_type,
        "image_size": size,
        "patch_size": patch,
        "num_channels": config["input_shape"][-1],
        "hidden_size": config["hidden_size"],
        "intermediate_size": config["mlp_dim"],
        "num_hidden_layers": config["num_layers"],
        "num_attention_heads": config["num_heads"],
        "hidden_act": HIDDEN_ACTS[config["mlp_activation"]],
        "layer_norm_eps": config["layer_norm_epsilon"],
        "dtype": "float32",
    }
