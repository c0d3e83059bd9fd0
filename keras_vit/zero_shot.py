"""Zero-shot classifiers: an image-text model's image tower with a head made
of class embeddings, as an ordinary `keras_vit.ViT`.

The head scores `logit_scale * cos(image, class) + logit_bias`: its kernel
is the classes' unit-length text embeddings times the logit scale, its bias
the logit bias, and the model scales its image embedding to unit length
before it (`l2_normalize=True`; CLIP's image projection becomes the layer
`projection`, `projection_dim`). With one prompt per class the outputs are
transformers' `logits_per_image` through the zero-shot pipeline's
activation: softmax over the classes (CLIP, MetaCLIP 2), a sigmoid per
class (SigLIP, SigLIP 2). Everything keras_vit offers an image classifier
then applies: `predict`, `decode_predictions(..., model=)`,
`save_to_preset`, `model.export` and its int8 export.
"""

import numpy as np

from keras_vit.validation import check_choice
from keras_vit.weights.canonical import HEAD, Checkpoint
from keras_vit.weights.loader import load_checkpoint
from keras_vit.weights.mapping import model_state

ACTIVATIONS = ("softmax", "sigmoid")
# An image tower's pooling -> the classifier that pools the same way.
_CLASSIFIERS = {"token": "token", "avg": "gap", "map": "map", "token_avg": "token_avg"}
PROJECTION = "projection/"


def class_head(class_embeddings, logit_scale, logit_bias=0.0):
    """The head's `(kernel (D, classes), bias (classes,))` for class embeddings.

    Args:
        class_embeddings: `(classes, D)`, scaled to unit length here.
        logit_scale: float, the multiplier of the cosine similarities.
        logit_bias: float, default 0: added to every class's score.

    Example:

    >>> kernel, bias = class_head(np.array([[3.0, 4.0]]), logit_scale=10.0, logit_bias=-1.0)
    >>> kernel.tolist(), bias.tolist()
    ([[6.0], [8.0]], [-1.0])
    """
    embeddings = np.asarray(class_embeddings, "float64")
    if embeddings.ndim != 2 or not np.all(np.isfinite(embeddings)):
        raise ValueError(
            "`class_embeddings` must be a finite (classes, D) array. "
            f"Received: shape {embeddings.shape}"
        )
    embeddings = embeddings / np.linalg.norm(embeddings, axis=-1, keepdims=True)
    kernel = (float(logit_scale) * embeddings.T).astype("float32")
    return kernel, np.full((embeddings.shape[0],), float(logit_bias), "float32")


def _classifier_config(config, projection_dim, classes, class_names, activation, name):
    """The zero-shot classifier's config from the image tower's (its output
    the image embedding: a projection head without bias, or a pooling)."""
    config = dict(config, classes=classes, class_names=list(class_names), classifier_activation=activation,
                  l2_normalize=True, projection_dim=projection_dim, name=name)
    if config["include_top"]:
        return config
    pooling = config["pooling"]
    if pooling not in _CLASSIFIERS:
        raise ValueError(
            "The image tower must pool its tokens into one embedding (pooling in "
            f"{tuple(_CLASSIFIERS)}). Received: pooling={pooling!r}"
        )
    config.update(include_top=True, classifier=_CLASSIFIERS[pooling], pooling=None)
    return config


def zero_shot_classifier(image_encoder, class_embeddings, class_names, logit_scale, logit_bias=0.0,
                         activation="softmax", name="zero_shot_classifier"):
    """A `keras_vit.ViT` classifier from an image tower and class embeddings.

    Args:
        image_encoder: a keras_vit model whose output is the image embedding:
            pooled features (`include_top=False` with a `pooling`), or a
            head without bias (CLIP's projection: it becomes the layer
            `projection`).
        class_embeddings: `(classes, D)` text embeddings of the classes, in
            the image embedding's space.
        class_names: one string per class.
        logit_scale: float, the multiplier of the cosine similarities.
        logit_bias: float, default 0.
        activation: "softmax" (default) or "sigmoid".
        name: the model's name.

    Returns:
        A new model of the image tower's class (its weights copied), with
        `classes`, `class_names` and `preprocessing` set.

    Raises:
        ValueError: for class embeddings of another width than the image
            embedding, a count of names that differs, or a tower whose head
            has a bias.

    Example:

    >>> import keras_vit, numpy as np
    >>> tower = keras_vit.ViT(image_size=16, patch_size=8, hidden_size=8, num_layers=1,
    ...                       num_heads=2, mlp_dim=8, include_top=False, pooling="token")
    >>> model = zero_shot_classifier(tower, np.eye(3, 8), ["cat", "dog", "bird"], 10.0)
    >>> model.class_names, model.l2_normalize
    (('cat', 'dog', 'bird'), True)
    """
    check_choice(activation, ACTIVATIONS, "activation")
    kernel, bias = class_head(class_embeddings, logit_scale, logit_bias)
    names = [str(n) for n in class_names]
    if len(names) != kernel.shape[1]:
        raise ValueError(
            f"`class_names` must name each of the {kernel.shape[1]} class embeddings. "
            f"Received: {len(names)} names"
        )
    width = image_encoder.output_shape[-1]
    if kernel.shape[0] != width:
        raise ValueError(
            f"The class embeddings must be as wide as the image embedding ({width}). "
            f"Received: class_embeddings of width {kernel.shape[0]}"
        )
    params = model_state(image_encoder)
    config = image_encoder.get_config()
    projection_dim = config.get("projection_dim")
    if config["include_top"]:
        if config.get("representation_size") is not None or config.get("distillation_head"):
            raise ValueError(
                "The image tower's head must be a projection without bias (CLIP's), not a "
                "classifier with a pre-logits layer or a distillation head. Received: "
                f"representation_size={config.get('representation_size')!r}, "
                f"distillation_head={config.get('distillation_head')!r}"
            )
        tower_bias = params.pop(HEAD + "bias")
        if np.any(tower_bias != 0):
            raise ValueError(
                "The image tower's head must be a projection without bias (CLIP's). Received: "
                f"a bias of largest magnitude {float(np.abs(tower_bias).max()):.3g}"
            )
        params[PROJECTION + "kernel"] = params.pop(HEAD + "kernel")
        projection_dim = config["classes"]
    config = _classifier_config(config, projection_dim, kernel.shape[1], names, activation, name)
    model = type(image_encoder).from_config(config)
    params[HEAD + "kernel"], params[HEAD + "bias"] = kernel, bias
    return load_checkpoint(model, Checkpoint(f"<zero-shot head of {image_encoder.name}>", "keras_vit", params))
