"""Images read and prepared as a model's checkpoint expects, for every task.

Every task reads its images here, by one contract (`read_images`, a batch
at a time `read_batches`): file paths and http(s) URLs (turned upright as
their EXIF orientation says), PIL images (turned upright too) and arrays,
converted to RGB pixels in [0, 255] (`image_pixels`): grey levels repeated,
an alpha channel dropped, 16-bit levels kept to their high byte,
channels-first arrays `(C, H, W)` turned channels-last, and float arrays in
[0, 1] multiplied by 255 with a warning (a float array is taken as [0, 255]
otherwise; values outside [0, 255] are refused).
`load_images(images, model)` then resizes and centre-crops them as the
model's `Preprocessing` record says (`keras_vit.preprocessing.resize_and_crop`)
and scales them (`preprocess_input`). The one-call functions of the tasks
(`keras_vit.classify`, `estimate_depth`, `segment`, `detect`,
`segment_prompts`, `generate_masks`) start with it.
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


def _decoded(opener, path):
    """The upright PIL image `opener()` opens, decoded: any failure of the
    decoder (an unknown or truncated file, a broken EXIF block) is a
    ValueError naming `path`."""
    from PIL import ImageOps

    try:
        with opener() as image:
            upright = ImageOps.exif_transpose(image)  # phone photos store their orientation apart
            upright.load()
            return upright
    except Exception as error:  # noqa: BLE001 - whatever the decoder raises, named by the file
        reason = str(error) or type(error).__name__
        raise ValueError(f"Cannot read the image {path!r}: {reason}") from None


def _read(path):
    try:
        from PIL import Image
    except ImportError as error:
        raise ImportError("Reading image files needs Pillow: pip install pillow") from error
    path = os.fspath(path)
    if path.startswith(URL_SCHEMES):
        import io

        data = _fetch(path)
        return rgb_pixels(_decoded(lambda: Image.open(io.BytesIO(data)), path), f"The image {path!r}")
    if os.path.isdir(path):
        raise ValueError(f"{path!r} is a folder, not an image file: give the images in it "
                         "(the keras-vit commands take a folder for the images it holds).")
    if not os.path.isfile(path):
        raise ValueError(f"No image file at {path!r} (resolved to {os.path.abspath(path)!r}).")
    return rgb_pixels(_decoded(lambda: Image.open(path), path), f"The image {path!r}")


# The channel counts of an image: grey, RGB, RGBA.
CHANNELS = (1, 3, 4)


def _levels(array, where):
    """`array`'s pixels as uint8, or float32 in [0, 255]; `(pixels, scaled)`,
    `scaled` True where float pixels in [0, 1] were multiplied by 255."""
    if array.dtype == np.uint8:
        return array, False
    if array.dtype == np.uint16:  # 16-bit levels, read as 16-bit image files are
        return _high_byte(array, where), False
    kind = array.dtype.kind
    if not array.size:
        raise ValueError(f"{where} is empty. Received: shape {array.shape}")
    if kind not in "iuf":
        raise ValueError(f"{where} must hold pixel values: uint8 levels, or floats in [0, 255] or [0, 1]. "
                         f"Received: dtype {array.dtype}, shape {array.shape}")
    if kind == "f" and not np.isfinite(array).all():
        raise ValueError(f"{where} holds {int((~np.isfinite(array)).sum())} NaN or infinite value(s): "
                         "pixels must be finite.")
    low, high = array.min(), array.max()
    if low < 0 or high > 255:
        raise ValueError(
            f"{where} holds values from {low:.4g} to {high:.4g}: pixels must be in [0, 255] (uint8, or floats "
            "in [0, 255]; floats in [0, 1] are multiplied by 255). An image scaled for a model already goes "
            "to the model, not to the task's function; an image resized as floats may need np.clip(x, 0, 255)."
        )
    if kind != "f":
        return array.astype("uint8"), False
    if 0 < high <= 1:  # [0, 1], as skimage and torchvision hold images: to [0, 255]
        return (np.asarray(array, "float64") * 255).astype("float32"), True
    return np.asarray(array, "float32"), False


def image_pixels(array, where="The image", scaled=None):
    """One image array as `(H, W, 3)` RGB pixels in [0, 255], the contract
    every task reads arrays by.

    - shape: `(H, W)` grey, `(H, W, C)`, or channels-first `(C, H, W)`
      (C 1, 3 or 4, where the last axis cannot be channels, as torch holds
      images); grey is repeated to RGB, an alpha channel dropped;
    - values: uint8; uint16, read as 16-bit levels (their high byte, as a
      16-bit file is); other integers and floats in [0, 255]; floats in
      [0, 1] (not all zero), multiplied by 255, with a warning (or, given
      a list `scaled`, `where` appended to it for the caller to warn once).
      NaN, infinities and values outside [0, 255] are refused.

    Args:
        array: the image, NumPy or anything `np.asarray` takes.
        where: how the image is named in messages.
        scaled: None, or a list that collects the names of images scaled
            from [0, 1].

    Returns:
        uint8 (for uint8 and integer input) or float32 `(H, W, 3)`.

    Example:

    >>> image_pixels(np.zeros((3, 5, 7), "uint8")).shape  # channels first
    (5, 7, 3)
    >>> image_pixels(np.full((2, 2), 0.5), scaled=[])[0, 0].tolist()  # [0, 1] floats
    [127.5, 127.5, 127.5]
    """
    array = np.asarray(array)
    if array.ndim == 2:
        array = array[..., None]
    if array.ndim == 3 and array.shape[0] in CHANNELS and array.shape[-1] not in CHANNELS:
        array = np.moveaxis(array, 0, -1)
    if array.ndim != 3 or array.shape[-1] not in CHANNELS:
        raise ValueError(
            f"{where} must be an (height, width), (height, width, 1 | 3 | 4) or channels-first "
            f"(1 | 3 | 4, height, width) image. Received: shape {array.shape}"
        )
    array, was_scaled = _levels(array, where)
    if was_scaled:
        if scaled is None:
            warn_scaled([where])
        else:
            scaled.append(where)
    if array.shape[-1] == 1:
        array = np.repeat(array, 3, axis=-1)
    return array[..., :3]


def warn_scaled(names):
    """The warning, once per call of a task, that images (`names`, the
    first named) held floats in [0, 1] and were multiplied by 255."""
    import warnings

    warnings.warn(
        f"{names[0]} holds floats in [0, 1]: read as a [0, 1] image, multiplied by 255, as is every such image "
        "of this call (the tasks take pixels in [0, 255], uint8 or float). Pass uint8 images, or floats in "
        "[0, 255], to read images without this warning.",
        UserWarning,
        stacklevel=4,
    )


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


def _read_one(image, index, scaled=None):
    if isinstance(image, (str, os.PathLike)):
        return _read(image)
    if _pil_image(image) is not None:
        from PIL import ImageOps

        # Upright as a file's pixels are: a PIL image opened by the caller keeps its EXIF orientation.
        return rgb_pixels(ImageOps.exif_transpose(image), f"`images[{index}]`")
    return image_pixels(image, f"`images[{index}]`", scaled)


def read_images(images):
    """`images` (a path, a PIL image, an array, a batch or a list of these) as a
    list of `(H, W, 3)` NumPy images in [0, 255], each at its own size.

    Files and http(s) URLs and PIL images are turned upright (their EXIF
    orientation) and converted by `rgb_pixels`; arrays by `image_pixels`
    (grey, RGBA, channels-first, 16-bit, float images in [0, 1] multiplied
    by 255 with one warning for the call).

    Example:

    >>> [image.shape for image in read_images(np.zeros((2, 5, 7, 1), "uint8"))]
    [(5, 7, 3), (5, 7, 3)]
    """
    scaled = []
    out = [_read_one(image, i, scaled) for i, image in enumerate(_as_list(images))]
    if not out:
        raise ValueError("`images` is empty: give at least one image.")
    if scaled:
        warn_scaled(scaled)
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
    that run a batch before reading the next, with their progress
    (`keras_vit.tasks.progress.Progress`: Keras' bar on a terminal, plain
    lines in a log). `size` and `verbose` are checked at the call, before
    anything is read.

    Args:
        images: as `read_images` takes them.
        size: int: images per batch.
        verbose: "auto" (default: progress when the images make more than
            one batch), 0 (silent), 1 (progress) or 2 (one line at the
            end), as Keras' `predict`.

    Example:

    >>> [len(part) for part in read_batches(np.zeros((5, 8, 8, 3), "uint8"), 2, verbose=0)]
    [2, 2, 1]
    """
    from keras_vit.validation import check_positive_int, check_verbose

    parts = image_batches(images, check_positive_int(size, "batch_size"))
    verbose = check_verbose(verbose, len(parts))
    return _batches(parts, verbose)


