"""transformers `Siglip2VisionModel` at a fixed resolution: a model made at
random by transformers, saved with `save_pretrained`, loads with
`keras_vit.from_preset` and reproduces transformers' forward pass on the
same images (patchified here, every patch kept) at the checkpoint's grid and
at another, non-square one."""

import json

import numpy as np
import pytest

import keras_vit
from conftest import spread, to_numpy
from hub_dirs import light_keras_state as _fresh_keras_state  # noqa: F401
from hub_dirs import randomise_torch

pytestmark = spread("SigLIP 2's parity: the layers are held on every backend by their contracts; each case "
                    "once")

transformers = pytest.importorskip("transformers")
torch = pytest.importorskip("torch")

PATCH = 7
TINY = dict(hidden_size=16, intermediate_size=32, num_hidden_layers=2, num_attention_heads=2,
            patch_size=PATCH, num_patches=16)


def _images(height, width, seed):
    return np.random.default_rng(seed).uniform(-1, 1, (2, height, width, 3)).astype("float32")


def _patchify(x, order="hwc"):
    """NHWC images -> `(B, gh * gw, p * p * C)` patches, row-major over the
    grid; each patch flattened in (row, column, channel) order ("hwc", the
    processor's) or channel first ("chw", a wrong order)."""
    b, h, w, c = x.shape
    gh, gw = h // PATCH, w // PATCH
    patches = x.reshape(b, gh, PATCH, gw, PATCH, c).transpose(0, 1, 3, 2, 4, 5)
    if order == "chw":
        patches = patches.transpose(0, 1, 2, 5, 3, 4)
    return patches.reshape(b, gh * gw, -1), (gh, gw)


def _reference(model, x, order="hwc"):
    patches, grid = _patchify(x, order)
    with torch.no_grad():
        out = model(
            pixel_values=torch.from_numpy(patches),
            pixel_attention_mask=torch.ones(patches.shape[:2], dtype=torch.int32),
            spatial_shapes=torch.tensor([grid] * len(x)),
        )
    return out.pooler_output.numpy(), out.last_hidden_state.numpy()


@pytest.fixture(scope="module")
def siglip2(tmp_path_factory):
    """The folder and the eval-mode model, every tensor moved off its initial
    value (LayerNorms and the probe included)."""
    folder = tmp_path_factory.mktemp("Siglip2VisionModel")
    torch.manual_seed(0)
    model = transformers.Siglip2VisionModel(transformers.Siglip2VisionConfig(**TINY))
    randomise_torch(model, 40)
    model.save_pretrained(folder)
    return str(folder), model


@pytest.fixture(scope="module")
def loaded(siglip2):
    return keras_vit.from_preset(siglip2[0])


def test_patchify_is_the_processors():
    """The test's patches are the ones `Siglip2ImageProcessor` makes."""
    from transformers.models.siglip2.image_processing_pil_siglip2 import convert_image_to_patches

    x = _images(35, 21, 1)
    patches, _ = _patchify(x)
    np.testing.assert_array_equal(patches[0], convert_image_to_patches(x[0].transpose(2, 0, 1), PATCH))


@pytest.mark.parametrize("size", [(28, 28), (35, 21)], ids=["checkpoint-4x4", "other-5x3"])
def test_siglip2_reproduces_transformers(siglip2, loaded, size):
    """At the 4x4 grid of the checkpoint and at 5x3 patches (`for_inference`
    resizes the table with the "siglip2" interpolation, as transformers does
    for `spatial_shapes=(5, 3)`): `pooler_output` is the model's output,
    `last_hidden_state` its tokens after the final norm."""
    reference = siglip2[1]
    x = _images(*size, seed=sum(size))
    pooled, hidden = _reference(reference, x)
    model = loaded
    assert model.image_size == (28, 28) and model.num_prefix_tokens == 0
    if size != (28, 28):
        model = model.for_inference(image_size=size)
    np.testing.assert_allclose(to_numpy(model(x)), pooled, rtol=0, atol=1e-4)
    np.testing.assert_allclose(to_numpy(model.forward_features(x)), hidden, rtol=0, atol=1e-4)
    # The comparison tells the patch flattening orders apart.
    wrong, _ = _reference(reference, x, order="chw")
    assert np.abs(to_numpy(model(x)) - wrong).max() > 1e-2


