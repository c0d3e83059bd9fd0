"""Image and text from keras-hub: a `CLIPBackbone` and a `SigLIPBackbone`
made at random by keras-hub on the backend under test, saved with their
preprocessor, load with `keras_vit.ImageTextModel.from_preset` and reproduce
keras-hub: its preprocessor's token ids and padding mask, its image and text
embeddings, its `vision_logits` and the zero-shot probabilities they give.
An `ImageTextModel` saved with `save_to_preset` reloads with the same scores."""

import functools
import json
import shutil

import keras
import numpy as np
import pytest

import keras_vit
from conftest import spread, to_numpy
from hub_dirs import light_keras_state as _fresh_keras_state  # noqa: F401
from keras_hub_image_text_dirs import FAMILIES, IMAGE_SIZE, keras_hub_image_text_dir, keras_hub_preprocessor

pytestmark = spread("keras-hub's towers against keras_vit's, whose layers are held on every backend by their "
                    "contracts; each case once")

pytest.importorskip("keras_hub")
pytest.importorskip("tokenizers")
pytest.importorskip("sentencepiece")

# Unseen characters, punctuation, special tokens' strings, non-ASCII
# capitals (keras-hub lowercases ASCII only before SentencePiece) and a text
# longer than the context.
TEXTS = [
    "a photo of a cat.", "A BAD photo of the Airplane!!", "x", "  many   spaces here  ",
    "unseen wörds ✓ 123 ÜBER", "a photo </s> of a dog <|endoftext|>", "a " * 80,
]
CLASSES = ["cat", "dog", "coffee cup", "astronaut"]
ENSEMBLE = ("a photo of a {}.", "a drawing of the {}.", "itap of a {}.")


@functools.lru_cache(maxsize=None)
def _model(family):
    return keras_vit.ImageTextModel.from_preset(keras_hub_image_text_dir(family)[0])


def _images(seed=0):
    return np.random.default_rng(seed).uniform(-1, 1, (3, IMAGE_SIZE, IMAGE_SIZE, 3)).astype("float32")


def _keras_hub(family, images, texts):
    """keras-hub's token ids, unit-length image and text embeddings, and vision_logits."""
    backbone, preprocessor = keras_hub_image_text_dir(family)[1], keras_hub_preprocessor(family)
    tokens = preprocessor({"images": images, "prompts": texts})["token_ids"]
    images = keras.ops.convert_to_tensor(images)
    out = backbone({"images": images, "token_ids": tokens})
    unit = [to_numpy(e) / np.linalg.norm(to_numpy(e), axis=-1, keepdims=True)
            for e in (backbone.get_vision_embeddings(images), backbone.get_text_embeddings(tokens))]
    return to_numpy(tokens), unit[0], unit[1], to_numpy(out["vision_logits"])


@pytest.mark.parametrize("family", FAMILIES)
def test_tokenizer_gives_keras_hubs_ids(family):
    preprocessor = keras_hub_preprocessor(family)
    reference = preprocessor({"images": _images()[:1], "prompts": TEXTS})
    ours = _model(family).tokenize(TEXTS)
    np.testing.assert_array_equal(ours["token_ids"], to_numpy(reference["token_ids"]))
    np.testing.assert_array_equal(ours["padding_mask"], to_numpy(reference["padding_mask"]).astype("int32"))


@pytest.mark.parametrize("family", FAMILIES)
def test_embeddings_and_similarity_equal_keras_hubs(family):
    images = _images()
    _, image_embeds, text_embeds, logits = _keras_hub(family, images, TEXTS)
    model = _model(family)
    np.testing.assert_allclose(model.encode_images(images), image_embeds, rtol=0, atol=1e-4)
    np.testing.assert_allclose(model.encode_texts(TEXTS), text_embeds, rtol=0, atol=1e-4)
    np.testing.assert_allclose(model.similarity(images, TEXTS), logits, rtol=0, atol=1e-4)
    assert model.activation == ("softmax" if family == "clip" else "sigmoid")


