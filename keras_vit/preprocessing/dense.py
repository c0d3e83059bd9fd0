"""How a dense model's images are prepared: the `DenseProcessing` record.

Depth and segmentation checkpoints do not resize their images to one square:
Depth Anything and DPT keep the aspect ratio and round each side to a
multiple of the patch size, EoMT resizes the shorter side and pads (or, for
semantic segmentation, cuts the image into overlapping squares), CHMv2 only
pads to a multiple of 16. `DenseProcessing` holds these rules as data, read
from and written to transformers' image processor files
(`DPTImageProcessor`, `EomtImageProcessor`, `CHMv2ImageProcessor`), and
`prepare_image` applies them to one image, returning what the
post-processing needs to map the predictions back onto the image (the
resized size, the padding, the crops).

Resizing is Pillow's, antialiased when shrinking, as transformers' Pillow
image processors do (`keras_vit.preprocessing.resize_and_crop` uses the
same filter); the scaling is `(x / 255 - mean) / std` per channel.
"""

import dataclasses
import math

import numpy as np

from keras_vit.preprocessing.crops import _pil_resize
from keras_vit.validation import check_bool, check_choice, check_positive_int, check_record_config
from keras_vit.weights.record import MODE_STATISTICS, RESAMPLING

# How the image is resized before the model:
# "exact" to `size`; "keep_aspect" DPT's rule (scale by the factor nearer 1
# of the two, each side rounded to a multiple of `multiple`); "shorter_side"
# EoMT's (the shorter side to `size[0]`, the longer capped at `size[1]`, or
# uncapped when it is None); "none" no resize.
RESIZES = ("exact", "keep_aspect", "shorter_side", "none")
# Padding after the resize: "center" zeros (of the scaled pixels) to a
# multiple of `pad_multiple` (DPT's processor, CHMv2); "end" black pixels
# (zeros before the scaling) below and right up to `size` (EoMT's).
PADDINGS = ("none", "center", "end")
PIL_RESAMPLE = {0: "nearest", 1: "lanczos", 2: "bilinear", 3: "bicubic", 4: "box", 5: "hamming"}


def _size(value, name):
    if value is None:
        return None
    if isinstance(value, int) and not isinstance(value, bool):
        value = (value, value)
    try:
        out = tuple(value)
    except TypeError:
        out = ()
    if len(out) != 2 or not all(v is None or (isinstance(v, int) and not isinstance(v, bool) and v > 0) for v in out):
        raise ValueError(f"`{name}` must be None, an int or a (height, width) pair. Received: {name}={value!r}")
    return out


