"""Images read and prepared as a model's checkpoint expects, for every task.

`load_images(images, model)` reads file paths, http(s) URLs, PIL images or arrays (in
[0, 255], any sizes), converts them to RGB (`rgb_pixels`), resizes and centre-crops them as
the model's `Preprocessing` record says (`keras_vit.preprocessing.resize_and_crop`)
and scales them (`preprocess_input`). The one-call functions of the tasks
(`keras_vit.classify`, ...) start with it; `read_images` is its first step
alone, for tasks that keep each image at its own size.
"""

import os

import numpy as np

from keras_vit.preprocessing import Preprocessing, preprocess_input, resize_and_crop


def _pil_image(image):
    try:
        from PIL import Image
    except ImportError:
        return None
    return Image if isinstance(image, Image.Image) else None


# Pillow's modes of 16-bit grey levels; "I" (32-bit integers) is read as
# one of them, the mode older Pillows give 16-bit PNGs.
_SIXTEEN_BIT = ("I;16", "I;16L", "I;16B", "I;16N", "I")


def _high_byte(levels, where):
    levels = np.asarray(levels)
    if levels.size and (levels.min() < 0 or levels.max() > 65535):
        raise ValueError(
            f"{where} holds integer levels outside 0..65535 (from {levels.min()} to {levels.max()}): "
            "only 8- and 16-bit images are read. Scale it to [0, 255] and pass it as an array."
        )
    return (levels.astype("uint32") >> 8).astype("uint8")


def rgb_pixels(image, where="The image"):
    """A PIL image's pixels as a uint8 `(H, W, 3)` RGB array.

    Grey levels are repeated to RGB, an alpha channel is dropped and a
    palette resolved (Pillow's `convert("RGB")`); 16-bit grey levels keep
    their high byte, as TensorFlow's decoder (the training pipelines) and
    Pillow's 16-bit colour PNGs do, rather than being clipped at 255;
    integer images (mode "I", as older Pillows open 16-bit PNGs) are read as
    16-bit levels. A floating-point image (mode "F") is refused: its range
    is not recorded.

    Example:

    >>> from PIL import Image
    >>> image = Image.fromarray(np.array([[0, 256, 65535]], "uint16"))
    >>> image.mode, rgb_pixels(image)[0, :, 0].tolist()
    ('I;16', [0, 1, 255])
    """
    if image.mode in _SIXTEEN_BIT:
        return np.repeat(_high_byte(image, where)[..., None], 3, axis=-1)
    if image.mode == "F":
        raise ValueError(
            f"{where} is a floating-point image (Pillow mode 'F'), whose range is not recorded: "
            "read it yourself and pass an array scaled to [0, 255]."
        )
    return np.asarray(image.convert("RGB"))


# The image files the tasks read (with Pillow), by their suffix.
IMAGE_SUFFIXES = (".jpg", ".jpeg", ".png", ".bmp", ".gif", ".webp", ".tif", ".tiff")
URL_SCHEMES = ("http://", "https://")
# An image fetched from a URL is read into memory whole: a cap and a wait.
_URL_LIMIT_BYTES = 200 * 2**20
_URL_TIMEOUT_S = 60


def _fetch(url):
    """The bytes at `url`, or a ValueError naming the URL and why not."""
    import urllib.error
    import urllib.request

    from keras_vit.version import __version__

    request = urllib.request.Request(url, headers={"User-Agent": f"keras-vit/{__version__}"})
    try:
        with urllib.request.urlopen(request, timeout=_URL_TIMEOUT_S) as response:
            data = response.read(_URL_LIMIT_BYTES + 1)
    except urllib.error.HTTPError as error:
        raise ValueError(f"Cannot read the image {url!r}: HTTP {error.code} {error.reason}") from None
    except urllib.error.URLError as error:
        raise ValueError(f"Cannot read the image {url!r}: unreachable ({error.reason})") from None
    except OSError as error:  # a timeout or a dropped connection
        raise ValueError(f"Cannot read the image {url!r}: {type(error).__name__}: {error}") from None
    if len(data) > _URL_LIMIT_BYTES:
        raise ValueError(f"Cannot read the image {url!r}: larger than {_URL_LIMIT_BYTES // 2**20} MiB.")
    return data


def _read(path):
    try:
        from PIL import Image, ImageOps
    except ImportError as error:
        raise ImportError("Reading image files needs Pillow: pip install pillow") from error
    path = os.fspath(path)
    if path.startswith(URL_SCHEMES):
        import io

        try:
            with Image.open(io.BytesIO(_fetch(path))) as image:
                return rgb_pixels(ImageOps.exif_transpose(image), f"The image {path!r}")
        except OSError as error:
            raise ValueError(f"Cannot read the image {path!r}: {error}") from None
    if os.path.isdir(path):
        raise ValueError(f"{path!r} is a folder, not an image file: give the images in it "
                         "(the keras-vit commands take a folder for the images it holds).")
    if not os.path.isfile(path):
        raise ValueError(f"No image file at {path!r} (resolved to {os.path.abspath(path)!r}).")
    try:
        with Image.open(path) as image:
            # Phone photos store their orientation apart from the pixels.
            return rgb_pixels(ImageOps.exif_transpose(image), f"The image {path!r}")
    except OSError as error:
        raise ValueError(f"Cannot read the image {path!r}: {error}") from None


def _as_rgb(array, where):
    array = np.asarray(array)
    if array.ndim == 2:
        array = array[..., None]
    if array.ndim != 3 or array.shape[-1] not in (1, 3, 4):
        raise ValueError(
            f"{where} must be an (height, width), (height, width, 1 | 3 | 4) image. "
            f"Received: shape {array.shape}"
        )
    if array.dtype == np.uint16:  # 16-bit levels, read as 16-bit image files are
        array = _high_byte(array, where)
    if array.shape[-1] == 1:
        array = np.repeat(array, 3, axis=-1)
    return array[..., :3]


