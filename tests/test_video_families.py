"""transformers' video families (VideoMAE, ViViT): a model made at random by
transformers, saved with `save_pretrained`, loads with `keras_vit.from_preset`
and reproduces transformers' own forward pass on the same clips (logits, or
`last_hidden_state` for the encoders); the processors' scaling and frame
count reach the model's `preprocessing`."""

import json
import shutil

import numpy as np
import pytest

import keras_vit
from conftest import runs_once, spread, to_numpy
from hub_dirs import offline_hub, populate_hf_cache, randomise_torch  # noqa: F401 (a fixture)

pytestmark = spread("transformers' video families: the layers are held on every backend by their contracts; "
                    "each case once")

transformers = pytest.importorskip("transformers")
torch = pytest.importorskip("torch")

TINY = dict(hidden_size=16, num_hidden_layers=2, num_attention_heads=2, intermediate_size=32, image_size=16,
            num_frames=4, num_labels=3)
VIDEOMAE = dict(TINY, patch_size=8, tubelet_size=2)
# Each case: the transformers class and its config.
CONFIGS = {
    "VideoMAEModel": ("VideoMAEModel", lambda: transformers.VideoMAEConfig(**VIDEOMAE)),
    # Without mean pooling the encoder ends in a norm; without biases on the query and value.
    "VideoMAEModel-final-norm-no-bias": (
        "VideoMAEModel", lambda: transformers.VideoMAEConfig(**VIDEOMAE, use_mean_pooling=False, qv_bias=False)),
    "VideoMAEForVideoClassification": (
        "VideoMAEForVideoClassification", lambda: transformers.VideoMAEConfig(**VIDEOMAE)),
    "VivitModel": ("VivitModel", lambda: transformers.VivitConfig(**TINY, tubelet_size=[2, 8, 8])),
    "VivitForVideoClassification": (
        "VivitForVideoClassification", lambda: transformers.VivitConfig(**TINY, tubelet_size=[2, 8, 8])),
}
PROCESSORS = {"VideoMAEModel": "VideoMAEImageProcessor", "VivitModel": "VivitImageProcessor"}


def _clips(seed=0):
    """Two clips `(frames, height, width, 3)` of the tiny models' size."""
    return np.random.default_rng(seed).uniform(-1, 1, (2, 4, 16, 16, 3)).astype("float32")


def reference(model, clips):
    """transformers' logits, or `last_hidden_state` for an encoder, on NTHWC clips."""
    with torch.no_grad():
        out = model(pixel_values=torch.from_numpy(clips.transpose(0, 1, 4, 2, 3)))
    return (out.logits if hasattr(out, "logits") else out.last_hidden_state).numpy()


@pytest.fixture(scope="module")
def made(tmp_path_factory):
    """`{case: (folder, transformers' outputs on _clips())}`."""
    out = {}
    for seed, (name, (hf_class, config)) in enumerate(CONFIGS.items()):
        folder = tmp_path_factory.mktemp(name)
        model = randomise_torch(getattr(transformers, hf_class)(config()), seed)
        model.save_pretrained(folder)
        out[name] = (str(folder), reference(model, _clips()))
    return out


@pytest.mark.parametrize("name", CONFIGS)
def test_video_families_reproduce_transformers(made, name):
    folder, expected = made[name]
    model = keras_vit.from_preset(folder)
    assert (model.num_frames, model.tubelet_size) == (4, 2)
    np.testing.assert_allclose(to_numpy(model(_clips())), expected, rtol=0, atol=1e-4)


@runs_once("torch", "the download of an hf:// handle is the other families'; the model's calls are held above")
def test_hf_handles_load_through_the_hub_cache(made, offline_hub):
    """An `hf://` handle of a video checkpoint is fetched as any transformers
    directory (here from a huggingface_hub cache, the Hub switched off)."""
    folder, expected = made["VideoMAEForVideoClassification"]
    populate_hf_cache(offline_hub, "videos/videomae-tiny", folder)
    model = keras_vit.from_preset("hf://videos/videomae-tiny")
    np.testing.assert_allclose(to_numpy(model(_clips())), expected, rtol=0, atol=1e-4)


@runs_once("torch", "processor files and records are data")
@pytest.mark.parametrize("name", PROCESSORS)
def test_processor_scaling_and_frame_count_reach_the_model(made, tmp_path, name):
    """The record scales a frame as the checkpoint's processor does (ViViT's
    `offset` included) and holds the model's frame count."""
    folder, _ = made[name]
    shutil.copytree(folder, tmp_path, dirs_exist_ok=True)
    processor = getattr(transformers, PROCESSORS[name])(image_mean=[0.4, 0.5, 0.6], image_std=[0.2, 0.3, 0.25])
    processor.save_pretrained(tmp_path)
    model = keras_vit.from_preset(str(tmp_path))
    assert model.preprocessing.num_frames == 4
    frames = np.random.default_rng(1).integers(0, 256, (4, 16, 16, 3), dtype=np.uint8)
    theirs = processor(list(frames), do_resize=False, do_center_crop=False, return_tensors="np")["pixel_values"]
    ours = keras_vit.preprocess_input(frames.astype("float32"), model=model)
    np.testing.assert_allclose(to_numpy(ours), theirs[0].transpose(0, 2, 3, 1), rtol=0, atol=1e-5)


@runs_once("torch", "config files are data")
@pytest.mark.parametrize(
    "name, change, match",
    [
        ("VideoMAEForVideoClassification", dict(use_mean_pooling=False), "use_mean_pooling=False"),
        ("VideoMAEModel", dict(architectures=["VideoMAEForPreTraining"]), "architecture must be one of"),
        ("VivitModel", dict(hidden_act="relu"), "hidden_act"),
    ],
)
def test_video_configs_keras_vit_cannot_build_are_refused(made, tmp_path, name, change, match):
    with open(f"{made[name][0]}/config.json") as f:
        config = json.load(f)
    (tmp_path / "config.json").write_text(json.dumps(dict(config, **change)))
    with pytest.raises(ValueError, match=match):
        keras_vit.presets.describe_preset(str(tmp_path))


@runs_once("torch", "the writers' refusals read the config only")
@pytest.mark.parametrize("layout", ["transformers", "timm"])
def test_video_models_are_not_written_as_image_checkpoints(made, tmp_path, layout):
    model = keras_vit.from_preset(made["VivitForVideoClassification"][0])
    with pytest.raises(ValueError, match="num_frames=4"):
        model.save_to_preset(tmp_path, format=layout, preprocessing="imagenet", class_names=["a", "b", "c"])
