"""Checkpoint metadata as data: `WeightsRecord` (one published file) and
`Preprocessing` (how a checkpoint's images are prepared)."""

import dataclasses

import numpy as np

from keras_vit.architectures import CLASSIFIERS
from keras_vit.validation import check_choice, check_fraction, check_positive_int, check_record_config, pair

# The input scalings a checkpoint can expect (`keras_vit.preprocess_input`
# modes): "inception" maps [0, 255] to [-1, 1] (every Google checkpoint),
# "imagenet" normalises with the ImageNet mean and std (DeiT, timm).
PREPROCESSING_MODES = ("inception", "imagenet")
# The per-channel mean and std of each mode, on [0, 1] pixels.
MODE_STATISTICS = {
    "inception": ((0.5, 0.5, 0.5), (0.5, 0.5, 0.5)),
    "imagenet": ((0.485, 0.456, 0.406), (0.229, 0.224, 0.225)),
}
# The names `keras.applications.imagenet_utils` uses for the same scalings.
MODE_ALIASES = {"tf": "inception", "torch": "imagenet"}
# The evaluation crop of each mode's checkpoints, where a command is given
# the mode alone (`keras-vit classify --preprocessing MODE`): the fraction
# of the resized shorter side the centre crop keeps (timm's `crop_pct`:
# DeiT's 224 from 256), or None for a straight resize to the input size
# (Google's evaluation of its checkpoints, vit_jax's input pipeline).
MODE_CROP_FRACTIONS = {"inception": None, "imagenet": 0.875}
# Resampling filters a checkpoint's resize may name.
RESAMPLING = ("nearest", "bilinear", "bicubic", "lanczos", "box", "hamming", "area")


@dataclasses.dataclass(frozen=True)
class WeightsRecord:
    """Metadata of one published checkpoint file.

    Args:
        name: weights name, e.g. "imagenet21k".
        architecture: architecture string, e.g. "B/16".
        urls: tuple of download URLs: the primary (GCS) URL first, then
            mirrors.
        file_name: name of the file in the cache, unique over the table.
        image_size: int, the training resolution (square).
        classes: int, width of the classifier head in the file.
        representation_size: width of the Dense+tanh pre-logits layer, or
            None when the file has none.
        preprocessing_mode: "inception" (inputs scaled to [-1, 1]) or
            "imagenet" (ImageNet mean/std), a `keras_vit.preprocess_input`
            mode; a model loaded with these weights gets the
            `Preprocessing` record of that mode (`model.preprocessing`).
        gelu_approximate: True when the weights were trained with the tanh
            GELU (every Google checkpoint), False for the exact erf GELU.
        license: SPDX licence identifier.
        params: int, exact parameter count of the model built for the
            record (head and pre-logits included).
        sha256: hex digest of the file, or None when none is published.
        description: what the checkpoint is, first sentence short.
        classifier: "token" (class token) or "gap" (global average pooling).

    Example:

    >>> record = WeightsRecord(
    ...     name="my-pets", architecture="Ti/16",
    ...     urls=("https://example.com/pets.npz",), file_name="pets.npz",
    ...     image_size=224, classes=37, representation_size=None,
    ...     preprocessing_mode="inception", gelu_approximate=True,
    ...     license="Apache-2.0", params=5_531_533, sha256=None,
    ...     description="ViT-Ti/16 fine-tuned on Oxford-IIIT Pets.")
    >>> record.key
    ('Ti/16', 'my-pets')
    """

    name: str
    architecture: str
    urls: tuple
    file_name: str
    image_size: int
    classes: int
    representation_size: object
    preprocessing_mode: str
    gelu_approximate: bool
    license: str
    params: int
    sha256: object
    description: str
    classifier: str = "token"

    def __post_init__(self):
        if isinstance(self.urls, str) or not self.urls:
            raise ValueError(
                "`urls` must be a non-empty tuple of URLs. "
                f"Received: urls={self.urls!r}"
            )
        object.__setattr__(self, "urls", tuple(self.urls))
        check_choice(self.preprocessing_mode, PREPROCESSING_MODES, "preprocessing_mode")
        check_choice(self.classifier, CLASSIFIERS, "classifier")
        if self.sha256 is not None and (
            len(self.sha256) != 64
            or any(c not in "0123456789abcdef" for c in self.sha256)
        ):
            raise ValueError(
                "`sha256` must be None or 64 lower-case hex digits. "
                f"Received: sha256={self.sha256!r}"
            )
        if "/" in self.file_name or not self.file_name:
            raise ValueError(
                "`file_name` must be a bare, non-empty file name. "
                f"Received: file_name={self.file_name!r}"
            )

    @property
    def key(self):
        """`(architecture, name)`, the record's key in `WEIGHTS`."""
        return (self.architecture, self.name)


