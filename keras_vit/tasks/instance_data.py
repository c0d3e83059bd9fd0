"""Folders of images with instance or panoptic segments, read and checked
before training (`load_instance_folder`), for `Segmenter.fit` with
`MaskClassificationLoss`: panoptic, instance and semantic segmentation all
learn from them.

A folder holds `images/` and one of three layouts of segments:

- **instances/** (keras_vit's own): `instances/<name>.png` beside each
  `images/<name>.<ext>`, a grey (8- or 16-bit) or palette PNG of segment ids,
  and `instances/<name>.json`, a JSON object from each id to its class
  index: `{"1": 0, "2": 3, "7": 3}`. Pixels whose id the JSON does not
  list have no label (say, `0` for unlabelled pixels, left out of the JSON).
  A "stuff" region (sky, road) is one segment like an object.
- **COCO panoptic**: `panoptic.json` (COCO's panoptic annotations: "images",
  "annotations" with "file_name" and "segments_info", "categories") and
  `panoptic/`, its PNGs (the segment id of a pixel is `R + 256 G + 256**2
  B`); crowd segments have no label.
- **COCO instances**: `instances.json` (COCO's detection annotations:
  polygons or run-length masks, decoded by `pycocotools`); the pixels of no
  object have no label, and where objects overlap the smaller one keeps the
  pixel. Crowd annotations have no label.

COCO's category ids become class indices in the order of their ids
(`coco_class_names` gives the names in that order). An image's segments
are numbered 0, 1, ... in the order of their ids (at most 255).

The images are resized and scaled as `keras_vit.tasks.dense_data` does; the
labels are `(n, H, W, 2)` int32: a class map and a segment-id map, 255 where
a pixel has none, resized with nearest neighbours.
"""

import json
import os

import numpy as np

from keras_vit.preprocessing.dense import scale_pixels
from keras_vit.tasks.dense_data import IGNORE_INDEX, _images, _pair, _pil, _read_rgb, _record, _resize_nearest

LAYOUTS = ("instances/", "panoptic.json", "instances.json")


def layout(folder):
    """The layout of `folder`'s segments: "instances", "coco_panoptic" or "coco_instances"."""
    folder = os.fspath(folder)
    if os.path.isdir(os.path.join(folder, "instances")):
        return "instances"
    if os.path.isfile(os.path.join(folder, "panoptic.json")):
        return "coco_panoptic"
    if os.path.isfile(os.path.join(folder, "instances.json")):
        return "coco_instances"
    raise ValueError(f"{folder!r} holds no segments: expected one of {', '.join(LAYOUTS)} beside images/.")


def _read_json(path):
    try:
        with open(path) as handle:
            return json.load(handle)
    except (OSError, ValueError) as error:
        raise ValueError(f"Cannot read {path!r}: {error}") from None


def segment_labels(id_map, id_classes, path):
    """`(H, W, 2)` class and segment-id maps from a map of ids and `{id: class}`.

    Example:

    >>> ids = np.array([[0, 5], [9, 5]])
    >>> segment_labels(ids, {5: 2, 9: 0}, "x.png")[..., 1].tolist()   # 5 -> segment 0, 9 -> 1
    [[255, 0], [1, 0]]
    """
    labels = np.full(id_map.shape + (2,), IGNORE_INDEX, "int32")
    present = [i for i in sorted(id_classes) if np.any(id_map == i)]
    if len(present) > IGNORE_INDEX:
        raise ValueError(f"{path!r} holds {len(present)} segments: at most {IGNORE_INDEX} per image.")
    for number, segment in enumerate(present):
        labels[id_map == segment] = (id_classes[segment], number)
    return labels


