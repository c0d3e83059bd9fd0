"""Few-shot linear evaluation of frozen representations (paper §4.1).

The paper's few-shot accuracy fits a regularised least-squares regression
from frozen features of `n` training images per class to `{-1, 1}^K`
targets, solved in closed form, and reports the accuracy of the arg-max on
held-out images. Everything after feature extraction is NumPy.

Reference:
    Dosovitskiy et al., arXiv:2010.11929, §4.1 "Metrics".
"""

import dataclasses
import sys

import keras
import numpy as np
from keras import ops

from keras_vit.validation import check_int, check_positive_int


@dataclasses.dataclass
class FewShotResult:
    """Outcome of `few_shot_linear`.

    Attributes:
        accuracy: float, top-1 accuracy on the held-out examples.
        shots: int, training examples per class.
        num_classes: int.
        num_train: int, training examples used.
        num_test: int, held-out examples scored.
        l2_reg: float, the ridge penalty.
    """

    accuracy: float
    shots: int
    num_classes: int
    num_train: int
    num_test: int
    l2_reg: float


def fit_least_squares(features, labels, num_classes, l2_reg=1.0):
    """Ridge regression from features to `{-1, 1}` one-vs-rest targets.

    Features are centred on their training mean and divided by their overall
    standard deviation, so `l2_reg` means the same for any feature scale;
    the bias is left unpenalised (it absorbs the means). The solution uses
    the smaller of the primal `(d, d)` and dual `(n, n)` systems.

    Args:
        features: `(n, d)` array.
        labels: `(n,)` ints in `[0, num_classes)`.
        num_classes: int `K`.
        l2_reg: float >= 0, default 1.0.

    Returns:
        A function mapping `(m, d)` features to `(m, K)` scores.

    Example:

    >>> import numpy as np
    >>> predict = fit_least_squares(np.eye(3), np.arange(3), num_classes=3)
    >>> predict(np.eye(3)).argmax(axis=1).tolist()
    [0, 1, 2]
    """
    if isinstance(l2_reg, bool) or not isinstance(l2_reg, (int, float)) or not l2_reg >= 0:
        raise ValueError(
            f"`l2_reg` must be a float >= 0. Received: l2_reg={l2_reg!r}"
        )
    x = np.asarray(features, dtype="float64")
    labels = np.asarray(labels).astype("int64")
    targets = -np.ones((len(labels), num_classes))
    targets[np.arange(len(labels)), labels] = 1.0
    mean = x.mean(axis=0)
    scale = max(float(x.std()), 1e-12)
    x = (x - mean) / scale
    target_mean = targets.mean(axis=0)
    y = targets - target_mean
    n, d = x.shape
    if n < d:
        weights = x.T @ np.linalg.solve(x @ x.T + l2_reg * np.eye(n), y)
    else:
        weights = np.linalg.solve(x.T @ x + l2_reg * np.eye(d), x.T @ y)

    def predict(new_features):
        new = (np.asarray(new_features, dtype="float64") - mean) / scale
        return new @ weights + target_mean

    return predict


def _is_tf_dataset(data):
    # A tf.data.Dataset can only exist once TensorFlow is imported, so the
    # check never imports it itself.
    tf = sys.modules.get("tensorflow")
    return tf is not None and isinstance(data, tf.data.Dataset)


def _batches(data):
    """Yields `(images, labels)` NumPy batches from arrays or a tf.data source."""
    if isinstance(data, (tuple, list)) and len(data) == 2:
        yield np.asarray(data[0]), np.asarray(data[1])
        return
    if _is_tf_dataset(data):
        for images, labels in data.as_numpy_iterator():
            images, labels = np.asarray(images), np.asarray(labels)
            if labels.ndim == 0:
                images, labels = images[None], labels[None]
            yield images, labels
        return
    raise ValueError(
        "The data must be a tuple `(images, labels)` of arrays or a "
        "`tf.data.Dataset` of `(image, label)` pairs or batches. "
        f"Received: {type(data).__name__}"
    )


