"""Datasets of `(uint8 image, int label)` pairs for the training pipelines.

- `tfds_source`: any TensorFlow Datasets image-classification dataset
  (cifar10, cifar100, oxford_iiit_pet, oxford_flowers102, imagenette,
  imagenet2012 with `manual_dir`, ...). Data must already be downloaded or
  downloadable by `tfds` (this code never downloads anything itself unless
  `download=True`).
- `image_folder_source`: a directory with one subfolder of images per class;
  `image_folder_sources` splits one into training and held-out parts after
  checking that every image decodes (`unreadable_images`); each photo is
  turned upright by its EXIF orientation (`exif_orientations`, `upright`),
  as the tasks read photos.
- `digits_source`: scikit-learn's 8x8 handwritten digits, shipped inside
  scikit-learn, for offline runs.
- `load_source`: one entry point taking a spec string ("digits",
  "tfds:cifar10", "cifar10" or a directory path).

Each returns a `Source` with the `tf.data.Dataset`, the class names and the
number of examples (None when unknown).
"""

import collections
import os
import warnings

from keras_vit.validation import check_choice

Source = collections.namedtuple("Source", ["dataset", "class_names", "num_examples"])

IMAGE_EXTENSIONS = (".jpg", ".jpeg", ".png", ".bmp", ".gif", ".webp")
# Photo formats `tf.io.decode_image` does not read: left out with a warning.
UNDECODED_EXTENSIONS = (".tif", ".tiff", ".heic", ".heif", ".avif", ".jxl")
# What the folder sources do with images that do not decode.
UNREADABLE = ("error", "skip", None)


def tensorflow():
    """The `tensorflow` module, imported on first use.

    The data sources and pipelines run on tf.data under every Keras
    backend, so TensorFlow is needed for them even with jax or torch.
    """
    try:
        import tensorflow as tf
    except ImportError:
        raise ImportError(
            "keras_vit.training's data sources and pipelines need TensorFlow "
            "(tf.data), under every Keras backend: pip install tensorflow"
        ) from None
    return tf


def tfds_source(name, split, data_dir=None, manual_dir=None, download=False):
    """A TensorFlow Datasets image-classification split.

    Args:
        name: tfds name, e.g. "cifar10" or "oxford_flowers102".
        split: tfds split string, e.g. "train", "test", "train[:98%]".
        data_dir: optional tfds data directory.
        manual_dir: optional directory of manually downloaded files
            (imagenet2012).
        download: bool, default False: let tfds download and prepare the
            data (needs internet).

    Returns:
        A `Source`; the dataset yields `(image, label)` with keys taken from
        the builder's supervised keys (`image`, `label` by default).
    """
    import tensorflow_datasets as tfds

    builder = tfds.builder(name, data_dir=data_dir)
    if download:
        config = tfds.download.DownloadConfig(manual_dir=manual_dir)
        builder.download_and_prepare(download_config=config)
    info = builder.info
    image_key, label_key = info.supervised_keys or ("image", "label")
    label_feature = info.features[label_key]
    class_names = list(getattr(label_feature, "names", None) or [])
    if not class_names:
        class_names = [str(i) for i in range(label_feature.num_classes)]
    dataset = builder.as_dataset(split=split, shuffle_files=False)
    dataset = dataset.map(lambda example: (example[image_key], example[label_key]))
    try:
        num_examples = info.splits[split].num_examples
    except (KeyError, ValueError, TypeError):
        num_examples = None
    return Source(dataset, class_names, num_examples)


