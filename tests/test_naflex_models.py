"""SigLIP 2 at native aspect ratio: a transformers `Siglip2VisionModel`
(random, saved with `save_pretrained`) loads with `from_preset` and takes
images of any patch grid and NaFlex patch dicts (`naflex_inputs`), equal to
transformers image by image: pooled output and last hidden state, in eager
calls, compiled `predict` and exported graphs with a fixed number of tokens."""

import json
import os

import keras
import numpy as np
import pytest

import families_2025 as fam
import keras_vit
from conftest import TINY, every_backend, inference, per_backend, spread
from hub_dirs import light_keras_state as _fresh_keras_state  # noqa: F401
from keras_vit import export
from keras_vit.preprocessing import naflex_inputs

pytestmark = spread("SigLIP 2's parity: its layers (test_naflex) are held on every backend; each case once")

transformers = pytest.importorskip("transformers", reason="transformers' SigLIP 2 is the reference")
torch = pytest.importorskip("torch")

BACKEND = keras.backend.backend()
ATOL = 1e-4
PATCH = fam.SIGLIP2_TINY["patch_size"]
# 24 x 40 px -> 3 x 5 patches, 40 x 12 px -> 7 x 2 (budget 16): two non-square grids.
SIZES = [(24, 40, 3), (40, 12, 3)]


@pytest.fixture(scope="module")
def siglip2(tmp_path_factory):
    folder = tmp_path_factory.mktemp("siglip2_naflex")
    reference = fam.save_siglip2(folder, seed=11)
    return str(folder), reference, keras_vit.from_preset(str(folder))


def _photos(seed=0):
    rng = np.random.default_rng(seed)
    return [rng.integers(0, 256, size, dtype=np.uint8) for size in SIZES]


def _grid_image(batch, i):
    """Image `i` of a patch dict as pixels on its own grid (its valid patches)."""
    valid = batch["patch_valid"][i]
    rows, cols = batch["patch_coords"][i][valid].max(axis=0) + 1
    patches = batch["patches"][i][valid].reshape(rows, cols, PATCH, PATCH, 3)
    return patches.transpose(0, 2, 1, 3, 4).reshape(1, rows * PATCH, cols * PATCH, 3)


def _ours(model, batch):
    return inference(lambda b: (model(b), model.forward_features(b)), batch)


def test_one_image_at_its_native_grid(siglip2):
    """One 24 x 40 image on its 3 x 5 grid, padded to 16 tokens, and the
    same pixels as an NHWC image (no padding): transformers' outputs."""
    _, reference, model = siglip2
    batch = naflex_inputs(_photos()[:1], PATCH, 16)
    assert batch["patch_valid"].sum() == 15
    pooled, hidden = fam.siglip2_forward(reference, batch)
    ours_pooled, ours_hidden = _ours(model, batch)
    np.testing.assert_allclose(ours_pooled, pooled, rtol=0, atol=ATOL)
    np.testing.assert_allclose(ours_hidden, hidden, rtol=0, atol=ATOL)  # padding token included
    image = _grid_image(batch, 0)
    assert image.shape == (1, 12, 20, 3)
    image_pooled, image_hidden = _ours(model, image)
    np.testing.assert_allclose(image_pooled, pooled, rtol=0, atol=ATOL)
    np.testing.assert_allclose(image_hidden, hidden[:, :15], rtol=0, atol=ATOL)
    # The mask matters: attending to the padding token changes the output.
    unmasked = dict(batch, patch_valid=np.ones_like(batch["patch_valid"]))
    assert np.abs(inference(model, unmasked) - pooled).max() > 1e-3


