"""Folders of images with instance or panoptic segments
(`keras_vit.tasks.instance_data`): keras_vit's instances/ layout, COCO
panoptic and COCO instances (pycocotools' own masks as the reference),
their class names, and bad files named before training."""

import json
import os
import types

import numpy as np
import pytest

from conftest import runs_once
from keras_vit.tasks.instance_data import coco_class_names, load_instance_folder

pytestmark = runs_once("torch", "file formats read in NumPy and Pillow")

Image = pytest.importorskip("PIL.Image")


def _model(classes=3, size=16):
    return types.SimpleNamespace(classes=classes, image_size=(size, size), effective_patch_size=(8, 8),
                                 preprocessing=None)


def _image(folder, name, size=(16, 16)):
    os.makedirs(os.path.join(folder, "images"), exist_ok=True)
    Image.fromarray(np.zeros(size + (3,), "uint8")).save(os.path.join(folder, "images", name))


def test_instances_layout_reads_ids_and_classes(tmp_path):
    folder = str(tmp_path)
    _image(folder, "a.jpg", (8, 8))
    os.makedirs(tmp_path / "instances")
    ids = np.zeros((8, 8), "uint16")
    ids[:4, :4], ids[4:, :] = 300, 7  # 16-bit ids; 0 left out: unlabelled
    Image.fromarray(ids).save(tmp_path / "instances" / "a.png")
    (tmp_path / "instances" / "a.json").write_text(json.dumps({"7": 2, "300": 0}))
    images, labels = load_instance_folder(folder, _model())
    assert images.shape == (1, 16, 16, 3) and labels.shape == (1, 16, 16, 2)  # resized to the model's size
    np.testing.assert_array_equal(labels[0, ::2, ::2, 0], np.where(ids == 300, 0, np.where(ids == 7, 2, 255)))
    np.testing.assert_array_equal(labels[0, ::2, ::2, 1], np.where(ids == 7, 0, np.where(ids == 300, 1, 255)))
    assert coco_class_names(folder) is None
    (tmp_path / "instances" / "a.json").write_text(json.dumps({"7": 3}))
    with pytest.raises(ValueError, match="a.png' hold class 3: the model has 3 classes"):
        load_instance_folder(folder, _model())
    os.remove(tmp_path / "instances" / "a.json")
    with pytest.raises(ValueError, match="have no classes: expected .*a.json"):
        load_instance_folder(folder, _model())


def test_coco_panoptic_layout(tmp_path):
    folder = str(tmp_path)
    _image(folder, "000.jpg")
    os.makedirs(tmp_path / "panoptic")
    ids = np.zeros((16, 16), "int64")
    ids[:, :8], ids[:8, 8:], ids[8:, 8:] = 70000, 26, 5  # 70000 needs all three channels
    rgb = np.stack([ids % 256, ids // 256 % 256, ids // 256**2], -1).astype("uint8")
    Image.fromarray(rgb).save(tmp_path / "panoptic" / "000.png")
    data = {
        "images": [{"id": 9, "file_name": "000.jpg", "height": 16, "width": 16}],
        "categories": [{"id": 184, "name": "sky", "isthing": 0}, {"id": 1, "name": "person", "isthing": 1}],
        "annotations": [{"image_id": 9, "file_name": "000.png", "segments_info": [
            {"id": 70000, "category_id": 184}, {"id": 26, "category_id": 1}, {"id": 5, "category_id": 1, "iscrowd": 1},
        ]}],
    }
    (tmp_path / "panoptic.json").write_text(json.dumps(data))
    _, labels = load_instance_folder(folder, _model(classes=2))
    assert coco_class_names(folder) == ["person", "sky"]  # by category id
    expected_classes = np.where(ids == 70000, 1, np.where(ids == 26, 0, 255))  # the crowd segment: no label
    np.testing.assert_array_equal(labels[0, ..., 0], expected_classes)
    np.testing.assert_array_equal(labels[0, ..., 1], np.where(ids == 26, 0, np.where(ids == 70000, 1, 255)))


def test_coco_instances_layout_against_pycocotools(tmp_path):
    coco_mask = pytest.importorskip("pycocotools.mask")
    folder = str(tmp_path)
    _image(folder, "x.png")
    big = np.zeros((16, 16), "uint8", order="F")
    big[2:14, 1:12] = 1
    small = np.zeros((16, 16), "uint8", order="F")
    small[5:9, 5:9] = 1
    rle = coco_mask.encode(np.asfortranarray(small))
    rle["counts"] = rle["counts"].decode()
    data = {
        "images": [{"id": 1, "file_name": "x.png", "height": 16, "width": 16}],
        "categories": [{"id": 3, "name": "car"}, {"id": 18, "name": "dog"}],
        "annotations": [
            {"image_id": 1, "category_id": 18, "segmentation": rle, "area": 16, "iscrowd": 0},
            {"image_id": 1, "category_id": 3, "segmentation": [[1, 2, 12, 2, 12, 14, 1, 14]], "area": 132,
             "iscrowd": 0},
        ],
    }
    (tmp_path / "instances.json").write_text(json.dumps(data))
    _, labels = load_instance_folder(folder, _model(classes=2))
    polygon = coco_mask.decode(coco_mask.merge(coco_mask.frPyObjects(data["annotations"][1]["segmentation"], 16, 16)))
    segments = labels[0, ..., 1]
    np.testing.assert_array_equal(segments == 1, small > 0)  # the smaller object keeps the overlap
    np.testing.assert_array_equal(segments == 0, (polygon > 0) & (small == 0))
    np.testing.assert_array_equal(labels[0, ..., 0][small > 0], 1)  # dog: the second category by id
    assert coco_class_names(folder) == ["car", "dog"]
