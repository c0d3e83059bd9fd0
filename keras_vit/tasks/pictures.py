"""Pictures a person looks at: a coloured depth map, and segments over the
photo with a legend (what `keras-vit depth` and `keras-vit segment` write).

Pillow draws them (no Matplotlib): `depth_picture` maps depths to colours
along a perceptual ramp (dark purple for the smallest value, pale yellow
for the largest: near for Depth Anything's inverse depth, far for metric
depth); `segments_picture` blends each segment's colour over the photo at
`alpha` and adds a legend of the segments' names (and scores) beside it.
"""

import colorsys

import numpy as np

# A dark-to-light ramp (sRGB, [0, 255]), interpolated linearly between stops.
RAMP = np.array([
    (0, 0, 4), (40, 11, 84), (101, 21, 110), (159, 42, 99), (212, 72, 66), (245, 125, 21), (250, 193, 39),
    (252, 255, 164),
], "float32")


def _pil():
    try:
        from PIL import Image, ImageDraw, ImageFont
    except ImportError as error:
        raise ImportError("Writing pictures needs Pillow: pip install pillow") from error
    return Image, ImageDraw, ImageFont


def depth_picture(depth):
    """A `(H, W)` depth map as an RGB uint8 picture, its range spread over `RAMP`.

    Example:

    >>> picture = depth_picture(np.linspace(0, 1, 12).reshape(3, 4))
    >>> picture.shape, picture[0, 0].tolist(), picture[-1, -1].tolist()
    ((3, 4, 3), [0, 0, 4], [252, 255, 164])
    """
    depth = np.asarray(depth, "float32")
    low, high = float(np.nanmin(depth)), float(np.nanmax(depth))
    t = (depth - low) / (high - low) if high > low else np.zeros_like(depth)
    position = np.clip(t, 0, 1) * (len(RAMP) - 1)
    index = np.minimum(position.astype(int), len(RAMP) - 2)
    frac = (position - index)[..., None]
    colours = RAMP[index] * (1 - frac) + RAMP[index + 1] * frac
    return np.round(colours).astype("uint8")


def palette(count):
    """`count` distinct RGB colours (hues a golden angle apart).

    Example:

    >>> palette(3).shape
    (3, 3)
    """
    hues = (np.arange(count) * 0.618033988749895) % 1.0
    return np.array([[round(255 * c) for c in colorsys.hsv_to_rgb(h, 0.75, 0.95)] for h in hues], "uint8")


def segments_picture(image, segmentation, segments, alpha=0.55):
    """The photo with each segment's colour over it, and a legend on the right.

    Args:
        image: the photo, `(H, W, 3)` uint8.
        segmentation: `(H, W)` ids (a `segment` result's "segmentation";
            -1: none).
        segments: its "segments" (dicts with "id", "label", "label_id",
            "score").
        alpha: float, default 0.55: the colours' opacity.

    Returns:
        An RGB uint8 picture `(H, W + legend, 3)`.

    Example:

    >>> image = np.zeros((40, 30, 3), "uint8")
    >>> picture = segments_picture(image, np.zeros((40, 30), int), [{"id": 0, "label": "sky",
    ...                            "label_id": 0, "score": None}])
    >>> picture.shape[0], picture.shape[1] > 30
    (40, True)
    """
    Image, ImageDraw, ImageFont = _pil()
    image = np.asarray(image, "uint8")
    colours = palette(max(len(segments), 1))
    out = image.astype("float32")
    for colour, item in zip(colours, segments):
        where = segmentation == item["id"]
        out[where] = (1 - alpha) * out[where] + alpha * colour
    font = ImageFont.load_default()
    lines = [
        (colour, f"{item['label'] if item.get('label') is not None else item['label_id']}"
                 + ("" if item.get("score") is None else f" {item['score']:.2f}"))
        for colour, item in zip(colours, segments)
    ]
    width = 24 + max((int(font.getlength(text)) for _, text in lines), default=40)
    height = max(image.shape[0], 14 * len(lines) + 8)
    canvas = Image.new("RGB", (image.shape[1] + width, height), (255, 255, 255))
    canvas.paste(Image.fromarray(np.round(out).astype("uint8")), (0, 0))
    draw = ImageDraw.Draw(canvas)
    for row, (colour, text) in enumerate(lines):
        top = 4 + 14 * row
        draw.rectangle([image.shape[1] + 4, top, image.shape[1] + 14, top + 10], fill=tuple(int(c) for c in colour))
        draw.text((image.shape[1] + 18, top - 1), text, fill=(0, 0, 0), font=font)
    return np.asarray(canvas)


def save_png(picture, path):
    """Writes an RGB (or grey) uint8 array as a PNG; returns the path."""
    Image, _, _ = _pil()
    Image.fromarray(np.asarray(picture, "uint8")).save(path, format="PNG")
    return path


__all__ = ["RAMP", "depth_picture", "palette", "save_png", "segments_picture"]