def _own(folder):
    """`[(image path, labels, source)]` of the instances/ layout."""
    directory, names = _images(folder)
    out = []
    for name in names:
        png = _pair(folder, "instances", name, (".png",))
        table = os.path.splitext(png)[0] + ".json"
        if not os.path.isfile(table):
            raise ValueError(f"The segments {png!r} have no classes: expected {table!r} ({{id: class}}).")
        raw = _read_json(table)
        try:
            id_classes = {int(k): int(v) for k, v in raw.items()}
        except (AttributeError, TypeError, ValueError):
            raise ValueError(f"{table!r} must map segment ids to class indices, as {{\"1\": 0}}.") from None
        Image, _ = _pil()
        try:
            with Image.open(png) as image:
                if image.mode not in ("P", "L", "I", "I;16"):
                    raise ValueError(f"{png!r} is a {image.mode!r} image: segment ids are grey or palette PNGs.")
                ids = np.asarray(image).astype("int64")
        except OSError as error:
            raise ValueError(f"Cannot read {png!r}: {error}") from None
        out.append((os.path.join(directory, name), segment_labels(ids, id_classes, png), png))
    return out


def _categories(data, path):
    categories = sorted(data.get("categories") or [], key=lambda c: c["id"])
    if not categories:
        raise ValueError(f"{path!r} lists no categories.")
    return {c["id"]: i for i, c in enumerate(categories)}


def coco_class_names(folder):
    """The class names of a COCO folder's categories, in the order of their ids (None for the instances/ layout)."""
    kind = layout(folder)
    if kind == "instances":
        return None
    path = os.path.join(os.fspath(folder), "panoptic.json" if kind == "coco_panoptic" else "instances.json")
    return [c["name"] for c in sorted(_read_json(path)["categories"], key=lambda c: c["id"])]


def _coco_images(data, folder, path):
    """`{image id: image path}` of a COCO file's images, each checked to be in images/."""
    out = {}
    for entry in data.get("images") or []:
        image = os.path.join(os.fspath(folder), "images", entry["file_name"])
        if not os.path.isfile(image):
            raise ValueError(f"{path!r} names the image {entry['file_name']!r}, which images/ does not hold.")
        out[entry["id"]] = image
    if not out:
        raise ValueError(f"{path!r} lists no images.")
    return out


def _coco_panoptic(folder):
    path = os.path.join(os.fspath(folder), "panoptic.json")
    data = _read_json(path)
    classes, images = _categories(data, path), _coco_images(data, folder, path)
    out = []
    for entry in data.get("annotations") or []:
        png = os.path.join(os.fspath(folder), "panoptic", entry["file_name"])
        rgb = _read_rgb(png).astype("int64")
        ids = rgb[..., 0] + 256 * rgb[..., 1] + 256**2 * rgb[..., 2]
        id_classes = {s["id"]: classes[s["category_id"]] for s in entry["segments_info"] if not s.get("iscrowd")}
        out.append((images[entry["image_id"]], segment_labels(ids, id_classes, png), png))
    return out


def _coco_instances(folder):
    try:
        from pycocotools import mask as coco_mask
    except ImportError as error:
        raise ImportError("COCO instance annotations (polygons, run-length masks) need pycocotools: "
                          "pip install pycocotools") from error
    path = os.path.join(os.fspath(folder), "instances.json")
    data = _read_json(path)
    classes, images = _categories(data, path), _coco_images(data, folder, path)
    sizes = {e["id"]: (e["height"], e["width"]) for e in data["images"]}
    by_image = {image_id: [] for image_id in images}
    for entry in data.get("annotations") or []:
        if not entry.get("iscrowd"):
            by_image[entry["image_id"]].append(entry)
    out = []
    for image_id, entries in by_image.items():
        height, width = sizes[image_id]
        ids = np.zeros((height, width), "int64")
        # The larger objects first: where objects overlap, the smaller keeps the pixel.
        entries = sorted(entries, key=lambda e: -e.get("area", 0))
        for number, entry in enumerate(entries, start=1):
            mask = coco_mask.decode(_rle(coco_mask, entry["segmentation"], height, width))
            ids[mask > 0] = number
        id_classes = {n: classes[e["category_id"]] for n, e in enumerate(entries, start=1)}
        out.append((images[image_id], segment_labels(ids, id_classes, path), path))
    return out


def _rle(coco_mask, shapes, height, width):
    """One run-length mask of a COCO segmentation: polygons, or a run-length
    mask (its counts a list, or COCO's compressed string)."""
    if isinstance(shapes, dict) and isinstance(shapes.get("counts"), str):
        return dict(shapes, counts=shapes["counts"].encode())
    rle = coco_mask.frPyObjects(shapes, height, width)
    return coco_mask.merge(rle) if isinstance(rle, list) else rle


