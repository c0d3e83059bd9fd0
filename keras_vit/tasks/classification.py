"""One call from image files to named probabilities: `keras_vit.classify`.

`classify(model, images)` reads the images (file paths, http(s) URLs, PIL images or
arrays), prepares them as the model's checkpoint expects (its
`Preprocessing` record: the resize, filter and centre crop, then the
scaling; `keras_vit.preprocessing.resize_and_crop`), runs the model and
names the most probable classes (`keras_vit.tasks.images.load_images` is
its first half, for code that runs the model itself). `decode_predictions`
names the top classes of predictions a program computed itself.
"""

import collections
import warnings
import weakref

import keras
import numpy as np

from keras_vit import labels
from keras_vit.tasks.images import load_images, preprocessing_record, read_batches
from keras_vit.validation import check_fraction, check_positive_int, check_verbose

Prediction = collections.namedtuple("Prediction", ["index", "name", "probability"])
Prediction.__doc__ = """One class of a `classify` result: `(index, name, probability)`.

`name` is None where the model records no class names (`model.class_names`)."""

# The models `classify` has warned about their missing class names: once each.
_UNNAMED_WARNED = weakref.WeakSet()


def _probabilities(model, outputs):
    activation = getattr(model, "classifier_activation", "softmax")
    outputs = np.asarray(outputs, "float64")
    if activation is None:
        shifted = np.exp(outputs - outputs.max(axis=-1, keepdims=True))
        return shifted / shifted.sum(axis=-1, keepdims=True)
    if activation in ("softmax", "sigmoid"):
        return outputs
    raise ValueError(
        f"Model {model.name!r} ends in classifier_activation={activation!r}; `classify` "
        "reads logits (None), 'softmax' or 'sigmoid' outputs."
    )


def _names(model, classes):
    """The class names the model records, or None for each class (with a
    warning, once per model): a head's width alone never names its classes."""
    own = getattr(model, "class_names", None)
    if own is not None and len(own) == classes:
        return tuple(own)
    try:
        first = model not in _UNNAMED_WARNED
        _UNNAMED_WARNED.add(model)
    except TypeError:  # not weakly referenceable: warn each time
        first = True
    if first:
        imagenet = (
            f" For ImageNet weights, say so: class_names={labels.list_name(classes)!r}."
            if classes in labels.NUM_CLASSES else ""
        )
        warnings.warn(
            f"Model {getattr(model, 'name', model)!r} records no class names: `classify` "
            "reports class indices, with name None. Set them (one string per class): "
            "`model.class_names = [...]`, or `class_names=` when building or loading it "
            "(command line: --class-names)."
            + imagenet,
            UserWarning,
            stacklevel=3,
        )
    return (None,) * classes


def trained_classifier(model):
    """`model` loaded (`keras_vit.load_model`: a model, a preset or a file)
    as a classifier with trained weights.

    Raises:
        ValueError: when its weights are random (the reason named) or it
            has no classifier head.
    """
    from keras_vit.presets.resolver import load_model, untrained_reason

    reason = untrained_reason(model)
    if reason is not None:
        raise ValueError(reason)
    model = load_model(model)
    if not getattr(model, "include_top", True):
        raise ValueError(f"Model {model.name!r} has no classifier head (include_top=False).")
    return model


def classify(model, images, top=5, preprocessing=None, batch_size=32, verbose="auto", crop_fraction=None):
    """The most probable classes of each image, named.

    Args:
        model: a keras_vit classifier, or anything `keras_vit.load_model`
            takes (a preset folder, an `hf://` handle, a file, a short name;
            a bare architecture name is refused: its weights would be
            random).
        images: file paths, http(s) URLs, PIL images or arrays in [0, 255]
            (or [0, 1], multiplied by 255 with a warning; grey, RGBA,
            channels-first: as every task reads them, see `load_images`),
            one or a list.
        top: int >= 1, default 5: classes per image (at most the model's).
        preprocessing: None (default: the model's record), a mode
            ("inception", "imagenet") or a `Preprocessing` record, for
            models that carry none.
        batch_size: int >= 1, default 32: images per forward pass.
        verbose: "auto" (default: progress when the images make more than
            one batch), 0 (silent), 1 (progress: a bar on a terminal, plain
            lines in a log) or 2 (one line at the end), as Keras' `predict`.
        crop_fraction: None (default: the crop of the record) or a float in
            (0, 1]: the centre crop, as timm's `crop_pct` (the shorter side
            resized to the input size / `crop_fraction`, then the centre cut
            out; 1 keeps the whole shorter side), over the record's resize,
            filter and scaling (`keras-vit classify --crop-fraction`).

    Returns:
        A list with, per image, a list of `min(top, classes)`
        `Prediction(index, name, probability)` tuples, most probable first:
        probabilities from the model's softmax (applied here to a model
        that returns logits), names from `model.class_names`. A model that
        records no class names gets names None and a warning (once per
        model): a 1000-wide head is not named ImageNet's unless its weights
        say so (registered ImageNet weights, a preset, or
        `class_names="imagenet1k"`).

    Example:

    >>> import keras_vit
    >>> from keras_vit.preprocessing import Preprocessing
    >>> model = keras_vit.ViT(image_size=32, patch_size=8, hidden_size=16, num_layers=1,
    ...                       num_heads=2, mlp_dim=32, classes=2, class_names=["no", "yes"],
    ...                       preprocessing=Preprocessing.from_mode("inception", image_size=32))
    >>> [p.name for p in classify(model, np.zeros((40, 60, 3), "uint8"), top=2)[0]]
    ['no', 'yes']
    """
    check_positive_int(top, "top")
    check_positive_int(batch_size, "batch_size")
    check_verbose(verbose, 1)
    check_fraction(crop_fraction, "crop_fraction", allow_none=True)
    model = trained_classifier(model)
    if crop_fraction is not None:
        preprocessing = preprocessing_record(model, preprocessing).with_crop_fraction(crop_fraction)
    outputs = []
    for batch in read_batches(images, batch_size, verbose):  # one batch of pixels in memory at a time
        _, inputs = load_images(batch, model, preprocessing)
        outputs.append(np.asarray(model.predict_on_batch(inputs)))
    return top_predictions(model, np.concatenate(outputs), top)