def _as_list(images):
    """`images` as a sequence of single images, nothing read."""
    import keras

    if isinstance(images, (str, os.PathLike)) or _pil_image(images) is not None:
        return [images]
    if keras.ops.is_tensor(images):
        images = keras.ops.convert_to_numpy(images)
    if isinstance(images, np.ndarray):
        return images if images.ndim == 4 else [images]
    return images if isinstance(images, (list, tuple)) else list(images)


def _read_one(image, index):
    if isinstance(image, (str, os.PathLike)):
        return _read(image)
    if _pil_image(image) is not None:
        return rgb_pixels(image, f"`images[{index}]`")
    return _as_rgb(image, f"`images[{index}]`")


def read_images(images):
    """`images` (a path, a PIL image, an array, a batch or a list of these) as a
    list of `(H, W, 3)` NumPy images in [0, 255], each at its own size.

    Files and http(s) URLs (turned upright as their EXIF orientation says)
    and PIL images are converted by `rgb_pixels`; a uint16 array holds 16-bit levels, read as a
    16-bit file is.

    Example:

    >>> [image.shape for image in read_images(np.zeros((2, 5, 7, 1), "uint8"))]
    [(5, 7, 3), (5, 7, 3)]
    """
    out = [_read_one(image, i) for i, image in enumerate(_as_list(images))]
    if not out:
        raise ValueError("`images` is empty: give at least one image.")
    return out


def image_batches(images, size):
    """`images` (as `read_images` takes them) in consecutive parts of at most
    `size` images, nothing read: for calls that read and run a batch at a
    time, holding one batch of images in memory rather than all.

    Example:

    >>> [len(part) for part in image_batches(np.zeros((5, 8, 8, 3), "uint8"), 2)]
    [2, 2, 1]
    """
    images = _as_list(images)
    if not len(images):
        raise ValueError("`images` is empty: give at least one image.")
    return [images[i : i + size] for i in range(0, len(images), size)]


def read_batches(images, size, verbose="auto"):
    """Reads `images` (as `read_images` takes them) `size` at a time: a
    generator of lists of `(H, W, 3)` images, for the one-call functions
    that run a batch before reading the next, with a progress bar.

    Args:
        images: as `read_images` takes them.
        size: int: images per batch.
        verbose: "auto" (default: a progress bar when the images make more
            than one batch), 0 (silent), 1 (a progress bar) or 2 (one line
            at the end), as Keras' `predict`.

    Example:

    >>> [len(part) for part in read_batches(np.zeros((5, 8, 8, 3), "uint8"), 2, verbose=0)]
    [2, 2, 1]
    """
    import keras

    from keras_vit.validation import check_verbose

    parts = image_batches(images, size)
    verbose = check_verbose(verbose, len(parts))
    total = sum(len(part) for part in parts)
    bar = keras.utils.Progbar(total, verbose=verbose, unit_name="image") if verbose else None
    done = 0
    for part in parts:
        # Errors name an image by its place in `images`, not in its batch.
        yield [_read_one(image, done + i) for i, image in enumerate(part)]
        done += len(part)
        if bar is not None:
            bar.update(done)


def _record(model, preprocessing):
    if preprocessing is None:
        preprocessing = getattr(model, "preprocessing", None)
        if preprocessing is None:
            raise ValueError(
                f"Model {getattr(model, 'name', model)!r} carries no preprocessing record "
                "(`model.preprocessing` is None: it was built without weights that record how "
                "their images are scaled, from scratch or from a checkpoint file such as an "
                ".npz). Pass preprocessing='inception' ([-1, 1], Google's checkpoints) or "
                "'imagenet' (ImageNet mean/std, DeiT and timm), or a Preprocessing record; or "
                "set `model.preprocessing`."
            )
    if isinstance(preprocessing, str):
        preprocessing = Preprocessing.from_mode(preprocessing)
    record = Preprocessing.from_config(preprocessing)
    if record.image_size is None:
        record = record.for_image_size(tuple(model.input_shape[1:3]))
    return record


def load_images(images, model, preprocessing=None):
    """Reads images and prepares them as `model`'s checkpoint expects.

    Args:
        images: a file path or http(s) URL, a PIL image, an `(H, W, C)` array in [0, 255],
            a batch `(N, H, W, C)`, or a list of any of these (sizes may
            differ).
        model: the keras_vit model the images are for.
        preprocessing: None (default: `model.preprocessing`), a mode
            ("inception", "imagenet") or a `Preprocessing` record.

    Returns:
        `(display, inputs)`: the resized and cropped images, uint8
        `(N, height, width, 3)`, and the model inputs, float32 of the same
        shape.

    Example:

    >>> import keras_vit
    >>> model = keras_vit.ViT(image_size=32, patch_size=8, hidden_size=16, num_layers=1,
    ...                       num_heads=2, mlp_dim=32, classes=3, preprocessing=
    ...                       Preprocessing.from_mode("imagenet", image_size=32))
    >>> display, inputs = load_images(np.zeros((40, 60, 3), "uint8"), model)
    >>> display.shape, inputs.dtype
    ((1, 32, 32, 3), dtype('float32'))
    """
    record = _record(model, preprocessing)
    display, inputs = [], []
    for image in read_images(images):
        if image.dtype != np.uint8:
            image = np.asarray(image, "float32")
        resized = resize_and_crop(image, record)
        display.append(np.clip(np.round(resized), 0, 255).astype("uint8"))
        inputs.append(preprocess_input(np.asarray(resized, "float32"), preprocessing=record))
    return np.stack(display), np.stack(inputs).astype("float32")
