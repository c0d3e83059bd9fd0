"""timm's ViT zoo against timm itself: one architecture of every family
the generated table brought (DeiT III, FlexiViT, EVA, EVA02-enormous, the
Perception Encoder towers, the relative-position and hybrid ViTs, TIPSv2,
RADIO, InternViT, the parallel and differential blocks, DINOv2-giant's and
DINOv3-7B's gated MLPs, ...), made at random by `timm.create_model` in a
tiny size and written by timm's `save_for_hf`, loads with `from_preset`
and gives timm's outputs (its pooled output or classifier, and
`forward_features`) within 1e-4 on every backend. The coverage of the
table and the refusals are checked here too; the table against the
installed timm in test_timm_table.py."""

import json

import numpy as np
import pytest
from conftest import inference, runs_once, spread, to_numpy
from hub_dirs import light_keras_state as _fresh_keras_state  # noqa: F401
from timm_models import IMAGE_SIZE, images, import_timm, make, outputs

import keras_vit
from keras_vit.families import timm_zoo

pytestmark = spread("every timm family is ViT layers held on every backend by their contracts; each family's "
                    "parity once")

timm = import_timm()
ATOL = 1e-4
# One architecture of each family or block option the table added: what it covers.
FAMILY_CASES = {
    "deit3_small_patch16_224": "DeiT III: position rows without the class token, LayerScale",
    "flexivit_small": "FlexiViT",
    "eva_giant_patch14_224": "EVA: timm's Eva, fused qkv with query and value biases, GELU MLP, mean pool",
    "eva_large_patch14_196": "EVA-L: a VisionTransformer averaging the patches past its class token",
    "eva02_enormous_patch14_clip_224": "EVA02-enormous: residual post-norm blocks",
    "vit_pe_core_gigantic_patch14_448": "Perception Encoder core without class token, its attention pool",
    "vit_pe_lang_large_patch14_448": "Perception Encoder language tower: no final norm, LayerScale",
    "vit_relpos_medium_patch16_cls_224": "relative position MLP in every block, class token",
    "vit_srelpos_small_patch16_224": "relative position MLP shared by the blocks",
    "vit_relpos_base_patch32_plus_rpn_256": "relative positions in residual post-norm blocks",
    "vit_base_patch16_rpn_224": "timm's ResPostBlock",
    "vit_small_r26_s32_224": "timm's hybrid: ResNet-26 and ViT-S",
    "vit_tiny_r_s16_p8_224": "timm's hybrid on the ResNet's stem alone",
    "vit_base_mci_224": "MobileCLIP-2's image tower: a convolution stem with BatchNorm embeds the patches",
    "vit_giant_patch14_reg1_tipsv2": "TIPSv2 (and DINOv2-giant): SwiGLU packed in one Linear (timm's GluMlp)",
    "vit_base_patch16_radio_v3": "RADIO: registers without position rows, no final norm",
    "vit_intern300m_patch14_448": "InternViT-300M",
    "vit_pwee_patch16_reg1_gap_256": "parallel attention and MLP (ParallelScalingBlock)",
    "vit_dwee_patch16_reg1_gap_256": "differential attention",
    "vit_dpwee_patch16_reg1_gap_256": "parallel blocks with differential attention",
    "vit_so150m2_patch16_reg1_gap_256": "SO150M2",
    "vit_7b_patch16_dinov3": "DINOv3-7B: SwiGLU rounded up to 64",
    "vit_base_patch16_lingbot": "LingBot-Vision: DINOv3 with the class token pooled",
    "vit_base_patch16_rope_reg1_gap_256": "timm's rotary register ViTs",
    "vit_large_patch16_sapiens2": "Sapiens2: grouped-query attention per block, RMS query/key norms, "
                                  "LayerScale on the attention branch alone",
}


def _reference(tmp_path, name):
    """`(folder, images, timm's output, timm's features)` of a random timm model."""
    seed = sorted(FAMILY_CASES).index(name)
    model = make(timm, name, tmp_path, seed=seed)
    x = images(IMAGE_SIZE, seed=seed)
    return (str(tmp_path), x, *outputs(model, x))


# The convolution stems compile for seconds on jax (one program per layer
# shape) and run in a fraction of one on tensorflow: these run there.
CONVOLUTION_STEMS = ("vit_base_mci_224", "vit_small_r26_s32_224")


@pytest.mark.parametrize("name", [
    pytest.param(n, marks=runs_once("tensorflow", "a convolution stem's parity; the stems' layers are held on "
                                    "every backend by the model contract")) if n in CONVOLUTION_STEMS else n
    for n in sorted(FAMILY_CASES)])