def list_image_folder(directory):
    """`(class_names, paths, labels)` of an image folder, checked.

    Args:
        directory: a folder with one sub-folder of images per class.

    Returns:
        The sorted class names, the image paths (sorted within each class)
        and their int labels.

    Raises:
        ValueError: when `directory` is missing or not a folder, holds fewer
            than two class sub-folders, or a class sub-folder holds no image
            (each named).

    Files of other types are not listed; photos in a format the pipelines
    cannot decode (`UNDECODED_EXTENSIONS`: TIFF, HEIC, ...) are counted in a
    warning.
    """
    directory = os.fspath(directory)
    if not os.path.exists(directory):
        raise ValueError(
            f"No folder at {directory!r} (resolved to {os.path.abspath(directory)!r}): "
            "`directory` must be a folder with one sub-folder of images per class."
        )
    if not os.path.isdir(directory):
        raise ValueError(
            f"{directory!r} is a file: `directory` must be a folder with one sub-folder "
            "of images per class."
        )
    class_names = sorted(
        d for d in os.listdir(directory) if os.path.isdir(os.path.join(directory, d))
    )
    paths, labels, empty, undecoded = [], [], [], []
    for label, name in enumerate(class_names):
        folder = os.path.join(directory, name)
        files = [os.path.join(root, file) for root, _, names in sorted(os.walk(folder)) for file in sorted(names)]
        found = [path for path in files if path.lower().endswith(IMAGE_EXTENSIONS)]
        undecoded += [path for path in files if path.lower().endswith(UNDECODED_EXTENSIONS)]
        empty += [] if found else [name]
        paths += found
        labels += [label] * len(found)
    if undecoded:
        kinds = collections.Counter(os.path.splitext(path)[1].lower() for path in undecoded)
        warnings.warn(
            f"Leaving out {len(undecoded)} image file(s) in a format TensorFlow's decoder does not read "
            f"({', '.join(f'{kind}: {count}' for kind, count in sorted(kinds.items()))}; e.g. "
            f"{undecoded[0]!r}): convert them to JPEG or PNG to train on them.",
            stacklevel=3,
        )
    if not paths:
        raise ValueError(
            f"No images ({', '.join(IMAGE_EXTENSIONS)}) found in class "
            f"subfolders of directory={directory!r}"
        )
    if empty or len(class_names) < 2:
        problem = (
            f"class folder(s) {empty} hold no image ({', '.join(IMAGE_EXTENSIONS)})"
            if empty else f"it has {len(class_names)} class sub-folder ({class_names[0]!r})"
        )
        raise ValueError(
            f"{directory!r} must hold one sub-folder of images per class, at least two "
            f"classes: {problem}."
        )
    return class_names, paths, labels


def unreadable_images(paths):
    """The images TensorFlow cannot decode, with the reason for each.

    Decodes every file as the pipelines will (`tf.io.decode_image`), in
    parallel, before any training starts: a truncated or mislabelled file
    is named here rather than failing a `tf.data` step later.

    Args:
        paths: image file paths.

    Returns:
        A list of `(path, reason)`, in the order of `paths`; empty when all
        decode.
    """
    tf = tensorflow()

    def decode(path):
        image = tf.io.decode_image(tf.io.read_file(path), channels=3, expand_animations=False)
        return path, tf.shape(image)[0]

    dataset = tf.data.Dataset.from_tensor_slices(list(paths))
    dataset = dataset.map(decode, num_parallel_calls=tf.data.AUTOTUNE, deterministic=False)
    readable = {p.decode() for p, _ in dataset.ignore_errors().as_numpy_iterator()}
    bad = []
    for path in paths:
        if path in readable:
            continue
        try:
            decode(tf.constant(path))
            reason = "not decoded by tf.io.decode_image"
        except (tf.errors.OpError, ValueError) as error:
            reason = (getattr(error, "message", None) or str(error)).strip().splitlines()[0]
        bad.append((path, reason))
    return bad


def _readable(paths, labels, unreadable):
    """`paths, labels` without the files that do not decode, as `unreadable` says."""
    check_choice(unreadable, UNREADABLE, "unreadable")
    if unreadable is None:
        return paths, labels
    bad = unreadable_images(paths)
    if not bad:
        return paths, labels
    listing = "; ".join(f"{path} ({reason})" for path, reason in bad[:10])
    more = f" and {len(bad) - 10} more" if len(bad) > 10 else ""
    if unreadable == "error":
        raise ValueError(
            f"{len(bad)} of {len(paths)} images cannot be decoded: {listing}{more}. "
            "Remove or replace them, or skip them (unreadable='skip'; "
            "examples/finetune.py: --skip-unreadable)."
        )
    warnings.warn(f"Skipping {len(bad)} of {len(paths)} images that cannot be decoded: {listing}{more}.",
                  stacklevel=3)
    skipped = {path for path, _ in bad}
    kept = [(p, y) for p, y in zip(paths, labels) if p not in skipped]
    return [p for p, _ in kept], [y for _, y in kept]