def test_padded_batch_of_two_grids_equals_each_image_alone(siglip2):
    """Two images on 3 x 5 and 7 x 2 grids in one padded batch: each
    image's pooled output and valid tokens are transformers' for it alone."""
    _, reference, model = siglip2
    photos = _photos(1)
    batch = naflex_inputs(photos, PATCH, 16)
    assert batch["patch_valid"].sum(axis=1).tolist() == [15, 14]
    ours_pooled, ours_hidden = _ours(model, batch)
    for i, photo in enumerate(photos):
        alone = naflex_inputs([photo], PATCH, 16)
        pooled, hidden = fam.siglip2_forward(reference, alone)
        valid = alone["patch_valid"][0]
        np.testing.assert_allclose(ours_pooled[i], pooled[0], rtol=0, atol=ATOL)
        np.testing.assert_allclose(ours_hidden[i][valid], hidden[0][valid], rtol=0, atol=ATOL)
    # And the padded batch as transformers runs it, every token.
    np.testing.assert_allclose(ours_hidden, fam.siglip2_forward(reference, batch)[1], rtol=0, atol=ATOL)


def test_compiled_predict_takes_every_grid_at_a_fixed_length(siglip2):
    """`predict` compiled with XLA (jax, tensorflow; torch's `jit_compile`
    is `torch.compile`, minutes per graph here, and its fixed-length graph
    is the exported one below) on batches of other grids, 20 tokens each."""
    _, reference, model = siglip2
    model.compile(jit_compile=BACKEND != "torch")
    for seed in (2, 3):
        batch = naflex_inputs(_photos(seed)[::-1], PATCH, 16, length=20)
        out = model.predict(batch, verbose=0, batch_size=2)
        np.testing.assert_allclose(out, fam.siglip2_forward(reference, batch)[0], rtol=0, atol=ATOL)


# One runtime per backend's job, each way of giving the patch dict over the
# three: tests/test_export.py runs every format of every backend.
@every_backend("one export runtime per backend's job")
@pytest.mark.parametrize("format", [per_backend(jax="onnx", tensorflow="openvino", torch="onnx")])
def test_export_takes_the_patch_dict(siglip2, tmp_path, format):
    """`model.export` with a dict `input_signature` (ONNX) or `naflex_length`
    (OpenVINO): a fixed n, a dynamic batch; the artifact's inputs are the
    dict's arrays, by name."""
    _, reference, model = siglip2
    n = 18
    patch = PATCH * PATCH * 3
    shapes = {"patches": (None, n, patch), "patch_coords": (None, n, 2), "patch_valid": (None, n)}
    dtypes = {"patches": "float32", "patch_coords": "int32", "patch_valid": "bool"}
    signature = {k: keras.InputSpec(shape=s, dtype=dtypes[k], name=k) for k, s in shapes.items()}
    assert export.signature_options(model, signature) == {"naflex_length": n}
    path = str(tmp_path / f"siglip2{export.SUFFIXES[format]}")
    if format == "onnx":
        model.export(path, format=format, input_signature=signature)
    else:
        model.export(path, format=format, naflex_length=n)
    batch = naflex_inputs(_photos(4) + _photos(5)[:1], PATCH, 16, length=n)
    diff, outputs, _ = export.verify_export(path, format, model, batch)
    assert diff <= ATOL
    np.testing.assert_allclose(outputs, fam.siglip2_forward(reference, batch)[0], rtol=0, atol=ATOL)


def test_written_back_model_takes_padded_batches_in_transformers(siglip2, tmp_path):
    """`save_to_preset(format="transformers")` writes a `Siglip2VisionModel`
    that gives a padded batch the outputs keras_vit gives its dict."""
    _, _, model = siglip2
    model.save_to_preset(tmp_path, format="transformers")
    assert json.load(open(os.path.join(tmp_path, "config.json")))["architectures"] == ["Siglip2VisionModel"]
    again = transformers.Siglip2VisionModel.from_pretrained(str(tmp_path)).eval()
    batch = naflex_inputs(_photos(6), PATCH, 16)
    for ours, theirs in zip(_ours(model, batch), fam.siglip2_forward(again, batch)):
        np.testing.assert_allclose(ours, theirs, rtol=0, atol=ATOL)


# --- the dict on other models ---------------------------------------------------------------


def _model(**options):
    model = keras_vit.ViT(**dict(TINY, position_interpolation="siglip2", **options))
    rng = np.random.default_rng(0)
    for v in model.weights:
        v.assign(np.asarray(v) + rng.normal(0, 0.2, v.shape).astype("float32"))
    return model