def _batches(parts, verbose):
    from keras_vit.tasks.progress import Progress

    progress = Progress(sum(len(part) for part in parts), verbose, "image")
    done, warned = 0, False
    for part in parts:
        # Errors name an image by its place in `images`, not in its batch.
        scaled = []
        batch = [_read_one(image, done + i, scaled) for i, image in enumerate(part)]
        if scaled and not warned:  # once per call
            warn_scaled(scaled)
            warned = True
        yield batch
        done += len(part)
        progress.update(done)


def preprocessing_record(model, preprocessing=None):
    """The `Preprocessing` record that prepares images for `model`.

    Args:
        model: a keras_vit model.
        preprocessing: None (default: `model.preprocessing`), a mode
            ("inception", "imagenet") or a `Preprocessing` record (or its
            config).

    Returns:
        A `Preprocessing` with the model's input size where it names none.

    Example:

    >>> import keras_vit
    >>> model = keras_vit.ViT(image_size=32, patch_size=8, hidden_size=16, num_layers=1,
    ...                       num_heads=2, mlp_dim=32, classes=2)
    >>> preprocessing_record(model, "imagenet").image_size
    (32, 32)
    """
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
        # (height, width) of images, and of a video model's frames.
        record = record.for_image_size(tuple(model.input_shape[-3:-1]))
    return record


def load_images(images, model, preprocessing=None):
    """Reads images and prepares them as `model`'s checkpoint expects.

    Args:
        images: a file path or http(s) URL, a PIL image, an `(H, W, C)` array in [0, 255]
            (or [0, 1], multiplied by 255 with a warning; grey, RGBA and
            channels-first too: `image_pixels`), a batch `(N, H, W, C)`, or
            a list of any of these (sizes may differ).
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
    record = preprocessing_record(model, preprocessing)
    display, inputs = [], []
    for image in read_images(images):  # uint8, or float32 in [0, 255]
        resized = resize_and_crop(image, record)
        display.append(np.clip(np.round(resized), 0, 255).astype("uint8"))
        # uint8 as it is: `preprocess_input` questions the range of floats only, which were read already.
        inputs.append(preprocess_input(resized, preprocessing=record))
    return np.stack(display), np.stack(inputs).astype("float32")
