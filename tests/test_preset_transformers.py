"""`save_to_preset(format="transformers")` writes a directory transformers'
`AutoImageProcessor` and `pipeline("image-classification")` run: its
`preprocessor_config.json` and `id2label` come from the model's
preprocessing record and class names, or from explicit arguments."""

import json
import os

import numpy as np
import pytest

import keras_vit
from conftest import DEIT_NPZ, TINY, requires_shared, spread, to_numpy
from hub_dirs import light_keras_state as _fresh_keras_state  # noqa: F401
from keras_vit.preprocessing import Preprocessing

pytestmark = spread("the transformers writer is a table over NumPy arrays; each case once")

transformers = pytest.importorskip("transformers")
NAMES = ("red", "green", "blue")


def _randomized(model, seed=0):
    rng = np.random.default_rng(seed)
    for v in model.weights:
        v.assign(np.asarray(v) + rng.normal(0, 0.2, v.shape).astype("float32"))
    return model


def _softmax(logits):
    e = np.exp(logits - logits.max(-1, keepdims=True))
    return e / e.sum(-1, keepdims=True)


def _check_in_transformers(folder, model, photos, top_k, names):
    """transformers' processor, model and pipeline on `folder` against keras_vit.

    The processor's pixels go through both models (logits within 1e-4); the
    pipeline's labels and scores equal keras_vit's softmax, top `top_k`.
    """
    import torch

    processor = transformers.AutoImageProcessor.from_pretrained(folder)
    pixels = processor(photos, return_tensors="np")["pixel_values"]
    reference = transformers.ViTForImageClassification.from_pretrained(folder).eval()
    with torch.no_grad():
        expected = reference(torch.from_numpy(pixels)).logits.numpy()
    logits = to_numpy(model.predict(pixels.transpose(0, 2, 3, 1), verbose=0))
    np.testing.assert_allclose(logits, expected, rtol=0, atol=1e-4)
    pipe = transformers.pipeline("image-classification", model=str(folder))
    outputs = pipe(photos, top_k=top_k)
    probs = _softmax(logits.astype("float64"))
    for row, out in zip(probs, outputs):
        best = np.argsort(-row, kind="stable")[:top_k]
        assert [o["label"] for o in out] == [names[i] for i in best]
        np.testing.assert_allclose([o["score"] for o in out], row[best], rtol=0, atol=1e-4)
    return logits


def test_tiny_model_runs_in_processor_and_pipeline(tmp_path):
    from PIL import Image

    prep = Preprocessing.from_mode("imagenet", image_size=32)
    model = _randomized(keras_vit.ViT(**TINY, classes=3, classifier_activation=None,
                                      mlp_activation="gelu", class_names=NAMES, preprocessing=prep))
    model.save_to_preset(tmp_path, format="transformers")
    config = json.load(open(tmp_path / "preprocessor_config.json"))
    assert config["image_mean"] == list(prep.mean) and config["size"] == {"height": 32, "width": 32}
    assert json.load(open(tmp_path / "config.json"))["id2label"] == {"0": "red", "1": "green", "2": "blue"}
    rng = np.random.default_rng(3)
    photos = [Image.fromarray(rng.integers(0, 256, (48, 40, 3), dtype="uint8")) for _ in range(2)]
    _check_in_transformers(tmp_path, model, photos, top_k=3, names=NAMES)


def test_model_without_metadata_is_refused_or_given_it(tmp_path):
    model = _randomized(keras_vit.ViT(**TINY, classes=3, classifier_activation=None))
    refused = tmp_path / "refused"
    with pytest.raises(ValueError, match=r"Pass preprocessing= .* and class_names= .* to save_to_preset"):
        model.save_to_preset(refused, format="transformers")
    with pytest.raises(ValueError, match=r"class_names=.*to save_to_preset"):
        model.save_to_preset(refused, format="transformers", preprocessing="inception")
    with pytest.raises(ValueError, match=r"`class_names` must be 3 strings.*Received: 2 items"):
        model.save_to_preset(refused, format="transformers", preprocessing="inception", class_names=["a", "b"])
    assert not refused.exists()
    given = tmp_path / "given"
    model.save_to_preset(given, format="transformers", preprocessing="inception", class_names=list(NAMES))
    assert sorted(os.listdir(given)) == ["config.json", "model.safetensors", "preprocessor_config.json"]
    back = keras_vit.from_preset(given)
    assert back.class_names == NAMES and back.preprocessing.mode == "inception"
    # The arguments also name a keras_vit preset's classes.
    model.save_to_preset(tmp_path / "kv", class_names=list(NAMES))
    assert keras_vit.from_preset(tmp_path / "kv").class_names == NAMES


