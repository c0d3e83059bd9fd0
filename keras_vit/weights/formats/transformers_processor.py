"""transformers image processor files (`preprocessor_config.json`) <-> `Preprocessing` records.

What every transformers family's processor file holds (the ViT, DeiT, CLIP,
SigLIP and BiT processors alike): `image_mean`/`image_std`, `do_rescale`
with `rescale_factor`, `do_normalize`, `size` (`{"height", "width"}`,
`{"shortest_edge"}` or an int, which the ViT/DeiT processors read as a
square), an optional centre crop (`do_center_crop`, `crop_size`),
`do_resize` and `resample` (a PIL filter number). A family whose processor
class reads more (SigLIP2's patch budget) adjusts the record in its own
module (`TransformersFamily.preprocessing`, `.export_preprocessor`).
"""

from keras_vit.weights.record import MODE_STATISTICS, Preprocessing

# PIL filter numbers of `resample`.
RESAMPLE = {0: "nearest", 1: "lanczos", 2: "bilinear", 3: "bicubic", 4: "box", 5: "hamming"}


def _size_of(value):
    if isinstance(value, int):
        return (value, value)
    if isinstance(value, dict) and "height" in value and "width" in value:
        return (value["height"], value["width"])
    return None


def _statistics(config, deit):
    """`(mean, std)` in [0, 1] units of a processor file."""
    # Model input = (x * rescale - mean) / std for x in [0, 255]; in [0, 1]
    # units the statistics are divided by 255 * rescale.
    rescale = config.get("rescale_factor", 1 / 255) if config.get("do_rescale", True) else 1.0
    unit = 255.0 * rescale
    if config.get("do_normalize", True):
        mean, std = MODE_STATISTICS["imagenet" if deit else "inception"]
        mean = config.get("image_mean", mean)
        std = config.get("image_std", std)
    else:
        mean, std = (0.0,), (1.0,)
    mean = [m / unit for m in (mean if isinstance(mean, (list, tuple)) else [mean])]
    std = [s / unit for s in (std if isinstance(std, (list, tuple)) else [std])]
    return mean, std


def preprocessing(config):
    """A `Preprocessing` record from a `preprocessor_config.json` dict.

    Fields a file leaves out take the processor class's defaults (the DeiT
    processor: ImageNet statistics and a centre crop; the ViT one: 0.5 and
    no crop).

    Example:

    >>> record = preprocessing({"image_processor_type": "DeiTImageProcessor",
    ...     "size": {"height": 256, "width": 256}, "crop_size": 224, "resample": 3})
    >>> record.mode, record.image_size, record.resize, record.interpolation
    ('imagenet', (224, 224), (256, 256), 'bicubic')
    """
    kind = str(config.get("image_processor_type") or config.get("feature_extractor_type") or "")
    deit = kind.startswith("DeiT")
    mean, std = _statistics(config, deit)
    size = config.get("size")
    resize = _size_of(size)
    if isinstance(size, dict) and "shortest_edge" in size:
        resize = size["shortest_edge"]
    crop = _size_of(config.get("crop_size")) if config.get("do_center_crop", deit) else None
    image_size = crop or (resize if isinstance(resize, tuple) else None)
    if not config.get("do_resize", True):
        resize = None
    return Preprocessing(
        mean=mean,
        std=std,
        image_size=image_size,
        resize=None if resize == image_size else resize,
        interpolation=RESAMPLE.get(config.get("resample", 2), "bilinear"),
    )


def export_preprocessor(record):
    """A `preprocessor_config.json` dict for a `Preprocessing` record.

    transformers' ViT/DeiT processors resize to an exact height and width,
    so a shorter-side resize becomes a square one of that side; a centre
    crop needs the DeiT processor (the ViT one has none).

    Example:

    >>> out = export_preprocessor(Preprocessing.from_mode("imagenet", image_size=(224, 224)))
    >>> out["image_processor_type"], out["size"], out["resample"]
    ('ViTImageProcessor', {'height': 224, 'width': 224}, 3)
    """
    names = {v: k for k, v in RESAMPLE.items()}
    crop = record.image_size
    resize = record.resize
    if isinstance(resize, int):
        resize = (resize, resize)
    out = {
        "do_resize": True,
        "resample": names.get(record.interpolation, 3),
        "do_rescale": True,
        "rescale_factor": 1 / 255,
        "do_normalize": True,
        "image_mean": list(record.mean),
        "image_std": list(record.std),
    }
    if resize is None or crop is None:
        size = resize or crop or (224, 224)
        out.update(image_processor_type="ViTImageProcessor", size={"height": size[0], "width": size[1]})
    else:
        out.update(
            image_processor_type="DeiTImageProcessor",
            size={"height": resize[0], "width": resize[1]},
            do_center_crop=True,
            crop_size={"height": crop[0], "width": crop[1]},
        )
    return out
