"""Datasets of `(uint8 image, int label)` pairs for the training pipelines.

- `tfds_source`: any TensorFlow Datasets image-classification dataset
  (cifar10, cifar100, oxford_iiit_pet, oxford_flowers102, imagenette,
  imagenet2012 with `manual_dir`, ...). Data must already be downloaded or
  downloadable by `tfds` (this code never downloads anything itself unless
  `download=True`).
- `image_folder_source`: a directory with one subfolder of images per class.
- `digits_source`: scikit-learn's 8x8 handwritten digits, shipped inside
  scikit-learn, for offline runs.
- `load_source`: one entry point taking a spec string ("digits",
  "tfds:cifar10", "cifar10" or a directory path).

Each returns a `Source` with the `tf.data.Dataset`, the class names and the
number of examples (None when unknown).
"""

import collections
import os

Source = collections.namedtuple("Source", ["dataset", "class_names", "num_examples"])

IMAGE_EXTENSIONS = (".jpg", ".jpeg", ".png", ".bmp", ".gif")


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


def _list_folder(directory):
    if not os.path.isdir(directory):
        raise ValueError(
            "`directory` must be a folder with one subfolder per class. "
            f"Received: directory={directory!r}"
        )
    class_names = sorted(
        d for d in os.listdir(directory) if os.path.isdir(os.path.join(directory, d))
    )
    paths, labels = [], []
    for label, name in enumerate(class_names):
        folder = os.path.join(directory, name)
        for root, _, files in sorted(os.walk(folder)):
            for file in sorted(files):
                if file.lower().endswith(IMAGE_EXTENSIONS):
                    paths.append(os.path.join(root, file))
                    labels.append(label)
    if not paths:
        raise ValueError(
            f"No images ({', '.join(IMAGE_EXTENSIONS)}) found in class "
            f"subfolders of directory={directory!r}"
        )
    return class_names, paths, labels


def image_folder_source(directory, validation_split=None, subset=None, seed=0):
    """Images in `directory/<class name>/...`, labelled by sorted class name.

    Args:
        directory: path of the folder.
        validation_split: None (default, use every image) or a float in
            (0, 1): hold out this fraction of the images (a fixed random
            choice given `seed`).
        subset: with `validation_split`, "training" or "validation".
        seed: int, default 0, for the split.

    Returns:
        A `Source` of decoded uint8 RGB images and int32 labels.
    """
    import numpy as np

    tf = tensorflow()
    class_names, paths, labels = _list_folder(directory)
    if validation_split is not None:
        if not 0 < validation_split < 1 or subset not in ("training", "validation"):
            raise ValueError(
                "`validation_split` must be in (0, 1) and `subset` one of "
                "'training', 'validation'. Received: "
                f"validation_split={validation_split!r}, subset={subset!r}"
            )
        order = np.random.default_rng(seed).permutation(len(paths))
        held = int(round(len(paths) * validation_split))
        keep = order[:held] if subset == "validation" else order[held:]
        keep = np.sort(keep)
        paths = [paths[i] for i in keep]
        labels = [labels[i] for i in keep]

    def load(path, label):
        image = tf.io.decode_image(tf.io.read_file(path), channels=3, expand_animations=False)
        return image, label

    dataset = tf.data.Dataset.from_tensor_slices((paths, np.asarray(labels, "int32")))
    dataset = dataset.map(load, num_parallel_calls=tf.data.AUTOTUNE)
    return Source(dataset, class_names, len(paths))


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
