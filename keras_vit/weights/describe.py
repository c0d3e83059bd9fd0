"""What a `weights` argument is, and what it says about the model to build."""

import os
from dataclasses import dataclass

from keras_vit.weights import sources
from keras_vit.weights.mapping import CLS_KEY, POSEMB_KEY
from keras_vit.weights.posemb import square_grid


@dataclass(frozen=True)
class WeightsInfo:
    """Facts a checkpoint fixes about its model; None where unknown.

    Attributes:
        image_size: int or `(height, width)`, the resolution it was trained at.
        classes: int, the size of its classifier head.
        gelu_approximate: True (tanh GELU, Google numerics), False (erf).
        representation_size: int, width of its pre-logits layer.
    """

    image_size: object = None
    classes: object = None
    gelu_approximate: object = None
    representation_size: object = None


def _registry():
    from keras_vit.weights import registry

    return registry


def registered_names(architecture):
    """Registered weights names for an architecture (empty when none)."""
    if architecture is None:
        return []
    return list(_registry().weights_names(architecture))


def _looks_like_path(weights):
    name = weights.lower()
    return (
        os.sep in weights
        or "/" in weights
        or name.endswith(tuple(sources.FORMATS))
        or os.path.exists(weights)
    )


def resolve(weights, architecture):
    """Splits `weights` into `(path or None, registry record or None)`.

    Args:
        weights: a registered weights name or a checkpoint path.
        architecture: the architecture name (e.g. "B/16"), or None for a
            configuration outside the table.

    Returns:
        `(None, record)` for a registered name (not yet downloaded), or
        `(path, None)` for a file.

    Raises:
        ValueError: for a name that is not registered for `architecture`; the
            message lists the valid names.
    """
    if isinstance(weights, os.PathLike):
        return os.fspath(weights), None
    if not isinstance(weights, str):
        raise ValueError(
            "`weights` must be None, a registered weights name or a checkpoint "
            f"path. Received: weights={weights!r}"
        )
    names = registered_names(architecture)
    if weights in names:
        return None, _registry().get_record(architecture, weights)
    if _looks_like_path(weights):
        return weights, None
    valid = ", ".join(repr(n) for n in names) or (
        "none registered" if architecture else "none (registered weights exist "
        "only for the architectures of `keras_vit.models.ARCHITECTURES`)"
    )
    raise ValueError(
        f"Unknown weights name {weights!r} for architecture {architecture!r}. "
        f"Valid names: {valid}; or give the path of a checkpoint file "
        f"({', '.join(sorted(sources.FORMATS))}). Received: weights={weights!r}"
    )


def _stride(config):
    """Pixels per token along each axis: patch size times the stem stride."""
    patch = config.get("patch_size", 16)
    patch = (patch, patch) if isinstance(patch, int) else tuple(patch)
    stem = 1
    if config.get("resnet_layers") is not None:
        # Root conv and max-pool halve twice; every stage after the first once.
        stem = 4 * 2 ** max(len(tuple(config["resnet_layers"])) - 1, 0)
    return patch[0] * stem, patch[1] * stem


def _shapes(path, kind):
    """`(patch rows of the position embedding, classes, pre-logits width)`."""
    if kind == "npz":
        headers = sources.npz_headers(path)
        shapes = {key: shape for key, (shape, _) in headers.items()}
        shapes, _ = sources.strip_prefix(shapes)
        if POSEMB_KEY in shapes:
            rows = shapes[POSEMB_KEY][1] - int(CLS_KEY in shapes)
        else:
            rows = shapes["pos_embedding"][1] if "pos_embedding" in shapes else None
        head, pre = shapes.get("head/bias"), shapes.get("pre_logits/bias")
    else:
        if path.lower().endswith(".safetensors"):
            from safetensors import safe_open

            try:
                with safe_open(path, framework="numpy") as f:
                    shapes = {k: tuple(f.get_slice(k).get_shape()) for k in f.keys()}
            except Exception as error:  # safetensors raises its own types
                raise ValueError(
                    f"Cannot read checkpoint {path!r}: {type(error).__name__}: {error}"
                ) from None
        else:
            shapes = {k: v.shape for k, v in sources.read_state_dict(path).items()}
        pos = shapes.get("pos_embed")
        rows = pos[1] - int("cls_token" in shapes) if pos else None
        head, pre = shapes.get("head.bias"), shapes.get("pre_logits.fc.bias")
    return rows, (head[0] if head else None), (pre[0] if pre else None)


def describe_weights(weights, architecture_config):
    """What `weights` fixes about the model: resolution, classes, GELU.

    Reads as little as possible: a registry record, or only the array
    headers of an `.npz` / `.safetensors` file.

    Args:
        weights: a registered weights name or a checkpoint path.
        architecture_config: dict with `patch_size`, `hidden_size`,
            `num_layers`, `num_heads`, `mlp_dim` (and `resnet_layers`,
            `resnet_width` for hybrids).

    Returns:
        A `WeightsInfo`. Files: `.npz` -> tanh GELU (Google numerics),
        resolution from a square position-embedding grid, classes from the
        head; timm files -> erf GELU; Keras `.h5` -> all None.

    Example:

    >>> import numpy as np, os, tempfile
    >>> file = os.path.join(tempfile.mkdtemp(), "tiny.npz")
    >>> np.savez(file, **{"cls": np.zeros((1, 1, 8)),
    ...     "Transformer/posembed_input/pos_embedding": np.zeros((1, 17, 8)),
    ...     "head/bias": np.zeros(10)})
    >>> info = describe_weights(file, dict(patch_size=8))
    >>> info.image_size, info.classes, info.gelu_approximate
    (32, 10, True)
    """
    from keras_vit.models.variants import architecture_name

    path, record = resolve(weights, architecture_name(architecture_config))
    if record is not None:
        return WeightsInfo(
            image_size=getattr(record, "image_size", None),
            classes=getattr(record, "classes", None),
            gelu_approximate=getattr(record, "gelu_approximate", None),
            representation_size=getattr(record, "representation_size", None),
        )
    path = sources._check_file(path)
    kind = sources.checkpoint_format(path)
    if kind == "keras":
        return WeightsInfo()
    rows, classes, pre = _shapes(path, kind)
    side = square_grid(rows) if rows else None
    image_size = None
    if side:
        height, width = (side * s for s in _stride(architecture_config))
        image_size = height if height == width else (height, width)
    return WeightsInfo(
        image_size=image_size,
        classes=classes,
        gelu_approximate=kind == "npz",
        representation_size=pre,
    )