@requires_shared
def test_deit_tiny_from_its_npz_runs_in_pipeline(tmp_path):
    """The README's DeiT example: a model built from a bare `.npz` file, given
    its preprocessing and ImageNet class names when written."""
    import skimage.data
    from PIL import Image

    model = keras_vit.ViTTi16(weights=str(DEIT_NPZ), mlp_activation="gelu", classifier_activation=None)
    model.save_to_preset(tmp_path, format="transformers", preprocessing="imagenet", class_names="imagenet1k")
    labels = json.load(open(tmp_path / "config.json"))["id2label"]
    assert labels["285"] == "Egyptian_cat" and labels["967"] == "espresso"
    photos = [Image.fromarray(skimage.data.chelsea()), Image.fromarray(skimage.data.coffee())]
    names = keras_vit.labels.class_names(1000)  # independent of the file written
    logits = _check_in_transformers(tmp_path, model, photos, top_k=5, names=names)
    top1 = logits.argmax(-1)
    assert top1[0] in (281, 282, 285) and top1[1] == 967, top1  # a cat, espresso


def test_sharded_preset_loads_in_transformers_and_back(tmp_path):
    """`max_shard_size`: shards of at most that size and their index, as
    transformers writes them; transformers and `from_preset` read them; a
    later write in the folder replaces the earlier one's files."""
    import torch

    model = _randomized(keras_vit.ViT(**TINY, classes=3, classifier_activation=None, mlp_activation="gelu",
                                      class_names=NAMES,
                                      preprocessing=Preprocessing.from_mode("imagenet", image_size=32)))
    limit = 8 * 2**10
    model.save_to_preset(tmp_path, format="transformers", max_shard_size="8KiB")
    index = json.load(open(tmp_path / "model.safetensors.index.json"))
    files = sorted(set(index["weight_map"].values()))
    assert len(files) > 3 and files == sorted(f for f in os.listdir(tmp_path) if f.startswith("model-"))
    assert not (tmp_path / "model.safetensors").exists()
    for file in files:
        names = [k for k, v in index["weight_map"].items() if v == file]
        assert len(names) == 1 or os.path.getsize(tmp_path / file) <= limit + 4096, (file, names)
    x = np.random.default_rng(0).normal(size=(2, 32, 32, 3)).astype("float32")
    expected = to_numpy(model.predict(x, verbose=0))
    reference = transformers.ViTForImageClassification.from_pretrained(tmp_path).eval()
    with torch.no_grad():
        hf = reference(torch.from_numpy(x.transpose(0, 3, 1, 2))).logits.numpy()
    np.testing.assert_allclose(hf, expected, rtol=0, atol=1e-4)
    np.testing.assert_allclose(to_numpy(keras_vit.from_preset(tmp_path).predict(x, verbose=0)), expected,
                               rtol=0, atol=1e-6)
    model.save_to_preset(tmp_path, format="transformers")
    assert sorted(os.listdir(tmp_path)) == ["config.json", "model.safetensors", "preprocessor_config.json"]
    with pytest.raises(ValueError, match="max_shard_size='5 apples'"):
        model.save_to_preset(tmp_path / "bad", format="transformers", max_shard_size="5 apples")
    with pytest.raises(ValueError, match="max_shard_size applies to the safetensors formats"):
        model.save_to_preset(tmp_path / "bad", max_shard_size="1GB")
    assert not (tmp_path / "bad").exists()