@pytest.mark.parametrize("budget, image_size", [(16, (28, 28)), (20, None)], ids=["model-grid", "other-budget"])
def test_siglip2_preprocessing(siglip2, loaded, tmp_path, budget, image_size):
    """Without a processor file: mean and std 0.5, bilinear, at the model's
    size; with `Siglip2ImageProcessor`'s file: its statistics and filter, at
    the model's size when its patch budget is the model's grid (a square
    image fills it), else no size."""
    folder, _ = siglip2
    record = loaded.preprocessing
    assert record.image_size == (28, 28) and record.interpolation == "bilinear"
    np.testing.assert_allclose(record.mean + record.std, (0.5,) * 6)
    for name in ("config.json", "model.safetensors"):
        (tmp_path / name).write_bytes(open(f"{folder}/{name}", "rb").read())
    processor = transformers.Siglip2ImageProcessorPil(patch_size=PATCH, max_num_patches=budget,
                                                      image_mean=[0.5, 0.4, 0.3])
    processor.save_pretrained(tmp_path)
    prep = keras_vit.from_preset(str(tmp_path)).preprocessing
    np.testing.assert_allclose(prep.mean, (0.5, 0.4, 0.3))
    np.testing.assert_allclose(prep.std, (0.5, 0.5, 0.5))
    assert prep.interpolation == "bilinear" and prep.image_size == image_size


@pytest.mark.parametrize("change, match", [
    (dict(num_patches=15), "num_patches"),
    (dict(num_channels=1), "num_channels"),
    (dict(vision_use_head=False), "vision_use_head"),
    (dict(hidden_act="relu"), "hidden_act"),
    (dict(architectures=["Siglip2ForImageClassification"]), "architecture"),
])
def test_siglip2_configs_keras_vit_cannot_build_are_refused(siglip2, tmp_path, change, match):
    with open(f"{siglip2[0]}/config.json") as f:
        config = json.load(f)
    (tmp_path / "config.json").write_text(json.dumps(dict(config, **change)))
    with pytest.raises(ValueError, match=match):
        keras_vit.presets.describe_preset(str(tmp_path))


def test_patch_linear_transform_reads_and_writes_back():
    """The `(D, p * p * 3)` Linear of the flattened patches is the
    `(p, p, 3, D)` kernel: entry by entry, and back."""
    from keras_vit.weights.rules import TRANSFORMS

    rng = np.random.default_rng(0)
    kernel = rng.normal(size=(2, 2, 3, 5))
    linear = np.zeros((5, 12))
    for i, j, c, d in np.ndindex(kernel.shape):
        linear[d, (i * 2 + j) * 3 + c] = kernel[i, j, c, d]
    transform = TRANSFORMS["patch_linear"]
    np.testing.assert_array_equal(transform.read(linear, None), kernel)
    np.testing.assert_array_equal(transform.write(kernel), linear)
    with pytest.raises(ValueError, match=r"\(5, 8\)"):
        transform.read(np.zeros((5, 8)), None)


def _load_strictly(folder):
    """transformers' `Siglip2VisionModel` on `folder`, every key used and set."""
    with open(f"{folder}/config.json") as f:
        assert json.load(f)["architectures"] == ["Siglip2VisionModel"]
    model, info = transformers.Siglip2VisionModel.from_pretrained(folder, output_loading_info=True)
    for kind in ("missing_keys", "unexpected_keys", "mismatched_keys"):
        assert not info.get(kind), (kind, info)
    return model.eval()


def test_siglip2_writes_back_to_transformers(siglip2, loaded, tmp_path):
    """`save_to_preset(format="transformers")` writes a `Siglip2VisionModel`
    that computes what the original computed, at its grid and at another."""
    folder = tmp_path / "hf"
    loaded.save_to_preset(folder, format="transformers")
    with open(folder / "config.json") as f:
        config = json.load(f)
    assert (config["num_patches"], config["patch_size"], config["num_channels"]) == (16, PATCH, 3)
    again = _load_strictly(folder)
    for size in ((28, 28), (35, 21)):
        x = _images(*size, seed=3)
        expected = _reference(siglip2[1], x)
        for ours, theirs in zip(_reference(again, x), expected):
            np.testing.assert_allclose(ours, theirs, rtol=0, atol=1e-4)