@dataclasses.dataclass(frozen=True)
class DenseProcessing:
    """How a depth or segmentation model's images are prepared, as data.

    Args:
        mean: per-channel means of [0, 1] pixels, default ImageNet's.
        std: per-channel standard deviations, default ImageNet's.
        size: `(height, width)` target of the resize ("exact",
            "keep_aspect"), `(shorter, longer or None)` for "shorter_side",
            and the padded size for `pad="end"`; None for `resize="none"`.
        resize: one of `RESIZES`, default "exact".
        multiple: int, default 1: "keep_aspect" rounds each side to a
            multiple of it (Depth Anything: 14).
        pad: one of `PADDINGS`, default "none".
        pad_multiple: int, default 1: `pad="center"` pads each side to a
            multiple of it, half before and half after.
        split: bool, default False: cut the resized image into overlapping
            `size[0]`-pixel squares along its longer side (EoMT's semantic
            segmentation), merged back by the post-processing.
        interpolation: the resize's filter, one of
            `keras_vit.weights.record.RESAMPLING`, default "bicubic".

    Example:

    >>> record = DenseProcessing(size=(518, 518), resize="keep_aspect", multiple=14)
    >>> record.resized_size((480, 640))
    (518, 686)
    >>> DenseProcessing.from_config(record.get_config()) == record
    True
    """

    mean: tuple = MODE_STATISTICS["imagenet"][0]
    std: tuple = MODE_STATISTICS["imagenet"][1]
    size: object = None
    resize: str = "exact"
    multiple: int = 1
    pad: str = "none"
    pad_multiple: int = 1
    split: bool = False
    interpolation: str = "bicubic"

    def __post_init__(self):
        mean = tuple(float(v) for v in self.mean)
        std = tuple(float(v) for v in self.std)
        if len(mean) != len(std) or not mean or min(std) <= 0:
            raise ValueError(
                f"`mean` and `std` must have one value per channel each, std > 0. Received: mean={self.mean!r}, "
                f"std={self.std!r}"
            )
        object.__setattr__(self, "mean", mean)
        object.__setattr__(self, "std", std)
        check_choice(self.resize, RESIZES, "resize")
        check_choice(self.pad, PADDINGS, "pad")
        check_choice(self.interpolation, RESAMPLING, "interpolation")
        check_positive_int(self.multiple, "multiple")
        check_positive_int(self.pad_multiple, "pad_multiple")
        check_bool(self.split, "split")
        size = _size(self.size, "size")
        object.__setattr__(self, "size", size)
        needs = self.resize != "none" or self.pad == "end" or self.split
        if needs and (size is None or size[0] is None or (self.resize != "shorter_side" and size[1] is None)):
            raise ValueError(
                f"`size` is needed for resize={self.resize!r}, pad={self.pad!r}, split={self.split!r}. "
                f"Received: size={self.size!r}"
            )
        if self.split and self.resize != "shorter_side":
            raise ValueError("`split=True` cuts squares of the shorter side: it needs resize='shorter_side'.")

    def resized_size(self, image_size):
        """`(height, width)` of an image of `image_size` after the resize."""
        height, width = image_size
        if self.resize == "none":
            return (height, width)
        if self.resize == "exact":
            return tuple(self.size)
        if self.resize == "keep_aspect":
            return _keep_aspect(height, width, self.size, self.multiple)
        return _shorter_side(height, width, self.size[0], self.size[1])

    def describe(self):
        """In words, what is done to an image (what an exported artifact's
        metadata says), as `Preprocessing.describe` does for classifiers.

        Example:

        >>> DenseProcessing(size=(518, 518), resize="keep_aspect", multiple=14).describe().split(", then")[0]
        'resized to fit 518x518 with its aspect ratio kept, each side a multiple of 14 (bicubic)'
        """
        size = self.size
        if self.resize == "exact":
            geometry = f"resized to {size[0]}x{size[1]} ({self.interpolation}, aspect ratio not kept)"
        elif self.resize == "keep_aspect":
            multiple = f", each side a multiple of {self.multiple}" if self.multiple > 1 else ""
            geometry = (f"resized to fit {size[0]}x{size[1]} with its aspect ratio kept{multiple} "
                        f"({self.interpolation})")
        elif self.resize == "shorter_side":
            longer = f", the longer at most {size[1]}" if size[1] is not None else ""
            geometry = f"the shorter side resized to {size[0]}{longer} ({self.interpolation}, aspect ratio kept)"
        else:
            geometry = "not resized"
        if self.pad == "center":
            geometry += f", padded on every side to multiples of {self.pad_multiple}"
        elif self.pad == "end":
            geometry += f", padded at the bottom and right to {size[0]}x{size[1]}"
        if self.split:
            geometry += f", cut into overlapping {size[0]}-pixel squares along the longer side"
        return (f"{geometry}, then (x / 255 - mean) / std with mean {[round(v, 6) for v in self.mean]} "
                f"and std {[round(v, 6) for v in self.std]}")

    def get_config(self):
        """A JSON-friendly dict; `DenseProcessing.from_config` inverts it."""
        config = dataclasses.asdict(self)
        config.update(mean=list(self.mean), std=list(self.std), size=None if self.size is None else list(self.size))
        return config

    @classmethod
    def from_config(cls, config):
        if isinstance(config, cls):
            return config
        config = check_record_config(cls, config, "preprocessing")
        if isinstance(config.get("size"), list):
            config["size"] = tuple(config["size"])
        return cls(**config)


