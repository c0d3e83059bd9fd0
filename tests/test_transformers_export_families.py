"""`save_to_preset(format="transformers")` for the DINOv3, CLIP, SigLIP and ViTMAE
towers, and the two-tower `CLIPModel`/`SiglipModel` directories read for
their vision tower.

A model made at random by transformers loads with `keras_vit.from_preset`,
is written back, and transformers' own class loads the written directory
with no missing or unexpected key and computes what the original computed
(pooled output and last hidden state); its processor computes the same
pixels. A keras_vit model built from scratch with the family's options
writes, loads in transformers with its own outputs, and reloads.
"""

import json
import os

import numpy as np
import pytest

import keras_vit
from hub_dirs import light_keras_state as _fresh_keras_state  # noqa: F401
from keras_vit.preprocessing import Preprocessing
from keras_vit.weights import shards
from keras_vit.families import transformers_source as hf_format
from transformers_cases import Case, assert_outputs_equal, keep_mae_table, keras_outputs, mae_noise, make, reference
from conftest import spread

pytestmark = spread("the writers are tables over NumPy arrays; each case once")

transformers = pytest.importorskip("transformers")
torch = pytest.importorskip("torch")

TOWER = dict(hidden_size=16, intermediate_size=32, num_hidden_layers=2, num_attention_heads=2,
             image_size=28, patch_size=7)
TEXT = dict(hidden_size=16, intermediate_size=32, num_hidden_layers=1, num_attention_heads=2,
            vocab_size=64, max_position_embeddings=8)
# Each class, and the image processor its checkpoints ship.
CASES = {
    "DINOv3ViTModel": Case(lambda: transformers.DINOv3ViTConfig(**TOWER, num_register_tokens=1)),
    "CLIPVisionModel": Case(lambda: transformers.CLIPVisionConfig(**TOWER, hidden_act="quick_gelu")),
    "CLIPVisionModelWithProjection": Case(
        lambda: transformers.CLIPVisionConfig(**TOWER, projection_dim=12, hidden_act="gelu"), pooled="image_embeds"),
    "SiglipVisionModel": Case(lambda: transformers.SiglipVisionConfig(**TOWER)),
    "ViTMAEModel": Case(lambda: transformers.ViTMAEConfig(**TOWER, mask_ratio=0.0), pooled=None,
                        prepare=keep_mae_table, inputs=mae_noise),
}
PROCESSORS = {
    # DINOv3's own processor needs torchvision; its statistics in the ViT one.
    "DINOv3ViTModel": lambda: transformers.ViTImageProcessor(
        size={"height": 28, "width": 28}, image_mean=[0.485, 0.456, 0.406], image_std=[0.229, 0.224, 0.225]),
    "CLIPVisionModel": lambda: transformers.CLIPImageProcessor(
        size={"shortest_edge": 32}, crop_size={"height": 28, "width": 28}),
    "CLIPVisionModelWithProjection": lambda: transformers.CLIPImageProcessor(
        size={"shortest_edge": 28}, crop_size={"height": 28, "width": 28}),
    "SiglipVisionModel": lambda: transformers.SiglipImageProcessor(size={"height": 28, "width": 28}),
    "ViTMAEModel": lambda: transformers.ViTImageProcessor(size={"height": 28, "width": 28}),
}
# keras_vit arguments of a model shaped like each class, built from scratch.
TINY = dict(image_size=28, patch_size=7, hidden_size=16, num_layers=2, num_heads=2, mlp_dim=32)
CLIP_OPTIONS = dict(pre_norm=True, patch_bias=False, pooled_norm=True, mlp_activation="quick_gelu",
                    layer_norm_epsilon=1e-5, position_interpolation="clip")
SCRATCH = {
    "DINOv3ViTModel": dict(rope="dinov3", position_embedding="none", include_top=False, pooling="token",
                           qkv_bias=(True, False, True), layer_scale_init=0.1, mlp_activation="gelu",
                           num_register_tokens=2),
    "CLIPVisionModel": dict(CLIP_OPTIONS, include_top=False, pooling="token"),
    "CLIPVisionModelWithProjection": dict(CLIP_OPTIONS, classes=12, classifier_activation=None),
    "SiglipVisionModel": dict(classifier="map", include_top=False, pooling="map", position_interpolation="siglip"),
    "ViTMAEModel": dict(position_embedding="sincos", include_top=False, pooling=None, mlp_activation="gelu",
                        qkv_bias=False, layer_norm_epsilon=1e-12),
}