def test_siglip2_preprocessing_travels(siglip2, loaded, tmp_path):
    """The written `Siglip2ImageProcessor` file reads back as the same record;
    transformers' processor resizes a square image to the model's 4x4 grid and
    computes the pixels the record describes."""
    from PIL import Image

    loaded.save_to_preset(tmp_path, format="transformers")
    with open(tmp_path / "preprocessor_config.json") as f:
        file = json.load(f)
    assert (file["image_processor_type"], file["max_num_patches"], file["patch_size"]) == (
        "Siglip2ImageProcessor", 16, PATCH)
    assert keras_vit.from_preset(str(tmp_path)).preprocessing == loaded.preprocessing
    photo = np.random.default_rng(5).integers(0, 256, (50, 50, 3), dtype="uint8")
    processor = transformers.AutoImageProcessor.from_pretrained(str(tmp_path))
    out = processor(Image.fromarray(photo), return_tensors="np")
    assert out["spatial_shapes"].tolist() == [[4, 4]] and out["pixel_attention_mask"].all()
    resized = np.asarray(Image.fromarray(photo).resize((28, 28), Image.BILINEAR), "float32")
    expected, _ = _patchify(((resized / 255 - 0.5) / 0.5)[None])
    np.testing.assert_allclose(out["pixel_values"], expected, rtol=0, atol=1e-5)


def test_siglip2_model_built_in_keras_vit_writes_and_reloads(tmp_path):
    """A keras_vit MAP-head model with SigLIP2's resize loads in transformers
    with its own outputs (token features included) and reloads as itself."""
    model = keras_vit.ViT(image_size=28, patch_size=PATCH, hidden_size=16, num_layers=2, num_heads=2, mlp_dim=32,
                          classifier="map", include_top=False, pooling="map", position_interpolation="siglip2",
                          preprocessing=keras_vit.preprocessing.Preprocessing(image_size=28,
                                                                               interpolation="bilinear"))
    rng = np.random.default_rng(7)
    for v in model.weights:
        v.assign(np.asarray(v) + rng.normal(0, 0.2, v.shape).astype("float32"))
    x = _images(28, 28, seed=4)
    expected = to_numpy(model(x)), to_numpy(model.forward_features(x))
    model.save_to_preset(tmp_path, format="transformers")
    for ours, theirs in zip(_reference(_load_strictly(tmp_path), x), expected):
        np.testing.assert_allclose(ours, theirs, rtol=0, atol=1e-4)
    again = keras_vit.from_preset(str(tmp_path))
    np.testing.assert_allclose(to_numpy(again(x)), expected[0], rtol=0, atol=1e-5)
    assert again.preprocessing == model.preprocessing


@pytest.mark.parametrize("change, match", [
    (dict(image_size=(28, 35)), r"Siglip2VisionModel takes square images .* image_size=\(28, 35\)"),
    (dict(input_shape=(28, 28, 1)), r"Siglip2VisionModel flattens 3-channel patches only"),
    (dict(class_token=True), "Siglip2VisionModel has no class token"),
    (dict(pre_norm=True), r"pre_norm=True \(Siglip2VisionModel holds"),
])
def test_siglip2_models_transformers_cannot_hold_are_refused(tmp_path, change, match):
    arguments = dict(image_size=28, patch_size=PATCH, hidden_size=16, num_layers=1, num_heads=2, mlp_dim=32,
                     classifier="map", include_top=False, pooling="map", position_interpolation="siglip2")
    model = keras_vit.ViT(**{**arguments, **change})
    with pytest.raises(ValueError, match=match):
        model.save_to_preset(tmp_path / "hf", format="transformers", preprocessing="inception")
    assert not (tmp_path / "hf" / "config.json").exists()
