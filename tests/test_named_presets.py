"""Short names (`keras_vit.presets.named`): the table, its place in the
catalogue, and `from_preset` / `load_model` resolving a name to its handle,
offline."""

import os

import numpy as np
import pytest

import keras_vit
from hub_dirs import offline_hub, populate_hf_cache  # noqa: F401 (a fixture)
from keras_vit.presets import PresetDownloadError, catalogue
from keras_vit.presets.named import NAMED_PRESETS
from conftest import runs_once

pytestmark = runs_once("torch", "the table of names and its resolution are Python")

TINY_DEIT = dict(image_size=32, patch_size=8, hidden_size=16, num_hidden_layers=2,
                 num_attention_heads=2, intermediate_size=32, num_labels=3)


def to_numpy(x):
    import keras

    return np.asarray(keras.ops.convert_to_numpy(x))


@pytest.fixture(scope="module")
def deit_folder(tmp_path_factory):
    """A random tiny transformers DeiT classifier, saved, with its logits."""
    transformers = pytest.importorskip("transformers")
    import torch

    torch.manual_seed(0)
    model = transformers.DeiTForImageClassification(transformers.DeiTConfig(**TINY_DEIT)).eval()
    folder = str(tmp_path_factory.mktemp("deit"))
    model.save_pretrained(folder)
    images = np.random.default_rng(0).uniform(-1, 1, (2, 32, 32, 3)).astype("float32")
    with torch.no_grad():
        logits = model(pixel_values=torch.from_numpy(images.transpose(0, 3, 1, 2))).logits.numpy()
    return folder, images, logits


def test_every_row_is_a_valid_model_handle():
    huggingface_hub = pytest.importorskip("huggingface_hub")
    for name, row in NAMED_PRESETS.items():
        assert row.name == name and name == name.lower() and not any(c in name for c in "/.:")
        uri = huggingface_hub.parse_hf_uri(row.handle)
        assert uri.type == "model" and uri.id == row.repo_id and not uri.path_in_repo, row
        assert row.card == "https://huggingface.co/" + row.repo_id
        assert row.licence is None or row.licence.strip()
        assert row.description.endswith(".") and row.preprocessing


def test_short_names_are_catalogue_rows_of_their_handles():
    """Each short name lists first, as the catalogue row of the checkpoint
    its handle names, in the same family."""
    names = keras_vit.list_presets()
    assert names[:len(NAMED_PRESETS)] == list(NAMED_PRESETS)
    for name, short in NAMED_PRESETS.items():
        row = catalogue.PRESETS[name]
        target = catalogue.PRESETS[row.alias_of]
        assert row.handle == target.handle == short.handle and row.source == "keras_vit"
        assert row.family == short.family == target.family
        assert (row.task, row.parameters, row.licence) == (target.task, target.parameters, target.licence)
    assert keras_vit.list_presets("dinov3_vit?16") == ["dinov3_vits16", "dinov3_vitb16", "dinov3_vitl16"]


def test_unknown_short_name_names_the_closest(offline_hub):
    with pytest.raises(ValueError, match="dinov3_vits16") as info:
        keras_vit.from_preset("dinov3_vit_s16")
    assert "list_presets" in str(info.value)
    with pytest.raises(ValueError, match="dinov2_small"):
        keras_vit.load_model("dinov2_smal")


def test_short_name_offline_names_the_handle_and_how_to_fetch_it(offline_hub):
    row = NAMED_PRESETS["dinov3_vits16"]
    with pytest.raises(PresetDownloadError) as info:
        keras_vit.from_preset("dinov3_vits16")
    message = str(info.value)
    assert "'dinov3_vits16'" in message and row.handle in message
    assert f"hf download {row.repo_id}" in message and "gated" in message
    assert "HF_HUB_OFFLINE is set" in message and "The network is the cause" in message
    assert info.value.cache_path == os.path.join(offline_hub, "models--facebook--dinov3-vits16-pretrain-lvd1689m")
    # The two-tower names resolve the same way in ImageTextModel.from_preset.
    with pytest.raises(PresetDownloadError, match="'siglip_b16_224' is hf://google/siglip-base-patch16-224"):
        keras_vit.ImageTextModel.from_preset("siglip_b16_224")


def test_short_name_resolves_to_the_cached_handle(offline_hub, deit_folder):
    folder, images, logits = deit_folder
    populate_hf_cache(offline_hub, NAMED_PRESETS["deit_tiny"].repo_id, folder)
    model = keras_vit.from_preset("deit_tiny")
    np.testing.assert_allclose(to_numpy(model(images)), logits, rtol=0, atol=2e-5)
    with pytest.warns(UserWarning, match="zero-initialised"):
        again = keras_vit.load_model("deit_tiny", classes=5)
    assert again.output_shape == (None, 5)