def test_family_reproduces_timm(tmp_path, name):
    folder, x, expected, features = _reference(tmp_path, name)
    model = keras_vit.from_preset(folder)
    if isinstance(model, keras_vit.ViTHybrid):
        np.testing.assert_allclose(inference(model, x), expected, atol=ATOL, rtol=0)
    else:
        out, tokens = inference(lambda images: (model(images), model.forward_features(images)), x)
        np.testing.assert_allclose(out, expected, atol=ATOL, rtol=0)
        np.testing.assert_allclose(tokens, features, atol=ATOL, rtol=0)
    assert np.abs(expected[0] - expected[1]).max() > 1e-3  # the images are told apart


def test_without_a_head_the_output_is_timms_pooled_features(tmp_path):
    name = "vit_relpos_base_patch16_clsgap_224"
    model = make(timm, name, tmp_path, num_classes=0)
    x = images(32, seed=4)
    expected, _ = outputs(model, x)
    loaded = keras_vit.from_preset(str(tmp_path))
    assert not loaded.include_top and expected.shape == (2, 32)
    np.testing.assert_allclose(to_numpy(loaded(x)), expected, atol=ATOL, rtol=0)


def test_a_size_that_is_no_multiple_of_the_patch_drops_the_last_pixels_as_timm(tmp_path):
    """`vit_so400m_patch14_siglip_384`: timm's patch convolution reads whole
    patches only (here 38 pixels in patches of 7: 35 read)."""
    model = make(timm, "vit_so400m_patch14_siglip_384", tmp_path, img_size=38, patch_size=7)
    x = images(38, seed=5)
    expected, features = outputs(model, x)
    loaded = keras_vit.from_preset(str(tmp_path))
    assert loaded.encoder_config.crop_to_patches and loaded.grid_size == (5, 5)
    np.testing.assert_allclose(to_numpy(loaded(x)), expected, atol=ATOL, rtol=0)
    np.testing.assert_allclose(to_numpy(loaded.forward_features(x)), features, atol=ATOL, rtol=0)


def test_at_least_95_percent_of_the_pretrained_architectures_build():
    built, pending, refused, listed = timm_zoo.coverage()
    assert len(built) + len(pending) + len(refused) == len(listed) > 200
    assert len(built) / len(listed) >= 0.95, (len(built), len(listed))
    # Every name that does not build is listed with its reason.
    for name, reason in {**pending, **refused}.items():
        status, why = timm_zoo.not_built(name)
        assert why in reason and status == ("pending" if name in pending else "refused")


def test_a_name_that_does_not_build_says_why(tmp_path):
    # timm's classifier on SAM's blocks without the neck: read by the SAM family, refused by name.
    config = {"architecture": "samvit_base_patch16_224", "pretrained_cfg": {}}
    (tmp_path / "config.json").write_text(json.dumps(config))
    with pytest.raises(ValueError, match="samvit_base_patch16_224.*no equivalent of.*neck_chans"):
        keras_vit.from_preset(str(tmp_path))
    assert "neck_chans" in timm_zoo.model_info("samvit_base_patch16_224").reason
    with pytest.raises(ValueError, match=r"timm 1\.\d+\.\d+ has no ViT-family model.*closest"):
        timm_zoo.model_arguments({"architecture": "vit_base_patch16_sapiens", "pretrained_cfg": {}})


def test_list_models_as_timm():
    dinov3 = keras_vit.list_models("vit_*dinov3*")
    assert dinov3 == sorted(n for n in timm.list_models("vit_*dinov3*") if timm_zoo.model_info(n).builds)
    assert "vit_7b_patch16_dinov3" in dinov3
    tagged = keras_vit.list_models("deit3_base*", pretrained=True)
    assert tagged == timm.list_pretrained("deit3_base*")
    # SAM's encoders through the SAM family's reader (its parity: tests/test_relative_position.py).
    assert keras_vit.list_models("samvit*", pretrained=True) == timm.list_pretrained("samvit*")
    assert set(keras_vit.list_models(family="Relative-position ViT")) == set(
        timm.list_models(["vit_relpos_*", "vit_srelpos_*"]))
    info = timm_zoo.model_info("vit_base_mci_224")
    assert (info.family, info.builds) == ("MobileCLIP", True) and "apple_mclip2_dfndr2b" in info.tags
    assert timm_zoo.model_info("samvit_base_patch16").builds
    with pytest.raises(ValueError, match="family"):
        keras_vit.list_models(family="DINO")