def _constrain(value, multiple):
    # DPT's `constrain_to_multiple_of` (no bounds given).
    x = round(value / multiple) * multiple
    return x if x >= 0 else math.ceil(value / multiple) * multiple


def _keep_aspect(height, width, size, multiple):
    """DPT's resize with `keep_aspect_ratio`: the scale nearer 1 for both sides."""
    scale_h, scale_w = size[0] / height, size[1] / width
    if abs(1 - scale_w) < abs(1 - scale_h):
        scale_h = scale_w
    else:
        scale_w = scale_h
    return (int(_constrain(scale_h * height, multiple)), int(_constrain(scale_w * width, multiple)))


def _shorter_side(height, width, shorter, longer=None):
    """transformers' `get_size_with_aspect_ratio`: the shorter side to
    `shorter`, the longer one capped at `longer`."""
    raw = None
    if longer is not None:
        small, large = float(min(height, width)), float(max(height, width))
        if large / small * shorter > longer:
            raw = longer * small / large
            shorter = int(round(raw))
    if (height <= width and height == shorter) or (width <= height and width == shorter):
        return (height, width)
    if width < height:
        return (int((raw if raw is not None else shorter) * height / width), shorter)
    return (shorter, int((raw if raw is not None else shorter) * width / height))


def split_offsets(image_size, side):
    """EoMT's overlapping squares along the longer side: `[(start, end)]`.

    Example:

    >>> split_offsets((512, 700), 512)
    [(0, 512), (188, 700)]
    """
    longer = max(image_size)
    count = math.ceil(longer / side)
    overlap = (count * side - longer) / (count - 1) if count > 1 else 0
    return [(int(i * (side - overlap)), int(i * (side - overlap)) + side) for i in range(count)]


@dataclasses.dataclass(frozen=True)
class Prepared:
    """One image prepared for a dense model, and where its pixels went.

    Attributes:
        pixels: float32 `(n, height, width, 3)`: the model's inputs (n > 1
            for a split image).
        image_size: `(height, width)` of the original image.
        resized_size: its size after the resize, before any padding.
        padding: `(top, bottom, left, right)` zeros added after the resize.
        offsets: for a split image, `[(start, end)]` of each square along
            the longer side; else None.
    """

    pixels: np.ndarray
    image_size: tuple
    resized_size: tuple
    padding: tuple = (0, 0, 0, 0)
    offsets: object = None