def top_predictions(model, outputs, top):
    """Per row of `model`'s `outputs`, its `top` classes as `Prediction`s,
    most probable first (the results of `classify` and `classify_video`)."""
    probabilities = _probabilities(model, outputs)
    names = _names(model, probabilities.shape[-1])
    results = []
    for row in probabilities:
        best = np.argsort(-row, kind="stable")[: min(top, len(row))]
        results.append([Prediction(int(i), names[i], float(row[i])) for i in best])
    return results


def _model_labels(model, width):
    names = getattr(model, "class_names", None)
    if names is None:
        raise ValueError(
            f"Model {getattr(model, 'name', model)!r} carries no class names "
            "(`model.class_names` is None). For ImageNet heads call "
            "`decode_predictions(preds)` without `model`."
        )
    if len(names) != width:
        raise ValueError(
            f"`preds` has {width} classes but model {model.name!r} names "
            f"{len(names)}. Received: preds.shape[1]={width}"
        )
    return tuple(range(width)), tuple(names)


def _as_probabilities(preds, model):
    """Softmax of a logits head's rows (`classifier_activation=None`) that
    are not a distribution already."""
    if getattr(model, "classifier_activation", "softmax") is not None:
        return preds
    scores = preds.astype("float64")
    distribution = (scores >= 0).all(axis=1) & np.isclose(scores.sum(axis=1), 1.0, atol=1e-3)
    exp = np.exp(scores - scores.max(axis=1, keepdims=True))
    softmax = (exp / exp.sum(axis=1, keepdims=True)).astype(preds.dtype)
    return np.where(distribution[:, None], preds, softmax)


def decode_predictions(preds, top=5, model=None):
    """Names the top classes of predictions.

    Without `model`: ImageNet-1k or ImageNet-21k heads, named offline from
    the lists shipped in `keras_vit.labels`. With `model`: the class names
    its checkpoint came with (`model.class_names`, set by
    `keras_vit.from_preset` from transformers' `id2label`, timm's label
    lists or a keras_vit preset), and the scores as probabilities: a model
    whose head outputs logits (`classifier_activation=None`, as a model is
    fine-tuned) has its rows turned into probabilities by a softmax, as
    `keras_vit.classify` and `keras-vit inspect` report them (rows that are
    a distribution already are kept).

    Args:
        preds: scores of shape `(batch, classes)`, NumPy or a tensor; without
            `model`, classes must be 1000 or 21843.
        top: int, default 5: how many classes to return per sample.
        model: None, or a keras_vit model with `class_names`.

    Returns:
        A list with, per sample, a list of `top` tuples, highest score
        first: `(synset_id, class_name, score)` as
        `keras.applications.imagenet_utils.decode_predictions`, or
        `(class_index, class_name, probability)` with `model`.

    Example:

    >>> import numpy as np
    >>> preds = np.zeros((1, 1000), "float32")
    >>> preds[0, 281] = 0.5
    >>> decode_predictions(preds, top=1)
    [[('n02123045', 'tabby', 0.5)]]
    """
    if keras.ops.is_tensor(preds):
        preds = keras.ops.convert_to_numpy(preds)
    preds = np.asarray(preds)
    if preds.ndim != 2 or (model is None and preds.shape[1] not in labels.NUM_CLASSES):
        raise ValueError(
            "`decode_predictions` expects a batch of predictions of shape "
            "(batch, classes); without `model`, ImageNet's (batch, 1000) or "
            f"(batch, 21843). Received: preds.shape={preds.shape}"
        )
    if isinstance(top, bool) or not isinstance(top, int) or top < 1:
        raise ValueError(f"`top` must be a positive int. Received: top={top!r}")
    classes = preds.shape[1]
    if model is not None:
        ids, names = _model_labels(model, classes)
        preds = _as_probabilities(preds, model)
    else:
        ids, names = labels.synsets(classes), labels.class_names(classes)
    results = []
    for row in preds:
        # Stable sort: equal scores keep class order.
        best = np.argsort(-row, kind="stable")[:top]
        results.append([(ids[i], names[i], float(row[i])) for i in best])
    return results