READERS = {"instances": _own, "coco_panoptic": _coco_panoptic, "coco_instances": _coco_instances}


def read_instance_folder(folder, classes=None):
    """Every image path of `folder` with its labels at the image's size, checked.

    Args:
        folder: a folder in one of the layouts of the module docstring.
        classes: None, or the number of classes the labels must stay under.

    Returns:
        A list of `(image path, labels (H, W, 2) int32)`, in the layout's order.
    """
    Image, _ = _pil()
    out = []
    for image_path, labels, source in READERS[layout(folder)](folder):
        try:
            with Image.open(image_path) as image:
                width, height = image.size
                if image.getexif().get(0x0112, 1) in (5, 6, 7, 8):  # read upright, turned by a quarter
                    width, height = height, width
        except OSError as error:
            raise ValueError(f"Cannot read the image {image_path!r}: {error}") from None
        if labels.shape[:2] != (height, width):
            raise ValueError(f"The segments {source!r} are {labels.shape[0]}x{labels.shape[1]}; their image "
                             f"{image_path!r} is {height}x{width}: they must be the same size.")
        present = labels[..., 0][labels[..., 0] != IGNORE_INDEX]
        if classes is not None and present.size and present.max() >= classes:
            raise ValueError(f"The segments {source!r} hold class {int(present.max())}: the model has "
                             f"{classes} classes (0 to {classes - 1}).")
        out.append((image_path, labels))
    return out


def load_instance_folder(folder, model, image_size=None):
    """A folder of images with instance or panoptic segments, for `Segmenter.fit`.

    Args:
        folder: a folder with `images/` and segments in one of the layouts
            of the module docstring.
        model: the `Segmenter` (its classes, patch size, preprocessing).
        image_size: None (default: the model's) or an int or `(height, width)`.

    Returns:
        `(images, labels)`: float32 `(n, height, width, 3)` scaled as the
        model expects; int32 `(n, height, width, 2)`, the class and the
        segment id of each pixel (255: none), what `MaskClassificationLoss`
        takes.

    Raises:
        ValueError: naming the file, for an image without segments, segments
            of another size than their image, a class index at or above
            `model.classes`, or an unreadable file.

    Example:

    >>> import json, os, tempfile, types
    >>> import numpy as np
    >>> from PIL import Image
    >>> folder = tempfile.mkdtemp()
    >>> os.makedirs(os.path.join(folder, "images")); os.makedirs(os.path.join(folder, "instances"))
    >>> Image.fromarray(np.zeros((16, 16, 3), "uint8")).save(os.path.join(folder, "images", "a.png"))
    >>> ids = np.zeros((16, 16), "uint8"); ids[:, 8:] = 4
    >>> Image.fromarray(ids).save(os.path.join(folder, "instances", "a.png"))
    >>> with open(os.path.join(folder, "instances", "a.json"), "w") as f:
    ...     json.dump({"4": 1}, f)                    # id 4 is class 1; id 0 is unlabelled
    >>> model = types.SimpleNamespace(classes=2, image_size=(16, 16), effective_patch_size=(8, 8), preprocessing=None)
    >>> images, labels = load_instance_folder(folder, model)
    >>> labels.shape, labels[0, 0, 0].tolist(), labels[0, 0, 15].tolist()
    ((1, 16, 16, 2), [255, 255], [1, 0])
    """
    from keras_vit.preprocessing.crops import _pil_resize

    record, size = _record(model, image_size)
    pairs = []
    for image_path, labels in read_instance_folder(folder, model.classes):
        pairs.append((_read_rgb(image_path), labels))
    images = np.stack([scale_pixels(_pil_resize(image, size, record.interpolation), record) for image, _ in pairs])
    labels = np.stack([np.stack([_resize_nearest(l[..., c], size) for c in (0, 1)], -1) for _, l in pairs])
    return images, labels.astype("int32")


__all__ = ["LAYOUTS", "coco_class_names", "layout", "load_instance_folder", "read_instance_folder", "segment_labels"]
