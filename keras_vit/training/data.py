"""tf.data input pipelines for training and evaluating ViT classifiers.

The pipelines turn a `tf.data.Dataset` of `(image, label)` pairs (uint8
images of any size, integer labels; see `keras_vit.training.datasets`) into
batches for `model.fit`/`model.evaluate`. Keras 3 feeds a `tf.data.Dataset`
to the model on every backend, so the same pipeline serves jax, tensorflow
and torch. TensorFlow is imported only when a pipeline is built.

Batch sizes are global: the number of examples per step over all replicas.
Under a `tf.distribute` strategy or a `keras.distribution` Keras splits each
batch across the replicas.

- Training (`train_pipeline`): shuffle, repeat, Inception-style random crop
  (`sample_distorted_bounding_box`, area 5%-100%, aspect 3/4-4/3), random
  horizontal flip, bilinear resize, value range. Batches of exactly
  `batch_size` (needed for static shapes on TPU and for even sharding).
- Evaluation (`eval_pipeline`): bilinear resize of the whole image (the
  official evaluation) or resize then central crop, value range; the last
  batch is padded to `batch_size` with zero-weight examples, so every batch
  has the same shape and weighted metrics stay exact.

Resizes are antialiased (`tf.image.resize(..., antialias=True)`): a photo
shrunk to the model's size is filtered as Pillow's bilinear filter does,
which is how `keras_vit.classify`, `keras-vit classify` and transformers'
image processors prepare the same photo once the model is saved with its
`Preprocessing` record; an aliased resize in training would give the model
other inputs than it meets in use. Enlarging is the same either way.

Value ranges (`mode`), applied with `keras_vit.preprocess_input`:
"inception" maps [0, 255] to [-1, 1] (the Google checkpoints); "imagenet"
scales to [0, 1] then normalises with the ImageNet mean and std (DeiT, timm);
None keeps float [0, 255] for models that scale their inputs themselves
(`keras_vit.pretraining.MaskedPatchPrediction`).
"""

from keras_vit.preprocessing import MODES, center_crop, preprocess_input
from keras_vit.training.datasets import tensorflow as _tf
from keras_vit.validation import check_choice, check_fraction, pair


def _check_mode(mode):
    return check_choice(mode, (None,) + tuple(MODES), "mode")


def value_range(images, mode="inception"):
    """Maps float images in [0, 255] to the range the model expects.

    Args:
        images: float tensor `(..., H, W, 3)` with values in [0, 255].
        mode: "inception" (default, [-1, 1]), "imagenet" (mean/std) or
            None ([0, 255] unchanged).

    Returns:
        A float32 tensor of the same shape.
    """
    mode = _check_mode(mode)
    images = _tf().cast(images, "float32")
    if mode is None:
        return images
    # preprocess_input runs TensorFlow ops on tf.Tensors, whatever the backend.
    return preprocess_input(images, mode=mode)


def _as_rgb(image):
    tf = _tf()
    image = tf.convert_to_tensor(image)
    if image.shape.rank == 2:
        image = image[..., None]
    channels = image.shape[-1]
    if channels == 1:
        image = tf.image.grayscale_to_rgb(image)
    elif channels == 4:
        image = image[..., :3]
    return image


def inception_crop(image, area_range=(0.05, 1.0), aspect_ratio_range=(3 / 4, 4 / 3), seed=None):
    """A random crop covering `area_range` of the image (Szegedy et al. 2015).

    Args:
        image: `(H, W, C)` tensor.
        area_range: (min, max) fraction of the image area, default (0.05, 1).
        aspect_ratio_range: (min, max) width/height, default (3/4, 4/3).
        seed: optional non-zero int, the op seed of the crop's random
            stream. Without it the crop draws from TensorFlow's global
            seed (`keras.utils.set_random_seed`), which also works when
            `tf.config.experimental.enable_op_determinism()` is on.

    Returns:
        The cropped `(h, w, C)` tensor (the whole image if no crop fits
        after 10 attempts).
    """
    tf = _tf()
    options = dict(
        bounding_boxes=tf.zeros([1, 0, 4], tf.float32),
        min_object_covered=0.0,
        aspect_ratio_range=aspect_ratio_range,
        area_range=area_range,
        max_attempts=10,
        use_image_if_no_bounding_boxes=True,
    )
    if seed:
        begin, size, _ = tf.image.sample_distorted_bounding_box(
            tf.shape(image), seed=seed, **options
        )
    else:
        # The stateful op refuses seed=0 under op determinism; a stateless
        # crop keyed by a draw from the global stream does not.
        key = tf.random.uniform([2], maxval=tf.int32.max, dtype=tf.int32)
        begin, size, _ = tf.image.stateless_sample_distorted_bounding_box(
            tf.shape(image), seed=key, **options
        )
    return tf.slice(image, begin, size)