@pytest.mark.parametrize("family", FAMILIES)
def test_zero_shot_probabilities_equal_keras_hubs(family):
    """An ensemble of prompts: each class the normalised mean of its
    prompts' keras-hub embeddings, through the family's activation."""
    images = _images(seed=1)
    texts = [t.format(name) for name in CLASSES for t in ENSEMBLE]
    _, image_embeds, text_embeds, _ = _keras_hub(family, images, texts)
    classes = text_embeds.reshape(len(CLASSES), len(ENSEMBLE), -1).mean(axis=1)
    classes /= np.linalg.norm(classes, axis=-1, keepdims=True)
    model = _model(family)
    logits = model.logit_scale * image_embeds @ classes.T + model.logit_bias
    expected = keras.ops.convert_to_numpy(keras.ops.softmax(logits) if family == "clip" else keras.ops.sigmoid(logits))
    classifier = model.zero_shot_classifier(CLASSES, templates=ENSEMBLE)
    assert classifier.preprocessing == model.preprocessing and classifier.preprocessing.image_size == (32, 32)
    np.testing.assert_allclose(classifier.predict(images, verbose=0), expected, rtol=0, atol=1e-4)


def test_saved_image_text_model_reloads(tmp_path):
    model = _model("siglip")
    model.save_to_preset(tmp_path)
    again = keras_vit.ImageTextModel.from_preset(tmp_path)
    images = _images(seed=2)
    assert type(again.tokenizer) is type(model.tokenizer)
    np.testing.assert_array_equal(again.tokenize(TEXTS)["token_ids"], model.tokenize(TEXTS)["token_ids"])
    np.testing.assert_allclose(again.similarity(images, TEXTS), model.similarity(images, TEXTS), rtol=0, atol=1e-6)
    assert (again.logit_scale, again.logit_bias, again.activation) == (model.logit_scale, model.logit_bias, "sigmoid")
    # The image tower alone is a keras_vit preset; the whole is not an image model.
    assert keras_vit.from_preset(tmp_path / "image_encoder").name == model.image_encoder.name
    with pytest.raises(ValueError, match="ImageTextModel"):
        keras_vit.from_preset(tmp_path)


def test_clip_vision_encoder_preset_gives_the_pooled_token(tmp_path):
    """A `CLIPVisionEncoder` preset alone: the class token after the final
    norm (keras-hub's `CLIPVisionPooler`), the tokens its forward features."""
    _, backbone, _ = keras_hub_image_text_dir("clip")
    backbone.vision_encoder.save_to_preset(tmp_path)
    model = keras_vit.from_preset(tmp_path)
    images = _images(seed=3)
    tokens = to_numpy(backbone.vision_encoder({"images": keras.ops.convert_to_tensor(images)}))
    np.testing.assert_allclose(to_numpy(model(images)), tokens[:, 0], rtol=0, atol=1e-4)
    np.testing.assert_allclose(to_numpy(model.forward_features(images)), tokens, rtol=0, atol=1e-4)
    assert model.pre_norm and not model.patch_bias and model.mlp_activation == "quick_gelu"


def _copy(family, tmp_path):
    folder = tmp_path / family
    shutil.copytree(keras_hub_image_text_dir(family)[0], folder)
    return folder


def _edit(path, edit):
    config = json.loads(path.read_text())
    edit(config)
    path.write_text(json.dumps(config))


def test_presets_that_are_not_two_towers_are_refused(tmp_path):
    folder = _copy("siglip", tmp_path)
    (folder / "preprocessor.json").unlink()
    with pytest.raises(ValueError, match="no preprocessor.json"):
        keras_vit.ImageTextModel.from_preset(folder)
    _, backbone, _ = keras_hub_image_text_dir("siglip")
    backbone.vision_encoder.save_to_preset(tmp_path / "vision")
    with pytest.raises(ValueError, match="image and text"):
        keras_vit.ImageTextModel.from_preset(tmp_path / "vision")
    folder = _copy("clip", tmp_path)
    _edit(folder / "config.json", lambda c: c["config"]["text_encoder"]["config"].update(embedding_dim=8))
    with pytest.raises(ValueError, match="embedding_dim=8, hidden_dim=24"):
        keras_vit.ImageTextModel.from_preset(folder)


def test_clip_tower_with_unset_position_indices_is_refused(tmp_path):
    """keras-hub builds a CLIP vision tower with position indices of zeros
    (its converters write 0..N): every token would get row 0."""
    import keras_hub

    from keras_hub_image_text_dirs import VISION

    keras_hub.models.CLIPVisionEncoder(**VISION).save_to_preset(tmp_path)
    with pytest.raises(ValueError, match=r"position_ids must be 0\.\.N.*starting \[0, 0, 0, 0\]"):
        keras_vit.from_preset(tmp_path)