def _pad(image, record):
    height, width = image.shape[:2]
    if record.pad == "center":
        total_h = math.ceil(height / record.pad_multiple) * record.pad_multiple - height
        total_w = math.ceil(width / record.pad_multiple) * record.pad_multiple - width
        padding = (total_h // 2, total_h - total_h // 2, total_w // 2, total_w - total_w // 2)
    elif record.pad == "end":
        target_h, target_w = record.size[0], record.size[1] or record.size[0]
        padding = (0, max(0, target_h - height), 0, max(0, target_w - width))
    else:
        return image, (0, 0, 0, 0)
    top, bottom, left, right = padding
    return np.pad(image, ((top, bottom), (left, right), (0, 0))), padding


def scale_pixels(image, record):
    """`(x / 255 - mean) / std` of `[0, 255]` pixels, float32."""
    image = np.asarray(image, "float32")
    mean = np.asarray(record.mean, "float32")
    std = np.asarray(record.std, "float32")
    return ((image / np.float32(255.0) - mean) / std).astype("float32")


def prepare_image(image, preprocessing):
    """One `(H, W, 3)` image in [0, 255] prepared as `preprocessing` says.

    Args:
        image: NumPy `(H, W, 3)`, uint8 or float in [0, 255].
        preprocessing: a `DenseProcessing` record or its config.

    Returns:
        A `Prepared` record.

    Example:

    >>> record = DenseProcessing(size=(518, 518), resize="keep_aspect", multiple=14)
    >>> prepared = prepare_image(np.zeros((480, 640, 3), "uint8"), record)
    >>> prepared.pixels.shape, prepared.resized_size
    ((1, 518, 686, 3), (518, 686))
    """
    record = DenseProcessing.from_config(preprocessing)
    image = np.asarray(image)
    size = (int(image.shape[0]), int(image.shape[1]))
    resized = record.resized_size(size)
    if resized != size:
        image = _pil_resize(image, resized, record.interpolation)
    if record.pad == "end":
        image, padding = _pad(np.asarray(image, "float32"), record)
    pixels = scale_pixels(image, record)
    offsets = None
    if record.split:
        offsets = split_offsets(resized, record.size[0])
        if resized[0] > resized[1]:
            squares = [pixels[start:end] for start, end in offsets]
        else:
            squares = [pixels[:, start:end] for start, end in offsets]
        return Prepared(np.stack(squares), size, resized, (0, 0, 0, 0), offsets)
    if record.pad != "end":
        pixels, padding = _pad(pixels, record)
    return Prepared(pixels[None], size, resized, padding, offsets)


# The keys of transformers' dense image processor files that keras_vit reads;
# anything else is refused by name (`from_transformers`).
_PROCESSOR_KEYS = {
    "image_processor_type", "processor_class", "feature_extractor_type", "do_resize", "size", "resample",
    "do_rescale", "rescale_factor", "do_normalize", "image_mean", "image_std", "keep_aspect_ratio",
    "ensure_multiple_of", "do_pad", "size_divisor", "do_reduce_labels", "do_split_image", "ignore_index",
    "do_center_crop", "crop_size", "default_to_square", "data_format", "input_data_format", "return_tensors",
    "device", "disable_grouping", "do_convert_rgb", "pad_size",
}
# Processor types and what they do.
PROCESSOR_TYPES = ("DPTImageProcessor", "EomtImageProcessor", "CHMv2ImageProcessor")


def _processor_kind(config):
    kind = str(config.get("image_processor_type") or config.get("feature_extractor_type") or "")
    for known in PROCESSOR_TYPES:
        if kind.startswith(known):
            return known
    raise ValueError(
        f"The image processor must be one of {PROCESSOR_TYPES} (a depth or segmentation model's). "
        f"Received: image_processor_type={kind!r}"
    )


def _statistics(config):
    rescale = config.get("rescale_factor", 1 / 255) if config.get("do_rescale", True) else 1.0
    unit = 255.0 * rescale
    mean = config.get("image_mean", MODE_STATISTICS["imagenet"][0])
    std = config.get("image_std", MODE_STATISTICS["imagenet"][1])
    if not config.get("do_normalize", True):
        mean, std = (0.0, 0.0, 0.0), (1.0, 1.0, 1.0)
    mean = mean if isinstance(mean, (list, tuple)) else [mean] * 3
    std = std if isinstance(std, (list, tuple)) else [std] * 3
    return tuple(m / unit for m in mean), tuple(s / unit for s in std)


def from_transformers(config, defaults=None):
    """A `DenseProcessing` record from a `preprocessor_config.json` dict.

    Fields the file leaves out take the processor class's defaults (given
    as `defaults`, a dict of the same keys, then transformers' own).

    Raises:
        ValueError: for a processor type keras_vit does not read, a key it
            does not know (named), or settings it cannot reproduce
            (a centre crop).

    Example:

    >>> record = from_transformers({"image_processor_type": "DPTImageProcessor",
    ...     "size": {"height": 518, "width": 518}, "keep_aspect_ratio": True,
    ...     "ensure_multiple_of": 14, "resample": 3})
    >>> record.resize, record.multiple, record.interpolation
    ('keep_aspect', 14, 'bicubic')
    """
    unknown = sorted(set(config) - _PROCESSOR_KEYS)
    if unknown:
        raise ValueError(f"Unknown image processor setting(s) {unknown}: keras_vit does not know what they do.")
    kind = _processor_kind(config)
    config = {**_PROCESSOR_DEFAULTS[kind], **(defaults or {}), **config}
    if config.get("do_center_crop"):
        raise ValueError("A centre crop (do_center_crop=True) is not part of a dense model's processing.")
    mean, std = _statistics(config)
    size = config.get("size") or {}
    interpolation = PIL_RESAMPLE.get(config.get("resample"), "bilinear")
    common = dict(mean=mean, std=std, interpolation=interpolation)
    if kind == "EomtImageProcessor":
        shorter, longer = size.get("shortest_edge"), size.get("longest_edge")
        split = bool(config.get("do_split_image", False))
        return DenseProcessing(
            size=(shorter, longer), resize="shorter_side" if config.get("do_resize", True) else "none",
            pad="end" if config.get("do_pad", False) and not split else "none", split=split, **common,
        )
    target = (size.get("height"), size.get("width")) if size else None
    if not config.get("do_resize", True):
        resize = "none"
    else:
        resize = "keep_aspect" if config.get("keep_aspect_ratio", False) else "exact"
    pad = "center" if config.get("do_pad", False) and config.get("size_divisor") else "none"
    return DenseProcessing(
        size=target if resize != "none" else None, resize=resize,
        multiple=int(config.get("ensure_multiple_of") or 1), pad=pad,
        pad_multiple=int(config.get("size_divisor") or 1) if pad == "center" else 1, **common,
    )


# The processor classes' own defaults (transformers 5).
_PROCESSOR_DEFAULTS = {
    "DPTImageProcessor": dict(size={"height": 384, "width": 384}, resample=3, keep_aspect_ratio=False,
                              ensure_multiple_of=1, do_pad=False, image_mean=[0.5] * 3, image_std=[0.5] * 3),
    "EomtImageProcessor": dict(size={"shortest_edge": 640, "longest_edge": 640}, resample=2, do_pad=False,
                               do_split_image=False),
    "CHMv2ImageProcessor": dict(size={"height": 384, "width": 384}, resample=3, do_resize=False, do_pad=True,
                                size_divisor=16, ensure_multiple_of=16, keep_aspect_ratio=True,
                                image_mean=[0.420, 0.411, 0.296], image_std=[0.213, 0.156, 0.143]),
}


def to_transformers(record, kind):
    """A `preprocessor_config.json` dict of `kind` (one of `PROCESSOR_TYPES`) for a record.

    Example:

    >>> out = to_transformers(DenseProcessing(size=(518, 518), resize="keep_aspect", multiple=14),
    ...                       "DPTImageProcessor")
    >>> out["keep_aspect_ratio"], out["ensure_multiple_of"], out["size"]
    (True, 14, {'height': 518, 'width': 518})
    """
    check_choice(kind, PROCESSOR_TYPES, "kind")
    names = {v: k for k, v in PIL_RESAMPLE.items()}
    out = {
        "image_processor_type": kind,
        "do_rescale": True,
        "rescale_factor": 1 / 255,
        "do_normalize": True,
        "image_mean": list(record.mean),
        "image_std": list(record.std),
        "resample": names.get(record.interpolation, 2),
        "do_resize": record.resize != "none",
    }
    if kind == "EomtImageProcessor":
        if record.resize not in ("shorter_side", "none"):
            raise ValueError(f"EomtImageProcessor resizes the shorter side. Received: resize={record.resize!r}")
        shorter, longer = record.size
        out.update(size={"shortest_edge": shorter, "longest_edge": longer}, do_pad=record.pad == "end",
                   do_split_image=record.split)
        return out
    if record.resize == "shorter_side" or record.pad == "end" or record.split:
        raise ValueError(f"{kind} resizes to a height and width, without splits or end padding.")
    size = record.size or (384, 384)
    out.update(
        size={"height": size[0], "width": size[1]}, keep_aspect_ratio=record.resize == "keep_aspect",
        ensure_multiple_of=record.multiple, do_pad=record.pad == "center",
        size_divisor=record.pad_multiple if record.pad == "center" else None,
    )
    return out


__all__ = [
    "DenseProcessing", "PADDINGS", "PROCESSOR_TYPES", "Prepared", "RESIZES", "from_transformers",
    "prepare_image", "scale_pixels", "split_offsets", "to_transformers",
]