@pytest.mark.parametrize("options", [
    dict(classes=3, num_register_tokens=2),  # class token, registers, the class-token head
    dict(classifier="gap", include_top=False, pooling="avg", pooled_norm=True),
    dict(classifier="gap", include_top=False, pooling="max"),
], ids=["token+registers", "avg", "max"])
def test_full_grid_dict_equals_the_image(options):
    """A dict of one image's patches, in another token order, gives the
    image's output: prefix tokens, their position rows and the pooling's
    mask follow the dict."""
    model = _model(**options)
    image = np.random.default_rng(1).normal(size=(1, 24, 40, 3)).astype("float32")
    rows, cols = 3, 5
    patches = image.reshape(1, rows, 8, cols, 8, 3).transpose(0, 1, 3, 2, 4, 5).reshape(1, rows * cols, -1)
    coords = np.stack(np.divmod(np.arange(rows * cols), cols), -1)[None].astype("int32")
    order = np.random.default_rng(2).permutation(rows * cols)
    pad = 3
    batch = {
        "patches": np.concatenate([patches[:, order], np.full((1, pad, 192), 5.0, "float32")], 1),
        "patch_coords": np.concatenate([coords[:, order], np.zeros((1, pad, 2), "int32")], 1),
        "patch_valid": np.array([[True] * rows * cols + [False] * pad]),
    }
    np.testing.assert_allclose(inference(model, batch), inference(model, image), rtol=0, atol=1e-5)
    if not model.num_prefix_tokens:
        return  # the blocks' outputs: once, with prefix tokens

    def first_block(x):
        return model.forward_intermediates(x, indices=[0], output_fmt="NLC", intermediates_only=True)[0]

    features, grid = inference(first_block, batch), inference(first_block, image)
    np.testing.assert_allclose(features[:, : rows * cols], grid[:, order], rtol=0, atol=1e-5)
    assert features.shape == (1, rows * cols + pad, 16)  # the patch tokens, padding included


@pytest.mark.parametrize("change, match", [
    (dict(keys=("patches", "patch_coords")), r"keys \['patches', 'patch_coords', 'patch_valid'\]"),
    (dict(patches=np.zeros((1, 4, 48), "float32")), r"inputs\['patches'\]` must be \(batch, n, 192\)"),
    (dict(patch_coords=np.zeros((1, 4, 2), "float32")), "must hold integers"),
    (dict(patch_valid=np.zeros((1, 5), bool)), "share their n axis"),
])
def test_bad_dicts_are_named(change, match):
    model = _model(classes=3)
    batch = {"patches": np.zeros((1, 4, 192), "float32"), "patch_coords": np.zeros((1, 4, 2), "int32"),
             "patch_valid": np.ones((1, 4), bool)}
    keys = change.pop("keys", None)
    batch.update(change)
    if keys:
        batch = {k: batch[k] for k in keys}
    with pytest.raises(ValueError, match=match):
        model(batch)


def test_models_without_per_image_positions_refuse_the_dict(tmp_path):
    model = keras_vit.ViT(**TINY, classes=3)
    batch = naflex_inputs(_photos()[:1], 8, 16)
    with pytest.raises(ValueError, match=r"position_interpolation='official'.*'siglip2'"):
        model(batch)
    with pytest.raises(ValueError, match="position_interpolation='official'"):
        model.export(str(tmp_path / "m.onnx"), format="onnx", naflex_length=16)
    siglip = _model(classes=3)
    with pytest.raises(ValueError, match="no image size"):
        siglip.export(str(tmp_path / "m.onnx"), format="onnx", naflex_length=16, image_size=48)
    spec = {k: keras.InputSpec(shape=(None, None, 2)) for k in ("patches", "patch_coords", "patch_valid")}
    with pytest.raises(ValueError, match="fixed number of tokens"):
        siglip.export(str(tmp_path / "m.onnx"), format="onnx", input_signature=spec)
