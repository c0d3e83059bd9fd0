"""What the transformers family tables (DINOv2, CLIP, SigLIP, ViTMAE) share."""

# transformers `hidden_act` -> keras_vit `mlp_activation`.
ACTIVATIONS = {
    "gelu": "gelu",
    "gelu_new": "gelu_tanh",
    "gelu_pytorch_tanh": "gelu_tanh",
    "quick_gelu": "quick_gelu",
}


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