def _images(size=28, seed=0):
    return np.random.default_rng(seed).uniform(-1, 1, (2, size, size, 3)).astype("float32")


def _load_strictly(name, folder):
    """transformers' class on `folder`, checking that every key was used and set."""
    with open(os.path.join(folder, "config.json")) as f:
        assert json.load(f)["architectures"] == [name]
    model, info = getattr(transformers, name).from_pretrained(folder, output_loading_info=True)
    for kind in ("missing_keys", "unexpected_keys", "mismatched_keys"):
        assert not info.get(kind), (kind, info)
    return model.eval()


@pytest.fixture(scope="module")
def made(tmp_path_factory):
    """`{class: folder}`: a random tower of each class, with its processor."""
    out = {}
    for seed, (name, case) in enumerate(CASES.items(), start=40):
        folder = str(tmp_path_factory.mktemp(name))
        make(transformers, name, case, seed).save_pretrained(folder)
        PROCESSORS[name]().save_pretrained(folder)
        out[name] = folder
    return out


@pytest.mark.parametrize("name", sorted(CASES))
def test_towers_write_back_to_their_transformers_class(made, tmp_path, name):
    original = getattr(transformers, name).from_pretrained(made[name]).eval()
    x = _images()
    expected = reference(original, CASES[name], x)
    model = keras_vit.from_preset(made[name])
    assert_outputs_equal(keras_outputs(model, CASES[name], x), expected)
    model.save_to_preset(tmp_path, format="transformers")
    again = _load_strictly(name, tmp_path)
    assert_outputs_equal(reference(again, CASES[name], x), expected)


@pytest.mark.parametrize("name", sorted(CASES))
def test_preprocessing_travels_with_the_written_tower(made, tmp_path, name):
    """The written `preprocessor_config.json` reads back as the same record,
    and transformers' processors of both folders give the same pixels."""
    from PIL import Image

    model = keras_vit.from_preset(made[name])
    model.save_to_preset(tmp_path, format="transformers")
    assert keras_vit.from_preset(str(tmp_path)).preprocessing == model.preprocessing
    photo = Image.fromarray(np.random.default_rng(5).integers(0, 256, (40, 60, 3), dtype="uint8"))
    pixels = [transformers.AutoImageProcessor.from_pretrained(folder)(photo, return_tensors="np")["pixel_values"]
              for folder in (made[name], tmp_path)]
    assert pixels[0].shape == (1, 3, 28, 28)
    np.testing.assert_allclose(pixels[1], pixels[0], rtol=0, atol=1e-6)


def _randomized(model, seed, keep_zero=()):
    rng = np.random.default_rng(seed)
    for v in model.weights:
        if v.path not in keep_zero:
            v.assign(np.asarray(v) + rng.normal(0, 0.2, v.shape).astype("float32"))
    return model


@pytest.mark.parametrize("name", sorted(SCRATCH))
def test_models_built_with_family_options_write_and_reload(tmp_path, name):
    """The written folder loads in transformers with the keras_vit model's
    outputs, and `from_preset` reads it back as the same model."""
    prep = Preprocessing.from_mode("imagenet", image_size=28)
    model = keras_vit.ViT(**TINY, **SCRATCH[name], preprocessing=prep)
    # The projection of CLIPVisionModelWithProjection has no bias: the head's stays zero.
    model = _randomized(model, 7, keep_zero=("head/bias",))
    x = _images(seed=1)
    expected = keras_outputs(model, CASES[name], x)
    model.save_to_preset(tmp_path, format="transformers")
    assert_outputs_equal(reference(_load_strictly(name, tmp_path), CASES[name], x), expected)
    again = keras_vit.from_preset(str(tmp_path))
    assert_outputs_equal(keras_outputs(again, CASES[name], x), expected, atol=1e-5)
    assert again.preprocessing == model.preprocessing


