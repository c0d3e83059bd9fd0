"""Depth and segmentation checkpoints made at random by transformers
(Depth Anything, DPT on a ViT and on the BiT hybrid,
CHMv2 on DINOv3, EoMT on DINOv2 and DINOv3) and keras-hub (metric Depth
Anything), loaded with `keras_vit.from_preset`: the outputs of `predict`,
keyed as transformers names them, equal the reference's on the same
pixels within 1e-4, on every backend."""

import os

import numpy as np
import pytest

import keras_vit
from dense_dirs import (
    chmv2_config,
    depth_anything_config,
    dpt_config,
    eomt_config,
    keras_hub_depth_anything,
    save_random,
    torch_outputs,
)
from hub_dirs import light_keras_state as _fresh_keras_state  # noqa: F401
from keras_vit.tasks.depth import DepthEstimator
from keras_vit.tasks.segmentation import Segmenter
from conftest import runs_once, spread

pytestmark = spread("checkpoint parity: the heads' layers are held on every backend by their contracts; each "
                    "checkpoint once")

transformers = pytest.importorskip("transformers")
pytest.importorskip("torch")

TOLERANCE = 1e-4


def _images(shape, seed=0):
    return np.random.default_rng(seed).normal(size=shape).astype("float32")


# name: (config, transformers class, image shape, save_random options)
CASES = {
    "depth_anything": (lambda: depth_anything_config(transformers), "DepthAnythingForDepthEstimation",
                       (2, 35, 49, 3), {}),
    # transformers' DPT on a ViT lays its tokens on a square grid.
    "dpt": (lambda: dpt_config(transformers), "DPTForDepthEstimation", (2, 40, 40, 3), {}),
    "dpt_hybrid": (lambda: dpt_config(transformers, hybrid=True), "DPTForDepthEstimation", (1, 64, 64, 3), {}),
    "chmv2": (lambda: chmv2_config(transformers), "CHMv2ForDepthEstimation", (2, 40, 48, 3), {"depth_bias": 5.0}),
    "eomt": (lambda: eomt_config(transformers), "EomtForUniversalSegmentation", (2, 32, 32, 3),
             {"mask_probability": 1.0}),
    "eomt_swiglu": (lambda: eomt_config(transformers, use_swiglu_ffn=True), "EomtForUniversalSegmentation",
                    (1, 32, 32, 3), {"mask_probability": 0.0}),
    "eomt_dinov3": (lambda: eomt_config(transformers, dinov3=True), "EomtDinov3ForUniversalSegmentation",
                    (2, 32, 32, 3), {"mask_probability": 1.0}),
}


@pytest.fixture(scope="module")
def checkpoints(tmp_path_factory):
    """Every case saved once, with transformers' outputs on its images."""
    out = {}
    for seed, (name, (config, hf_class, shape, options)) in enumerate(CASES.items()):
        folder = tmp_path_factory.mktemp(name)
        model = save_random(getattr(transformers, hf_class), config(), folder, seed=seed, **options)
        images = _images(shape, seed)
        out[name] = (str(folder), images, torch_outputs(model, images))
    return out


# keras_vit reads the BiT hybrid and writes no BiT stem.
NOT_WRITTEN = ("dpt_hybrid",)


@pytest.mark.parametrize("name", list(CASES))
def test_transformers_checkpoint_outputs_match(checkpoints, name, tmp_path):
    """Loaded, the outputs are transformers'; written back, transformers
    loads the directory (no missing or unexpected key) with the same outputs."""
    folder, images, reference = checkpoints[name]
    model = keras_vit.from_preset(folder)
    assert isinstance(model, Segmenter if name.startswith("eomt") else DepthEstimator)
    outputs = model.predict(images, verbose=0)
    keys = ("class_queries_logits", "masks_queries_logits") if name.startswith("eomt") else ("predicted_depth",)
    assert sorted(outputs) == sorted(keys)
    for key in keys:
        assert outputs[key].shape == reference[key].shape, key
        np.testing.assert_allclose(outputs[key], reference[key], atol=TOLERANCE, rtol=TOLERANCE, err_msg=key)
    if name in NOT_WRITTEN:
        with pytest.raises(ValueError, match="transformers has no class that holds this model"):
            model.save_to_preset(str(tmp_path / "back"), format="transformers")
        return
    model.save_to_preset(str(tmp_path / "back"), format="transformers")
    back, info = getattr(transformers, CASES[name][1]).from_pretrained(str(tmp_path / "back"), output_loading_info=True)
    assert not any(info[k] for k in ("missing_keys", "unexpected_keys", "mismatched_keys")), info
    again = torch_outputs(back.eval(), images)
    for key in keys:
        np.testing.assert_allclose(again[key], outputs[key], atol=TOLERANCE, rtol=TOLERANCE, err_msg=key)


@runs_once("torch", "a key of config.json; loading and writing are held on every backend by the cases above")
def test_trained_tasks_survive_the_transformers_format(checkpoints, tmp_path):
    """A fine-tuned model's `trained_tasks` goes into config.json under
    keras_vit's own key, which transformers keeps, and comes back."""
    import json

    model = keras_vit.from_preset(checkpoints["eomt"][0])
    assert model.trained_tasks is None
    model.save_to_preset(str(tmp_path / "unknown"), format="transformers")
    assert "keras_vit_trained_tasks" not in json.loads((tmp_path / "unknown" / "config.json").read_text())
    model.trained_tasks = ("semantic",)
    model.save_to_preset(str(tmp_path / "semantic"), format="transformers")
    config = transformers.AutoConfig.from_pretrained(str(tmp_path / "semantic"))
    assert config.keras_vit_trained_tasks == ["semantic"]
    assert keras_vit.from_preset(str(tmp_path / "semantic")).trained_tasks == ("semantic",)


