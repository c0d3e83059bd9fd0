"""The real DeiT-Tiny weights of ../shared, written into a transformers
directory and a timm Hub directory by the test helpers: keras_vit's
`from_preset` against transformers' own forward pass on real photos."""

import json

import numpy as np
import pytest

import keras_vit
from conftest import DEIT_SAFETENSORS, requires_shared, to_numpy
from hub_dirs import light_keras_state as _fresh_keras_state  # noqa: F401
from hub_dirs import timm_to_transformers, write_timm_hub

pytestmark = requires_shared


@pytest.fixture(scope="module")
def deit(tmp_path_factory):
    transformers = pytest.importorskip("transformers")
    import skimage.data
    import torch
    from safetensors.numpy import load_file, save_file
    from transformers import DeiTImageProcessorPil

    state = load_file(DEIT_SAFETENSORS)
    # transformers directory: the DeiT-Tiny configuration and processor.
    hf_dir = tmp_path_factory.mktemp("hf_deit")
    config = transformers.ViTConfig(
        image_size=224, patch_size=16, hidden_size=192, num_hidden_layers=12, num_attention_heads=3,
        intermediate_size=768, hidden_act="gelu", layer_norm_eps=1e-6, num_labels=1000,
    )
    config.architectures = ["ViTForImageClassification"]
    config.save_pretrained(hf_dir)
    save_file(timm_to_transformers(state), str(hf_dir / "model.safetensors"), metadata={"format": "pt"})
    reference, info = transformers.ViTForImageClassification.from_pretrained(hf_dir, output_loading_info=True)
    assert not any(info[k] for k in ("missing_keys", "unexpected_keys", "mismatched_keys")), info
    reference.eval()
    processor = DeiTImageProcessorPil(size={"height": 256, "width": 256}, crop_size={"height": 224, "width": 224},
                                      image_mean=[0.485, 0.456, 0.406], image_std=[0.229, 0.224, 0.225])
    processor.save_pretrained(hf_dir)
    # timm Hub directory: timm's own tensors and pretrained_cfg.
    timm_dir = write_timm_hub(
        tmp_path_factory.mktemp("timm_deit"), "deit_tiny_patch16_224", state, 1000,
        pretrained_cfg=dict(mean=[0.485, 0.456, 0.406], std=[0.229, 0.224, 0.225], crop_pct=0.875),
    )
    photos = [skimage.data.chelsea(), skimage.data.coffee()]
    pixels = processor(photos, return_tensors="np")["pixel_values"]  # transformers' own preprocessing
    with torch.no_grad():
        logits = reference(torch.from_numpy(pixels)).logits.numpy()
    return dict(hf_dir=str(hf_dir), timm_dir=timm_dir, photos=photos, pixels=pixels, logits=logits)


def test_transformers_deit_tiny_parity_on_real_photos(deit):
    model = keras_vit.from_preset(deit["hf_dir"])
    logits = to_numpy(model.predict(deit["pixels"].transpose(0, 2, 3, 1), verbose=0))
    diff = np.abs(logits - deit["logits"]).max()
    print(f"max |keras_vit - transformers| on DeiT-Tiny logits: {diff:.2e}")
    assert diff <= 1e-4
    top1 = logits.argmax(-1)
    np.testing.assert_array_equal(top1, deit["logits"].argmax(-1))
    assert top1[0] in (281, 282, 285) and top1[1] == 967, top1
    # The preprocessing record scales as the processor does (after its resize and crop).
    assert model.preprocessing.mode == "imagenet" and model.preprocessing.image_size == (224, 224)


def test_timm_hub_deit_tiny_matches_transformers(deit):
    model = keras_vit.from_preset(deit["timm_dir"])
    x = deit["pixels"].transpose(0, 2, 3, 1)
    np.testing.assert_allclose(to_numpy(model.predict(x, verbose=0)), deit["logits"], rtol=0, atol=1e-4)
    assert model.preprocessing.resize == 256 and model.mlp_activation == "gelu"


def test_round_trip_through_transformers_keeps_the_logits(deit, tmp_path):
    model = keras_vit.from_preset(deit["timm_dir"])
    # The timm directory names no classes: DeiT's head is ImageNet-1k's.
    model.save_to_preset(tmp_path, format="transformers", class_names="imagenet1k")
    config = json.load(open(tmp_path / "config.json"))
    assert config["layer_norm_eps"] == 1e-6 and config["hidden_act"] == "gelu"
    again = keras_vit.from_preset(tmp_path)
    x = deit["pixels"].transpose(0, 2, 3, 1)
    np.testing.assert_allclose(to_numpy(again.predict(x, verbose=0)), deit["logits"], rtol=0, atol=1e-4)
