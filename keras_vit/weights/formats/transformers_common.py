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