def test_masked_attention_follows_the_checkpoint(checkpoints):
    """EoMT's masks are in the model where the checkpoint's probabilities
    are above zero (the random one: 1), and left out where they are 0."""
    masked = keras_vit.from_preset(checkpoints["eomt"][0])
    plain = keras_vit.from_preset(checkpoints["eomt_swiglu"][0])
    assert masked.masked_blocks == (True, True) and plain.masked_blocks == (False, False)
    # The same model without its masks gives other masks: the masking is used.
    folder, images, reference = checkpoints["eomt"]
    unmasked = keras_vit.from_preset(folder)
    unmasked.masked_blocks = (False, False)
    loose = unmasked.predict(images, verbose=0)["masks_queries_logits"]
    assert np.abs(loose - reference["masks_queries_logits"]).max() > 1e-3


def test_keras_hub_depth_anything_matches(tmp_path):
    keras_hub = pytest.importorskip("keras_hub")
    import keras

    task = keras_hub_depth_anything(keras_hub, keras, str(tmp_path / "preset"), kind="metric")
    images = _images((2, 56, 56, 3), seed=3)
    # The task's own call: `predict` would run its preprocessor first.
    reference = keras.ops.convert_to_numpy(task(images)["depths"])[..., 0]
    model = keras_vit.from_preset(str(tmp_path / "preset"))
    assert model.preprocessing.size == (56, 56) and model.preprocessing.resize == "exact"
    assert (model.depth, model.max_depth) == ("metric", 20.0)
    outputs = model.predict(images, verbose=0)["predicted_depth"]
    np.testing.assert_allclose(outputs, reference, atol=TOLERANCE, rtol=TOLERANCE)


def test_keras_hub_depth_anything_saved_as_a_backbone_alone_loads(tmp_path):
    """A keras-hub Depth Anything backbone saved with `save_to_preset` (no
    image converter, no task) loads as the relative-depth model keras-hub
    builds around it, with a warning that its preprocessing is unknown."""
    keras_hub = pytest.importorskip("keras_hub")
    import keras

    task = keras_hub_depth_anything(keras_hub, keras, str(tmp_path / "task"))
    task.backbone.save_to_preset(str(tmp_path / "alone"))
    images = _images((2, 56, 56, 3), seed=4)
    reference = keras.ops.convert_to_numpy(task(images)["depths"])[..., 0]
    with pytest.warns(UserWarning, match=r"has no image converter .*preprocessing=keras_vit\.DenseProcessing"):
        model = keras_vit.from_preset(str(tmp_path / "alone"))
    assert model.preprocessing is None and model.depth == "relative"
    outputs = model.predict(images, verbose=0)["predicted_depth"]
    np.testing.assert_allclose(outputs, reference, atol=TOLERANCE, rtol=TOLERANCE)


def test_config_keys_transformers_does_not_declare_are_ignored(checkpoints, tmp_path, caplog):
    """A config.json key the transformers config class does not declare
    changes nothing there and is ignored here, listed at debug level; a
    declared key keras_vit cannot honour still refuses the checkpoint."""
    import json
    import logging
    import shutil

    folder, images, reference = checkpoints["depth_anything"]
    extra = str(tmp_path / "extra")
    shutil.copytree(folder, extra)
    path = os.path.join(extra, "config.json")
    with open(path) as f:
        config = json.load(f)
    with open(path, "w") as f:
        json.dump(dict(config, trained_by="someone", future_option=3), f)
    with caplog.at_level(logging.DEBUG, logger="keras_vit"):
        model = keras_vit.from_preset(extra)
    assert "['future_option', 'trained_by'] ignored" in caplog.text
    outputs = model.predict(images, verbose=0)["predicted_depth"]
    np.testing.assert_allclose(outputs, reference["predicted_depth"], atol=TOLERANCE, rtol=TOLERANCE)
    with open(path, "w") as f:
        json.dump(dict(config, head_in_index=0), f)
    with pytest.raises(ValueError, match="head_in_index must be -1"):
        keras_vit.from_preset(extra)


@pytest.mark.parametrize("family, reference", [
    ("dpt.TransformersDepthAnything", "DepthAnythingConfig"), ("dpt.TransformersDpt", "DPTConfig"),
    ("chmv2.TransformersChmv2", "CHMv2Config"), ("eomt.TransformersEomt", "EomtConfig"),
    ("eomt.TransformersEomtDinov3", "EomtDinov3Config"),
])
def test_each_task_family_reads_or_refuses_every_key_its_config_class_declares(family, reference):
    """Only undeclared keys are ignored: every key transformers' config class
    declares is one of the family's `FIELDS` (read, or refused where keras_vit
    cannot honour its value)."""
    import importlib
    import inspect

    from keras_vit.weights.formats.task_family import GENERIC_FIELDS

    module, name = family.split(".")
    fields = getattr(importlib.import_module(f"keras_vit.families.{module}"), name).FIELDS
    config_class = getattr(transformers, reference)
    declared = set(inspect.signature(config_class.__init__).parameters) | set(config_class().to_dict())
    declared -= {"self", "kwargs", "model_type", "_name_or_path", "output_attentions", "transformers_version"}
    assert declared - fields - GENERIC_FIELDS == set()