def _sample_shots(data, shots, num_classes, rng):
    """Draws `shots` examples per class uniformly, in one pass over `data`.

    Reservoir sampling per class keeps only `shots * num_classes` images in
    memory, so a large tf.data source never has to fit at once.
    """
    kept = {c: [] for c in range(num_classes)}
    seen = np.zeros(num_classes, dtype="int64")
    for images, labels in _batches(data):
        for image, label in zip(images, labels.astype("int64")):
            if not 0 <= label < num_classes:
                raise ValueError(
                    f"Labels must lie in [0, {num_classes}). Received: {label}"
                )
            seen[label] += 1
            if len(kept[label]) < shots:
                kept[label].append(image)
            else:
                slot = rng.integers(seen[label])
                if slot < shots:
                    kept[label][slot] = image
    short = [c for c in range(num_classes) if len(kept[c]) < shots]
    if short:
        raise ValueError(
            f"Every class needs at least shots={shots} training examples; "
            f"classes {short} have fewer ({seen[short].tolist()})."
        )
    images = np.stack([image for c in range(num_classes) for image in kept[c]])
    labels = np.repeat(np.arange(num_classes), shots)
    return images, labels


def _featurizer(model, batch_size):
    def features(images):
        out = []
        for start in range(0, len(images), batch_size):
            batch = np.asarray(images[start : start + batch_size], "float32")
            if isinstance(model, keras.Model):
                # Compiled once per batch shape: much faster than eager calls.
                value = model.predict_on_batch(batch)
            else:
                value = model(batch)
            out.append(np.asarray(ops.convert_to_numpy(value), "float64"))
        out = np.concatenate(out)
        return out.reshape(len(out), -1)

    return features


def few_shot_linear(
    model,
    train_data,
    test_data,
    shots=10,
    num_classes=None,
    l2_reg=1.0,
    seed=0,
    batch_size=32,
):
    """Few-shot linear accuracy of frozen features (paper §4.1 "Metrics").

    Samples `shots` training examples of every class (seeded), computes their
    frozen features, fits `fit_least_squares` to `{-1, 1}^K` targets and
    returns the top-1 accuracy on all of `test_data`.

    Args:
        model: a feature extractor: a Keras model returning `(batch, d)`
            (for instance a ViT built with `include_top=False,
            pooling="token"`) or any callable from a NumPy batch of images
            to features.
        train_data, test_data: `(images, labels)` NumPy arrays, or a
            `tf.data.Dataset` of `(image, label)` pairs or batches (read with
            `as_numpy_iterator`). Images must already be preprocessed.
        shots: int, training examples per class, default 10.
        num_classes: int, default `max(label) + 1` over the training labels
            (arrays only; required for a tf.data source).
        l2_reg: float, ridge penalty on standardised features, default 1.0.
        seed: int, default 0: seeds the choice of the training examples.
        batch_size: int, images per forward pass, default 32.

    Returns:
        A `FewShotResult`.

    Example:

    >>> import numpy as np
    >>> rng = np.random.default_rng(0)
    >>> labels = rng.integers(0, 3, 90)
    >>> images = np.eye(3)[labels] + 0.1 * rng.normal(size=(90, 3))
    >>> result = few_shot_linear(lambda x: x, (images, labels),
    ...                          (images, labels), shots=5)
    >>> result.accuracy
    1.0
    """
    check_positive_int(shots, "shots")
    check_positive_int(batch_size, "batch_size")
    if num_classes is None:
        if not (isinstance(train_data, (tuple, list)) and len(train_data) == 2):
            raise ValueError(
                "`num_classes` is required when the training data is not a "
                "tuple of arrays. Received: num_classes=None"
            )
        num_classes = int(np.max(train_data[1])) + 1
    check_int(num_classes, "num_classes", minimum=2)
    rng = np.random.default_rng(seed)
    features = _featurizer(model, batch_size)
    train_images, train_labels = _sample_shots(train_data, shots, num_classes, rng)
    predict = fit_least_squares(
        features(train_images), train_labels, num_classes, l2_reg
    )
    correct = total = 0
    for images, labels in _batches(test_data):
        scores = predict(features(images))
        correct += int((scores.argmax(axis=1) == labels.astype("int64")).sum())
        total += len(labels)
    if total == 0:
        raise ValueError("`test_data` holds no examples.")
    return FewShotResult(
        accuracy=correct / total,
        shots=shots,
        num_classes=num_classes,
        num_train=len(train_labels),
        num_test=total,
        l2_reg=float(l2_reg),
    )
