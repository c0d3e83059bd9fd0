"""Pictures a person looks at: a coloured depth map, segments over the
photo with a legend, labelled boxes, and masks with their prompts (what
`keras-vit depth`, `segment`, `detect` and `masks` write).

Pillow draws them (no Matplotlib): `depth_picture` maps depths to colours
along a perceptual ramp (dark purple for the smallest value, pale yellow
for the largest: near for Depth Anything's inverse depth, far for metric
depth); `segments_picture` blends each segment's colour over the photo at
`alpha` and adds a legend of the segments' names (and scores) beside it;
`detections_picture` draws each detection's box in its label's colour and
its label and score on a filled tag, the tags placed so that none covers
another (`label_places`); `masks_picture` blends every mask over the photo
with its outline, and marks the prompts: clicks as dots, green on the
object (label 1) and red off it (label 0), boxes as rectangles.
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


def _text_colour(colour):
    """Black on a light colour, white on a dark one (ITU-R BT.601 luma)."""
    return (0, 0, 0) if 0.299 * colour[0] + 0.587 * colour[1] + 0.114 * colour[2] > 140 else (255, 255, 255)


def _overlaps(rects, others):
    """`(k, m)` areas that `(k, 4)` rectangles `(x0, y0, x1, y1)` share with `(m, 4)` others."""
    rects, others = np.asarray(rects, "int64")[:, None], np.asarray(others, "int64")[None]
    across = np.minimum(rects[..., 2], others[..., 2]) - np.maximum(rects[..., 0], others[..., 0])
    down = np.minimum(rects[..., 3], others[..., 3]) - np.maximum(rects[..., 1], others[..., 1])
    return np.clip(across, 0, None) * np.clip(down, 0, None)


def _in_picture(corners, w, h, width, height):
    """`(k, 4)` rectangles of size `(w, h)` at top-left `corners`, moved into the picture."""
    corners = np.asarray(corners, "int64").reshape(-1, 2)
    x = np.clip(corners[:, 0], 0, width - w)
    y = np.clip(corners[:, 1], 0, height - h)
    return np.stack([x, y, x + w, y + h], axis=-1)


# Rounds of stacking a tag against the tags in the way (below or above each).
STACKING_ROUNDS = 4


def label_places(boxes, sizes, image_size):
    """Where the tags of boxes go: each within the image, none over another.

    Each box's tag (a `(width, height)` of `sizes`, in the order of
    `boxes`: the best detection first gets the first choice) goes to the
    first of these places that no tag placed before it overlaps: above the
    box's top-left corner, inside it, below the bottom-left corner, inside
    that, then the same at the right-hand corners (each moved into the
    image). Where tags already hold all of them, the tag is stacked just
    below or above the tags in the way (nearest first); where no place is
    free, it goes where it covers least. So the tags of boxes that meet
    (side by side, one in another) do not hide each other.

    Args:
        boxes: `(x0, y0, x1, y1)` boxes in pixels.
        sizes: `(width, height)` of each tag.
        image_size: the picture's `(height, width)`.

    Returns:
        A list of `(x0, y0, x1, y1)` int rectangles, one per box.

    Example:

    >>> label_places([(10, 20, 40, 50), (10, 20, 60, 50)], [(30, 12), (30, 12)], (100, 100))
    [(10, 8, 40, 20), (10, 20, 40, 32)]
    """
    height, width = image_size
    placed = np.zeros((0, 4), "int64")
    for box, (w, h) in zip(boxes, sizes):
        x0, y0, x1, y1 = (int(round(float(v))) for v in box)
        w, h = min(int(w), width), min(int(h), height)
        xs = (x0, x1 - w)
        rects = _in_picture([(x, y) for x in xs for y in (y0 - h, y0, y1, y1 - h)], w, h, width, height)
        shared = _overlaps(rects, placed)
        for _ in range(STACKING_ROUNDS):
            if (shared.sum(1) == 0).any():
                break
            in_the_way = placed[(shared > 0).any(0)]
            corners = [(x, y) for x in xs for other in in_the_way for y in (other[3], other[1] - h)]
            corners.sort(key=lambda c: abs(c[0] - x0) + abs(c[1] - (y0 - h)))
            rects = np.concatenate([rects, _in_picture(corners, w, h, width, height)])
            shared = _overlaps(rects, placed)
        best = rects[int(np.argmin(shared.sum(1)))]
        placed = np.concatenate([placed, best[None]])
    return [tuple(int(v) for v in place) for place in placed]


def detections_picture(image, detections, line_width=2):
    """The photo with each detection's box and a tag naming it.

    Boxes and tags take their label's colour (`label_colours`); each tag,
    the label and score in black or white on the colour, fills the place
    `detection_tags` gives it (`label_places`, best detection first).

    Args:
        image: the photo, `(H, W, 3)` uint8.
        detections: `Detection`s (`keras_vit.detect`'s), or any records
            with `label`, `score` and `box` `(x0, y0, x1, y1)` in pixels;
            the parts of a box outside the photo are not drawn.
        line_width: int, default 2: the boxes' lines in pixels.

    Returns:
        An RGB uint8 picture of the photo's size.

    Example:

    >>> from keras_vit.tasks.detection_outputs import Detection
    >>> found = [Detection("cat", 0.9, (5.0, 20.0, 30.0, 40.0)), Detection("dog", 0.8, (30.0, 20.0, 55.0, 40.0))]
    >>> picture = detections_picture(np.zeros((50, 60, 3), "uint8"), found)
    >>> picture.shape, picture[30, 5].tolist() == palette(2)[0].tolist()
    ((50, 60, 3), True)
    """
    Image, ImageDraw, ImageFont = _pil()
    canvas = Image.fromarray(np.asarray(image, "uint8"))
    draw, font = ImageDraw.Draw(canvas), ImageFont.load_default()
    colours = label_colours(detections)
    for found in detections:
        draw.rectangle([float(v) for v in found.box], outline=colours[found.label], width=line_width)
    for found, (text, place) in zip(detections, zip(*detection_tags(detections, (canvas.height, canvas.width)))):
        colour = colours[found.label]
        draw.rectangle([place[0], place[1], place[2] - 1, place[3] - 1], fill=colour)
        draw.text((place[0] + 2, place[1] + 1), text, fill=_text_colour(colour), font=font)
    return np.asarray(canvas)


def label_colours(detections):
    """The colour of each label of `detections` (`palette`, labels sorted by name)."""
    names = sorted({d.label for d in detections})
    return {name: tuple(int(c) for c in colour) for name, colour in zip(names, palette(len(names)))}


def detection_tags(detections, image_size):
    """`(texts, places)`: each detection's tag, "label score", and the
    rectangle `(x0, y0, x1, y1)` it fills in a picture of `image_size`
    `(height, width)` (`label_places`, with Pillow's default font)."""
    _, _, ImageFont = _pil()
    font = ImageFont.load_default()
    texts = [f"{d.label} {d.score:.2f}" for d in detections]
    height = font.getbbox("Ag")[3] + 2
    sizes = [(font.getbbox(text)[2] + 4, height) for text in texts]
    return texts, label_places([d.box for d in detections], sizes, image_size)


# The colours of the prompts: clicks on the object (label 1), off it (label 0), boxes.
POSITIVE, NEGATIVE, BOX = (0, 220, 0), (230, 0, 0), (30, 144, 255)


def _outline(mask):
    """The pixels of a mask next to a pixel outside it (4-neighbours; the picture's edge counts as outside)."""
    padded = np.pad(mask, 1)
    inner = padded[:-2, 1:-1] & padded[2:, 1:-1] & padded[1:-1, :-2] & padded[1:-1, 2:]
    return mask & ~inner


def masks_picture(image, masks, points=None, labels=None, boxes=None, alpha=0.5, radius=4):
    """The photo with every mask over it, and the prompts that asked for them.

    Each mask (in `palette`'s colours, in order) is blended at `alpha` and
    outlined; the larger ones first, so that a mask inside another (SAM's
    three masks of one click: a part, the object, a group) stays in view.
    The prompts are drawn over them: each click a dot of `radius` with a
    white rim, green (`POSITIVE`) for label 1 and red (`NEGATIVE`) for
    label 0, each box a rectangle (`BOX`).

    Args:
        image: the photo, `(H, W, 3)` uint8.
        masks: `(n, H, W)` booleans (every mask a call returned, e.g.
            `segment_prompts(...)["masks"][0]` or `generate_masks(...)["masks"]`).
        points: None or `(x, y)` clicks in pixels, `(n, 2)` or `(prompts, n, 2)`.
        labels: None (every click on the object) or one 0 / 1 per click.
        boxes: None or `(x0, y0, x1, y1)` boxes in pixels, `(4,)` or `(prompts, 4)`.
        alpha: float, default 0.5: the masks' opacity.
        radius: int, default 4: the clicks' dots, in pixels.

    Returns:
        An RGB uint8 picture of the photo's size.

    Example:

    >>> masks = np.zeros((2, 20, 30), bool)
    >>> masks[0, 2:18, 2:28] = masks[1, 5:10, 5:10] = True
    >>> picture = masks_picture(np.zeros((20, 30, 3), "uint8"), masks, points=[(20, 14)], labels=[0])
    >>> picture[14, 20].tolist() == list(NEGATIVE), picture[7, 7].tolist() != picture[15, 4].tolist()
    (True, True)
    """
    Image, ImageDraw, _ = _pil()
    out = np.asarray(image, "float32").copy()
    masks = np.asarray(masks, bool).reshape((-1,) + out.shape[:2])
    colours = palette(max(len(masks), 1)).astype("float32")
    for i in np.argsort([-m.sum() for m in masks], kind="stable"):
        out[masks[i]] = (1 - alpha) * out[masks[i]] + alpha * colours[i]
        out[_outline(masks[i])] = colours[i]
    canvas = Image.fromarray(np.round(out).astype("uint8"))
    draw = ImageDraw.Draw(canvas)
    for box in np.asarray([] if boxes is None else boxes, "float64").reshape(-1, 4):
        draw.rectangle(box.tolist(), outline=BOX, width=2)
    points = np.asarray([] if points is None else points, "float64").reshape(-1, 2)
    labels = np.ones(len(points), int) if labels is None else np.asarray(labels).reshape(-1)
    for (x, y), label in zip(points, labels):
        draw.ellipse([x - radius, y - radius, x + radius, y + radius], fill=POSITIVE if label else NEGATIVE,
                     outline=(255, 255, 255))
    return np.asarray(canvas)


def save_png(picture, path):
    """Writes a uint8 RGB or grey picture, or a uint16 grey map (16-bit), as a PNG; returns the path."""
    Image, _, _ = _pil()
    picture = np.asarray(picture)
    Image.fromarray(picture if picture.dtype == np.uint16 else picture.astype("uint8")).save(path, format="PNG")
    return path


__all__ = ["BOX", "NEGATIVE", "POSITIVE", "RAMP", "depth_picture", "detection_tags", "detections_picture",
           "label_colours", "label_places", "masks_picture", "palette", "save_png", "segments_picture"]
