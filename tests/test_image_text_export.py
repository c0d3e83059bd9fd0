"""Deployment of the image-text models: the zero-shot classifier (an image
tower with its class head) exports as any keras_vit classifier, float and
int8; the text tower exports with token ids and padding mask as inputs. Each
artifact runs in its own runtime and gives the Keras model's outputs."""

import functools

import numpy as np
import pytest

import keras_vit
from hub_dirs import light_keras_state as _fresh_keras_state  # noqa: F401
from image_text_dirs import image_text_dir
from keras_vit import export
from conftest import spread

pytestmark = spread("the export routes are held on every backend by test_export; each model and runtime once")

pytest.importorskip("transformers")
pytest.importorskip("onnxruntime")
pytest.importorskip("openvino")
pytest.importorskip("tokenizers")
pytest.importorskip("sentencepiece")

CLASSES = ["cat", "dog", "coffee cup", "astronaut"]
FORMATS = {"onnx": ".onnx", "openvino": ".xml"}


@functools.lru_cache(maxsize=None)
def _model(family):
    return keras_vit.ImageTextModel.from_preset(image_text_dir(family)[0])


def _images(seed=0):
    return np.random.default_rng(seed).uniform(-1, 1, (5, 32, 32, 3)).astype("float32")


# Each pair exercises the other family's head (CLIP: projection and softmax;
# SigLIP 2: attention pooling and sigmoid) in the other runtime.
PAIRS = [("clip", "onnx"), ("siglip2", "openvino")]


@pytest.mark.parametrize("family, format", PAIRS)
def test_zero_shot_classifier_exports(tmp_path, family, format):
    classifier = _model(family).zero_shot_classifier(CLASSES)
    images = _images()
    path = classifier.export(tmp_path / f"zero_shot{FORMATS[format]}", format=format)
    outputs = export.run_exported(path, format, images)
    np.testing.assert_allclose(outputs, classifier.predict(images, verbose=0), rtol=0, atol=1e-4)


def test_zero_shot_classifier_exports_int8(tmp_path):
    classifier = _model("clip").zero_shot_classifier(CLASSES)
    images = _images(seed=1)
    path = classifier.export(tmp_path / "zero_shot_int8.onnx", format="onnx", quantize="int8",
                             sample_images=images)
    assert path.num_images == len(images) and 0 <= path.top1_agreement <= 1
    outputs = export.run_exported(path, "onnx", images)
    assert outputs.shape == (len(images), len(CLASSES))
    # Probabilities near the float model's: int8 weights move them a little.
    np.testing.assert_allclose(outputs, classifier.predict(images, verbose=0), rtol=0, atol=0.1)


@pytest.mark.parametrize("family, format", PAIRS)
def test_text_tower_exports_with_token_ids(tmp_path, family, format):
    model = _model(family)
    encoder = model.text_encoder
    tokens = model.tokenizer(["a photo of a cat.", "a cartoon truck", "x"], sequence_length=encoder.max_length)
    inputs = [tokens["token_ids"], tokens["padding_mask"]]
    path = encoder.export(tmp_path / f"text{FORMATS[format]}", format=format)
    outputs = export.run_exported(path, format, {"token_ids": inputs[0], "padding_mask": inputs[1]})
    np.testing.assert_allclose(outputs, encoder.predict(inputs, verbose=0), rtol=0, atol=1e-4)
    # The embeddings of the exported tower are the model's encode_texts once scaled.
    unit = outputs / np.linalg.norm(outputs, axis=-1, keepdims=True)
    np.testing.assert_allclose(unit, model.encode_texts(["a photo of a cat.", "a cartoon truck", "x"]),
                               rtol=0, atol=1e-4)


def test_text_export_refuses_bad_arguments(tmp_path):
    encoder = _model("clip").text_encoder
    with pytest.raises(ValueError, match="must end with '.onnx'"):
        encoder.export(tmp_path / "text.xml", format="onnx")
    with pytest.raises(ValueError, match="at most the encoder's max_length"):
        encoder.export(tmp_path / "text.onnx", format="onnx", sequence_length=encoder.max_length + 1)
    with pytest.raises(ValueError, match=r"A TextEncoder exports to \('onnx', 'openvino'\)"):
        encoder.export(tmp_path / "text_saved_model", format="tf_saved_model")