def train_transform(image_size, mode="inception", area_range=(0.05, 1.0), flip=True):
    """The per-example training augmentation, `(image, label) -> (x, label)`."""
    tf = _tf()
    size = pair(image_size, "image_size")
    _check_mode(mode)
    if not (0 < area_range[0] <= area_range[1] <= 1):
        raise ValueError(
            "`area_range` must satisfy 0 < min <= max <= 1. "
            f"Received: area_range={area_range!r}"
        )

    def transform(image, label):
        image = _as_rgb(image)
        if area_range != (1.0, 1.0) and tuple(area_range) != (1, 1):
            image = inception_crop(image, area_range=tuple(area_range))
        if flip:
            image = tf.image.random_flip_left_right(image)
        image = tf.image.resize(tf.cast(image, tf.float32), size, method="bilinear", antialias=True)
        image = tf.clip_by_value(image, 0.0, 255.0)
        return value_range(image, mode), tf.cast(label, tf.int32)

    return transform


def eval_transform(image_size, mode="inception", crop_fraction=None):
    """The per-example evaluation preprocessing, `(image, label) -> (x, label)`.

    Args:
        image_size: int or (height, width), the model's input size.
        mode: value range, "inception" (default), "imagenet" or None ([0, 255]).
        crop_fraction: None (default) resizes the whole image to
            `image_size`, as the official evaluation; a float in (0, 1]
            resizes the shorter side to `image_size / crop_fraction` and
            takes the central crop (e.g. 0.875 for timm-style evaluation).
    """
    tf = _tf()
    size = pair(image_size, "image_size")
    _check_mode(mode)
    check_fraction(crop_fraction, "crop_fraction", allow_none=True)

    def transform(image, label):
        image = tf.cast(_as_rgb(image), tf.float32)
        if crop_fraction is None:
            image = tf.image.resize(image, size, method="bilinear", antialias=True)
        else:
            image = center_crop(image, size, crop_fraction, interpolation="bilinear")
        image = tf.clip_by_value(image, 0.0, 255.0)
        return value_range(image, mode), tf.cast(label, tf.int32)

    return transform


def train_pipeline(
    dataset,
    image_size,
    batch_size,
    mode="inception",
    area_range=(0.05, 1.0),
    flip=True,
    shuffle_buffer=10_000,
    cache=False,
    seed=None,
):
    """Endless, shuffled, augmented batches for `model.fit`.

    Args:
        dataset: `tf.data.Dataset` of `(image, label)`, uint8 images.
        image_size: int or (height, width).
        batch_size: int, global batch size (all replicas together).
        mode: value range, "inception" (default), "imagenet" or None ([0, 255]).
        area_range: crop area range, default (0.05, 1); (1, 1) disables the
            random crop.
        flip: bool, default True, random horizontal flips.
        shuffle_buffer: int, default 10 000.
        cache: bool, default False: cache the decoded images in memory
            (small datasets).
        seed: optional int for the shuffle.

    Returns:
        A repeated `tf.data.Dataset` of `(images, labels)` batches; pass
        `steps_per_epoch` to `fit`.

    Example:

    >>> import numpy as np, tensorflow as tf
    >>> images = np.zeros((4, 20, 20, 3), "uint8")
    >>> ds = tf.data.Dataset.from_tensor_slices((images, np.arange(4)))
    >>> x, y = next(iter(train_pipeline(ds, 16, batch_size=2)))
    >>> tuple(x.shape), tuple(y.shape)
    ((2, 16, 16, 3), (2,))
    """
    tf = _tf()
    if cache:
        dataset = dataset.cache()
    dataset = dataset.shuffle(shuffle_buffer, seed=seed, reshuffle_each_iteration=True)
    dataset = dataset.repeat()
    dataset = dataset.map(
        train_transform(image_size, mode, tuple(area_range), flip),
        num_parallel_calls=tf.data.AUTOTUNE,
    )
    return dataset.batch(batch_size, drop_remainder=True).prefetch(tf.data.AUTOTUNE)


def eval_pipeline(dataset, image_size, batch_size, mode="inception", crop_fraction=None, cache=False):
    """Batches for `model.evaluate`/`predict`: `(images, labels, weights)`.

    Every batch has exactly `batch_size` examples: the last one is padded with
    zero images of weight 0, which weighted metrics (as compiled by
    `keras_vit.training.compile_for_finetuning`) ignore.

    Args:
        dataset: `tf.data.Dataset` of `(image, label)`.
        image_size: int or (height, width).
        batch_size: int, global batch size.
        mode: value range, "inception" (default), "imagenet" or None ([0, 255]).
        crop_fraction: None (default) or float, see `eval_transform`.
        cache: bool, default False: cache the preprocessed images in memory.

    Returns:
        A finite `tf.data.Dataset` of `(images, labels, weights)` batches.
    """
    tf = _tf()
    height, width = pair(image_size, "image_size")
    dataset = dataset.map(
        eval_transform(image_size, mode, crop_fraction), num_parallel_calls=tf.data.AUTOTUNE
    )
    if cache:
        dataset = dataset.cache()
    dataset = dataset.map(lambda x, y: (x, y, tf.constant(1.0, tf.float32)))
    dataset = dataset.batch(batch_size)

    def pad(x, y, w):
        missing = batch_size - tf.shape(x)[0]
        x = tf.pad(x, [[0, missing], [0, 0], [0, 0], [0, 0]])
        y = tf.pad(y, [[0, missing]])
        w = tf.pad(w, [[0, missing]])
        return (
            tf.ensure_shape(x, (batch_size, height, width, 3)),
            tf.ensure_shape(y, (batch_size,)),
            tf.ensure_shape(w, (batch_size,)),
        )

    return dataset.map(pad).prefetch(tf.data.AUTOTUNE)