def _size_pair(value, name, allow_int=False):
    if value is None:
        return None
    if allow_int and isinstance(value, int) and not isinstance(value, bool):
        if value < 1:
            raise ValueError(f"`{name}` must be positive. Received: {name}={value!r}")
        return value
    try:
        pair = tuple(value)
    except TypeError:
        pair = ()
    if len(pair) != 2 or not all(
        isinstance(v, int) and not isinstance(v, bool) and v > 0 for v in pair
    ):
        allowed = "a positive int (shorter side) or " if allow_int else ""
        raise ValueError(
            f"`{name}` must be {allowed}a (height, width) pair of positive ints. "
            f"Received: {name}={value!r}"
        )
    return pair


def _channel_stats(value, name, positive):
    try:
        stats = tuple(float(v) for v in value)
    except (TypeError, ValueError):
        stats = ()
    if not stats or (positive and min(stats) <= 0):
        kind = "positive numbers" if positive else "numbers"
        raise ValueError(
            f"`{name}` must be a non-empty sequence of {kind}, one per channel. "
            f"Received: {name}={value!r}"
        )
    return stats


@dataclasses.dataclass(frozen=True)
class Preprocessing:
    """How a checkpoint's images are prepared, as data.

    Pixels in [0, 255] are scaled to `(x / 255 - mean) / std` per channel
    (`preprocess_input(x, model=model)` does this); before that, data
    pipelines resize (`resize`: the shorter side to an int, or exactly to a
    `(height, width)`) and crop the centre `image_size`.

    Args:
        mean: per-channel means of [0, 1] pixels, default (0.5, 0.5, 0.5).
        std: per-channel standard deviations, default (0.5, 0.5, 0.5)
            (with the default mean: the [-1, 1] range of Google's
            checkpoints).
        image_size: `(height, width)` the model is fed (the centre crop), or
            None when unknown.
        resize: None (resize straight to `image_size`), an int (the shorter
            side, aspect ratio kept) or an exact `(height, width)`, applied
            before the centre crop; an exact resize to `image_size` is
            stored as None.
        interpolation: resampling filter of the resize, one of
            `RESAMPLING`, default "bicubic".
        num_frames: None (default: images) or a positive int: the frames a
            video checkpoint's processor samples from a clip, evenly spaced
            (`keras_vit.classify_video`); each frame is then prepared as an
            image.

    Example:

    >>> prep = Preprocessing.from_mode("imagenet", image_size=224, crop_fraction=0.875)
    >>> prep.resize, prep.image_size, prep.mode
    (256, (224, 224), 'imagenet')
    >>> Preprocessing.from_config(prep.get_config()) == prep
    True
    """

    mean: tuple = (0.5, 0.5, 0.5)
    std: tuple = (0.5, 0.5, 0.5)
    image_size: object = None
    resize: object = None
    interpolation: str = "bicubic"
    num_frames: object = None

    def __post_init__(self):
        mean = _channel_stats(self.mean, "mean", positive=False)
        std = _channel_stats(self.std, "std", positive=True)
        if len(mean) != len(std):
            raise ValueError(
                "`mean` and `std` must have one value per channel each. "
                f"Received: mean={self.mean!r}, std={self.std!r}"
            )
        check_choice(self.interpolation, RESAMPLING, "interpolation")
        check_positive_int(self.num_frames, "num_frames", allow_none=True)
        size = self.image_size
        if isinstance(size, int) and not isinstance(size, bool):
            size = (size, size)
        object.__setattr__(self, "mean", mean)
        object.__setattr__(self, "std", std)
        object.__setattr__(self, "image_size", _size_pair(size, "image_size"))
        resize = _size_pair(self.resize, "resize", allow_int=True)
        # An exact resize to the input size is no separate step.
        object.__setattr__(self, "resize", None if resize == self.image_size else resize)

    @classmethod
    def from_mode(cls, mode, image_size=None, crop_fraction=None, interpolation="bicubic"):
        """The record of a `preprocess_input` mode ("inception" or "imagenet").

        Args:
            mode: "inception" or "imagenet" ("tf"/"torch" accepted).
            image_size: optional int or `(height, width)` model input.
            crop_fraction: None (default: a straight resize to `image_size`)
                or a float in (0, 1]: the shorter side is resized to
                `image_size / crop_fraction` before the centre crop
                (`with_crop_fraction`).
            interpolation: default "bicubic".
        """
        mode = check_choice(MODE_ALIASES.get(mode, mode), PREPROCESSING_MODES, "mode")
        mean, std = MODE_STATISTICS[mode]
        record = cls(mean, std, image_size, None, interpolation)
        return record if crop_fraction is None else record.with_crop_fraction(crop_fraction)

    def with_crop_fraction(self, crop_fraction):
        """The same record with a centre crop of `crop_fraction`.

        The shorter side is resized to `int(min(image_size) / crop_fraction)`
        (aspect ratio kept) and the centre `image_size` cut out: timm's
        `crop_pct`, 0.875 for ImageNet's 224 from 256; 1 keeps the whole
        shorter side.

        Args:
            crop_fraction: float in (0, 1].

        Raises:
            ValueError: a fraction outside (0, 1], or a record without
                `image_size`.

        Example:

        >>> record = Preprocessing.from_mode("imagenet", image_size=(224, 320))
        >>> record.with_crop_fraction(0.875).resize, record.with_crop_fraction(1).resize
        (256, 224)
        """
        crop_fraction = check_fraction(crop_fraction, "crop_fraction")
        if self.image_size is None:
            raise ValueError(f"`crop_fraction` needs `image_size`. Received: crop_fraction={crop_fraction!r}, "
                             "image_size=None")
        return dataclasses.replace(self, resize=int(min(self.image_size) / crop_fraction))

    def describe(self):
        """In words, what is done to an image: the resize, its filter, the
        centre crop, the scaling (what an exported artifact's metadata says).

        Example:

        >>> Preprocessing.from_mode("imagenet", image_size=224, crop_fraction=0.875).describe()
        'the shorter side resized to 256 (bicubic, aspect ratio kept), the centre 224x224 cut out (crop fraction 0.875), then (x / 255 - mean) / std with mean [0.485, 0.456, 0.406] and std [0.229, 0.224, 0.225]'
        >>> Preprocessing.from_mode("inception", image_size=(32, 48)).describe().split(", then")[0]
        'resized to 32x48 (bicubic, aspect ratio not kept)'
        """
        size = "x".join(map(str, self.image_size)) if self.image_size else "the model's input size"
        if self.resize is None:
            geometry = f"resized to {size} ({self.interpolation}, aspect ratio not kept)"
        else:
            if isinstance(self.resize, int):
                resized = f"the shorter side resized to {self.resize} ({self.interpolation}, aspect ratio kept)"
            else:
                resized = f"resized to {self.resize[0]}x{self.resize[1]} ({self.interpolation})"
            geometry = f"{resized}, the centre {size} cut out (crop fraction {self.crop_fraction:.4g})"
        frames = "" if self.num_frames is None else f"{self.num_frames} frames sampled evenly from the clip, each "
        return (f"{frames}{geometry}, then (x / 255 - mean) / std with mean {[round(v, 6) for v in self.mean]} "
                f"and std {[round(v, 6) for v in self.std]}")

    @property
    def mode(self):
        """"inception" or "imagenet" when the statistics are a mode's, else None."""
        for name, (mean, std) in MODE_STATISTICS.items():
            if np.allclose(self.mean, mean, atol=1e-6) and np.allclose(self.std, std, atol=1e-6):
                return name
        return None

    @property
    def crop_fraction(self):
        """The share of the resized image the centre crop keeps (1.0: no crop).

        Example:

        >>> Preprocessing(image_size=224, resize=256).crop_fraction
        0.875
        """
        if self.resize is None or self.image_size is None:
            return 1.0
        if isinstance(self.resize, int):
            return min(self.image_size) / self.resize
        return min(c / r for c, r in zip(self.image_size, self.resize))

    def for_image_size(self, image_size):
        """The same preprocessing for another model input size.

        The resize keeps its ratio to the crop (a 256 -> 224 resize and crop
        becomes 438 -> 384 for 384 px); an exact resize to `image_size` stays
        exact.
        """
        size = pair(image_size, "image_size")
        resize = self.resize
        if resize is not None and self.image_size is not None:
            if isinstance(resize, int):
                resize = int(resize * min(size) / min(self.image_size))
            elif resize == self.image_size:
                resize = size
            else:
                resize = tuple(int(r * s / o) for r, s, o in zip(resize, size, self.image_size))
        return dataclasses.replace(self, image_size=size, resize=resize)

    def get_config(self):
        """A JSON-friendly dict; `Preprocessing.from_config` inverts it
        (`num_frames` only when set: a video checkpoint's)."""
        config = {
            "mean": list(self.mean),
            "std": list(self.std),
            "image_size": list(self.image_size) if self.image_size else None,
            "resize": list(self.resize) if isinstance(self.resize, tuple) else self.resize,
            "interpolation": self.interpolation,
        }
        if self.num_frames is not None:
            config["num_frames"] = self.num_frames
        return config

    @classmethod
    def from_config(cls, config):
        if isinstance(config, cls):
            return config
        config = check_record_config(cls, config, "preprocessing")
        for key in ("image_size", "resize"):
            if isinstance(config.get(key), list):
                config[key] = tuple(config[key])
        return cls(**config)