@pytest.mark.parametrize(
    "name, change, match",
    [
        ("CLIPVisionModel", dict(patch_bias=True), r"patch_bias=True \(CLIPVisionModel holds patch_bias in \[False\]\)"),
        ("CLIPVisionModel", dict(pooled_norm=False), "CLIPVisionModel normalises .* pooled_norm=False"),
        ("CLIPVisionModel", dict(pooling="avg"), "needs pooling='token'. Received: pooling='avg'"),
        ("CLIPVisionModel", dict(image_size=(28, 35)), r"takes square images .* image_size=\(28, 35\)"),
        ("CLIPVisionModel", dict(qkv_bias=False), r"qkv_bias=False \(CLIPVisionModel holds qkv_bias in \[True\]\)"),
        ("SiglipVisionModel", dict(class_token=True), "SiglipVisionModel has no class token"),
        ("SiglipVisionModel", dict(include_top=True, classifier="map", pooling=None),
         "SiglipVisionModel has no classifier after its MAP head"),
        ("SiglipVisionModel", dict(pre_norm=True), r"pre_norm=True \(SiglipVisionModel holds"),
        ("ViTMAEModel", dict(position_embedding="sincos_mocov3"),
         r"position_embedding='sincos_mocov3' \(ViTMAEModel holds position_embedding in \['sincos'\]\)"),
        ("ViTMAEModel", dict(pooling="token"), "needs pooling=None. Received: pooling='token'"),
        ("ViTMAEModel", dict(num_register_tokens=2), "ViTMAEModel has no register tokens"),
        ("DINOv3ViTModel", dict(mlp_norm=True), r"mlp_norm=True \(DINOv3ViTModel holds mlp_norm in \[False\]\)"),
        ("DINOv3ViTModel", dict(image_size=(28, 35), rope_settings={"order": "xy"}), "sets the rotary base"),
    ],
)
def test_options_a_family_cannot_hold_are_refused(tmp_path, name, change, match):
    model = keras_vit.ViT(**{**TINY, **SCRATCH[name], **change})
    with pytest.raises(ValueError, match=match):
        model.save_to_preset(tmp_path / "hf", format="transformers", preprocessing="imagenet")
    assert not os.path.exists(tmp_path / "hf" / "config.json")


def test_a_projection_head_with_a_bias_is_refused(tmp_path):
    model = keras_vit.ViT(**TINY, **SCRATCH["CLIPVisionModelWithProjection"])
    model.get_layer("head").bias.assign(np.full(12, 0.5, "float32"))
    with pytest.raises(ValueError, match=r"visual_projection has no bias.*largest \|bias\| = 0.5"):
        model.save_to_preset(tmp_path, format="transformers", preprocessing="imagenet")
    assert not os.listdir(tmp_path)


TWO_TOWERS = {
    "CLIPModel": lambda: transformers.CLIPConfig(
        vision_config=dict(TOWER, hidden_act="quick_gelu"), text_config=TEXT, projection_dim=12),
    "SiglipModel": lambda: transformers.SiglipConfig(vision_config=TOWER, text_config=TEXT),
}


@pytest.mark.parametrize("name", sorted(TWO_TOWERS))
def test_two_tower_directories_load_their_vision_tower(tmp_path, name):
    """The model's output is `get_image_features` (CLIP's projected pooled
    output; SigLIP's pooled output), its token features the vision tower's
    last hidden state; the text tower is ignored, each key by name."""
    case = Case(TWO_TOWERS[name])
    two_towers = make(transformers, name, case, 50)
    two_towers.save_pretrained(tmp_path)
    x = _images(seed=2)
    with torch.no_grad():
        features = two_towers.get_image_features(pixel_values=torch.from_numpy(x.transpose(0, 3, 1, 2)))
    model = keras_vit.from_preset(str(tmp_path))
    assert_outputs_equal(keras_outputs(model, case, x),
                         (features.pooler_output.numpy(), features.last_hidden_state.numpy()))
    with open(tmp_path / "config.json") as f:
        config = json.load(f)
    state, path = shards.read_state(str(tmp_path))
    ignored = hf_format.read(state, config, path).ignored
    text = {k for k in state if k.startswith("text_model.")}
    assert text and text <= set(ignored)
    assert all("text tower" in ignored[k] for k in text)
    assert set(ignored) == {k for k in state if not k.startswith(("vision_model.", "visual_projection."))}