def _split(count, validation_split, seed):
    """`{"training": indices, "validation": indices}`: a fixed random hold-out."""
    import numpy as np

    if not isinstance(validation_split, (int, float)) or not 0 < validation_split < 1:
        raise ValueError(
            "`validation_split` must be in (0, 1). "
            f"Received: validation_split={validation_split!r}"
        )
    order = np.random.default_rng(seed).permutation(count)
    held = int(round(count * validation_split))
    if held == 0 or held == count:
        raise ValueError(
            f"validation_split={validation_split} of {count} images holds out {held}: "
            "each part needs at least one image (add images or change the split)."
        )
    return {"validation": np.sort(order[:held]), "training": np.sort(order[held:])}


def exif_orientations(paths):
    """Each image's EXIF orientation, 1 to 8 (1: upright or none recorded).

    Phone cameras store a photo's orientation apart from its pixels, and
    `tf.io.decode_image` ignores it; the folder pipelines turn each image
    upright by this value, as `keras_vit.classify` and the other tasks
    (Pillow's `ImageOps.exif_transpose`) do, so that a model trains on what
    it is later shown. Only each file's header is read; a file Pillow cannot
    open counts as upright (the decode check names it).

    Example:

    >>> exif_orientations([])
    []
    """
    try:
        from PIL import Image
    except ImportError as error:
        raise ImportError("Reading image folders needs Pillow: pip install pillow") from error

    def orientation(path):
        try:
            with Image.open(path) as image:
                value = image.getexif().get(0x0112, 1)
        except (OSError, ValueError, SyntaxError):
            return 1
        return value if value in range(1, 9) else 1

    return [orientation(path) for path in paths]


def upright(image, orientation):
    """`image` (H, W, C) turned as EXIF `orientation` (1 to 8) says, in TensorFlow.

    The eight cases of Pillow's `ImageOps.exif_transpose`: 2 and 4 mirror,
    3, 6 and 8 rotate (by 180, 270 and 90 degrees counter-clockwise), 5 and
    7 flip over a diagonal.

    Example:

    >>> import numpy as np
    >>> upright(np.array([[[0], [1], [2]], [[3], [4], [5]]]), 6).numpy()[..., 0].tolist()
    [[3, 0], [4, 1], [5, 2]]
    """
    tf = tensorflow()
    swapped = lambda: tf.transpose(image, [1, 0, 2])  # noqa: E731
    branches = [
        lambda: image,
        lambda: tf.image.flip_left_right(image),
        lambda: tf.image.rot90(image, 2),
        lambda: tf.image.flip_up_down(image),
        swapped,
        lambda: tf.image.rot90(image, 3),
        lambda: tf.image.rot90(swapped(), 2),
        lambda: tf.image.rot90(image, 1),
    ]
    return tf.switch_case(tf.cast(orientation, tf.int32) - 1, branches)


def _folder_dataset(paths, labels):
    import numpy as np

    tf = tensorflow()

    def load(path, label, orientation):
        image = tf.io.decode_image(tf.io.read_file(path), channels=3, expand_animations=False)
        return upright(image, orientation), label

    dataset = tf.data.Dataset.from_tensor_slices(
        (list(paths), np.asarray(labels, "int32"), np.asarray(exif_orientations(paths), "int32")))
    return dataset.map(load, num_parallel_calls=tf.data.AUTOTUNE)


def image_folder_sources(directory, validation_split, seed=0, unreadable="error"):
    """A folder of images split into training and held-out `Source`s, checked first.

    The folder is listed and every image decoded once, before the split, so
    that a bad file is reported (or skipped) up front and both parts come
    from the same list.

    Args:
        directory: a folder with one sub-folder of images per class.
        validation_split: float in (0, 1), the share held out (a fixed
            random choice given `seed`).
        seed: int, default 0.
        unreadable: "error" (default: a `ValueError` naming every file that
            does not decode), "skip" (leave them out, with a warning) or
            None (no check).

    Returns:
        `(training, held_out)` `Source`s of decoded uint8 RGB images.
    """
    class_names, paths, labels = list_image_folder(directory)
    paths, labels = _readable(paths, labels, unreadable)
    parts = _split(len(paths), validation_split, seed)
    return tuple(
        Source(_folder_dataset([paths[i] for i in parts[subset]], [labels[i] for i in parts[subset]]),
               class_names, len(parts[subset]))
        for subset in ("training", "validation")
    )


def image_folder_source(directory, validation_split=None, subset=None, seed=0, unreadable=None):
    """Images in `directory/<class name>/...`, labelled by sorted class name.

    Args:
        directory: path of the folder.
        validation_split: None (default, use every image) or a float in
            (0, 1): hold out this fraction of the images (a fixed random
            choice given `seed`).
        subset: with `validation_split`, "training" or "validation".
        seed: int, default 0, for the split.
        unreadable: None (default: no check), "error" or "skip", as in
            `image_folder_sources` (the check decodes every image once).

    Returns:
        A `Source` of decoded uint8 RGB images and int32 labels.
    """
    class_names, paths, labels = list_image_folder(directory)
    paths, labels = _readable(paths, labels, unreadable)
    if validation_split is not None:
        if subset not in ("training", "validation"):
            raise ValueError(
                "`validation_split` must be in (0, 1) and `subset` one of "
                "'training', 'validation'. Received: "
                f"validation_split={validation_split!r}, subset={subset!r}"
            )
        keep = _split(len(paths), validation_split, seed)[subset]
        paths = [paths[i] for i in keep]
        labels = [labels[i] for i in keep]
    return Source(_folder_dataset(paths, labels), class_names, len(paths))


def digits_arrays(test_fraction=0.2, seed=0):
    """scikit-learn's 1 797 handwritten digits as uint8 RGB 8x8 images.

    Returns:
        `((x_train, y_train), (x_test, y_test))`, a fixed stratified-free
        random split; images `(n, 8, 8, 3)` uint8 in [0, 255].
    """
    import numpy as np
    from sklearn.datasets import load_digits

    digits = load_digits()
    images = np.round(digits.images * (255.0 / 16.0)).astype("uint8")
    images = np.repeat(images[..., None], 3, axis=-1)
    labels = digits.target.astype("int32")
    order = np.random.default_rng(seed).permutation(len(labels))
    held = int(round(len(labels) * test_fraction))
    test, train = order[:held], order[held:]
    return (images[train], labels[train]), (images[test], labels[test])


def digits_source(split, test_fraction=0.2, seed=0):
    """`digits_arrays` as a `Source`; `split` is "train" or "test"."""
    if split not in ("train", "test"):
        raise ValueError(f"`split` must be 'train' or 'test'. Received: split={split!r}")
    train, test = digits_arrays(test_fraction, seed)
    images, labels = train if split == "train" else test
    dataset = tensorflow().data.Dataset.from_tensor_slices((images, labels))
    return Source(dataset, [str(i) for i in range(10)], len(labels))


def load_source(spec, split, data_dir=None, manual_dir=None, download=False):
    """Resolves a dataset spec to a `Source`.

    Args:
        spec: "digits"; "tfds:<name>" or a bare tfds name ("cifar10"); or
            the path of an image folder. A folder spec may use `split` as a
            subfolder ("train", "test") when it has one; otherwise "train"
            and "validation"/"test" take a fixed 90/10 split of the folder.
        split: split name ("train", "test", "validation" or any tfds split).
        data_dir, manual_dir, download: forwarded to `tfds_source`.

    Returns:
        A `Source`.
    """
    if spec == "digits":
        return digits_source("train" if split == "train" else "test")
    if os.path.isdir(spec):
        sub = os.path.join(spec, split)
        if os.path.isdir(sub) and any(
            os.path.isdir(os.path.join(sub, d)) for d in os.listdir(sub)
        ):
            return image_folder_source(sub)
        subset = "training" if split.startswith("train") else "validation"
        return image_folder_source(spec, validation_split=0.1, subset=subset)
    name = spec[len("tfds:"):] if spec.startswith("tfds:") else spec
    return tfds_source(name, split, data_dir=data_dir, manual_dir=manual_dir, download=download)
