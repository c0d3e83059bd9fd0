"""Strict loading: parity with the NumPy reference, adaptation, errors."""

import numpy as np
import pytest
import scipy.ndimage

import keras_vit
import reference
from conftest import DEIT_NPZ, DEIT_SAFETENSORS, TINY, imagenet_preprocess, requires_shared, spread, to_numpy
from keras_vit.weights import load_weights
from synthetic import POSEMB, images, official_params, tiny_model, to_big_vision, to_timm

pytestmark = spread("strict loading reads NumPy arrays into models held on every backend; each case once")



def write_npz(tmp_path, params, name="ckpt.npz"):
    path = tmp_path / name
    np.savez(path, **params)
    return str(path)


@pytest.mark.parametrize("representation_size", [None, 12])
def test_official_layout_matches_numpy_reference(tmp_path, rng, representation_size):
    params = official_params(rng, representation_size=representation_size)
    model = tiny_model(weights=write_npz(tmp_path, params), representation_size=representation_size)
    x = images(rng)
    expected = reference.forward(params, x, gelu_approximate=True, epsilon=1e-6)
    np.testing.assert_allclose(to_numpy(model(x)), expected, rtol=0, atol=2e-5)


def test_big_vision_and_timm_layouts_give_identical_logits(tmp_path, rng):
    from safetensors.numpy import save_file

    params = official_params(rng)
    files = [write_npz(tmp_path, params), write_npz(tmp_path, to_big_vision(params), "bv.npz")]
    files.append(str(tmp_path / "timm.safetensors"))
    save_file(to_timm(params, TINY["num_heads"]), files[-1])
    x = images(rng)
    logits = [to_numpy(tiny_model(weights=f, mlp_activation="gelu_tanh")(x)) for f in files]
    np.testing.assert_array_equal(logits[1], logits[0])
    np.testing.assert_array_equal(logits[2], logits[0])


@requires_shared
def test_real_weights_npz_and_safetensors_agree_and_classify():
    import skimage.data

    batch = np.stack([imagenet_preprocess(skimage.data.chelsea()), imagenet_preprocess(skimage.data.coffee())])
    npz = keras_vit.ViTTi16(weights=str(DEIT_NPZ), mlp_activation="gelu", classifier_activation=None)
    timm = keras_vit.ViTTi16(weights=str(DEIT_SAFETENSORS), classifier_activation=None)
    assert timm.mlp_activation == "gelu"  # timm files imply the erf GELU
    logits = to_numpy(npz(batch))
    np.testing.assert_array_equal(to_numpy(timm(batch)), logits)
    top1 = logits.argmax(-1)
    assert top1[0] in (281, 282, 285), top1
    assert top1[1] == 967, top1


@pytest.mark.parametrize("name", ["ckpt.npz", "tiny.weights.h5", "timm.safetensors"])
def test_a_file_that_does_not_record_its_gelu_needs_it_said(tmp_path, rng, name):
    """One rule for the API, `load_model` and the commands (`numerics_unrecorded`):
    an .npz (Google's tanh, DeiT's erf) or a .weights.h5 is refused without
    `mlp_activation`; a timm file records the exact GELU by its format."""
    from safetensors.numpy import save_file

    from keras_vit.presets.resolver import numerics_unrecorded

    params = official_params(rng)
    path = str(tmp_path / name)
    if name.endswith(".npz"):
        write_npz(tmp_path, params, name)
    elif name.endswith(".h5"):
        tiny_model().save_weights(path)
    else:
        save_file(to_timm(params, TINY["num_heads"]), path)
    config = dict(TINY, classes=10)
    unrecorded = "mlp_activation" in numerics_unrecorded(path)
    assert unrecorded == (not name.endswith(".safetensors"))
    if not unrecorded:
        assert keras_vit.ViT(**config, weights=path).mlp_activation == "gelu"
        return
    said = (r"does not record the GELU.*mlp_activation='gelu_tanh'.*mlp_activation='gelu'.*--gelu erf"
            if name.endswith(".npz") else r"holds arrays only.*mlp_activation.*'gelu'.*--gelu erf")
    with pytest.raises(ValueError, match=said):
        keras_vit.ViT(**config, weights=path)
    with pytest.raises(ValueError, match=said):
        keras_vit.load_model("ViT", weights=path, **config)
    for activation in ("gelu", "gelu_tanh"):
        assert keras_vit.ViT(**config, weights=path, mlp_activation=activation).mlp_activation == activation


def grid_rows(posemb, grid):
    return posemb[0, 1:].reshape(grid + (posemb.shape[-1],))


@pytest.mark.parametrize("target", [(384, 384), (224, 320)])
def test_position_embedding_resized_like_official_zoom(tmp_path, rng, target):
    config = dict(patch_size=16, hidden_size=16, num_layers=1, num_heads=2, mlp_dim=32)
    params = official_params(rng, image_size=224, classes=5, **config)
    model = keras_vit.ViT(image_size=target, classes=5, weights=write_npz(tmp_path, params),
                          mlp_activation="gelu_tanh", **config)
    loaded = to_numpy(model.get_layer("embedding").pos_embedding)
    new = (target[0] // 16, target[1] // 16)
    zoomed = scipy.ndimage.zoom(grid_rows(params[POSEMB], (14, 14)), (new[0] / 14, new[1] / 14, 1), order=1)
    np.testing.assert_array_equal(loaded[0, 0], params[POSEMB][0, 0])
    np.testing.assert_array_equal(grid_rows(loaded, new), zoomed)


def test_other_class_count_gets_zero_head_and_warning(tmp_path, rng):
    params = official_params(rng, classes=10)
    with pytest.warns(UserWarning, match=r"ckpt\.npz.*10 classes.*3.*zero-initialised"):
        model = tiny_model(weights=write_npz(tmp_path, params), classes=3)
    assert not to_numpy(model.get_layer("head").kernel).any()
    assert not to_numpy(model.get_layer("head").bias).any()
    np.testing.assert_array_equal(to_numpy(model.get_layer("embedding").class_embedding), params["cls"])


def test_include_top_false_ignores_classifier(tmp_path, rng):
    params = official_params(rng, representation_size=12)
    model = tiny_model(weights=write_npz(tmp_path, params), include_top=False)
    x = images(rng)
    backbone = {k: v for k, v in params.items() if not k.startswith(("head/", "pre_logits/"))}
    expected = reference.forward(backbone, x)
    np.testing.assert_allclose(to_numpy(model(x)), expected, rtol=0, atol=2e-5)


def test_pre_logits_dropped_with_their_head(tmp_path, rng):
    params = official_params(rng, representation_size=12)
    with pytest.warns(UserWarning, match="pre-logits"):
        model = tiny_model(weights=write_npz(tmp_path, params))
    assert "pre_logits" not in [layer.name for layer in model.layers]
    assert not to_numpy(model.get_layer("head").kernel).any()


def test_pre_logits_required_when_model_has_them(tmp_path, rng):
    path = write_npz(tmp_path, official_params(rng))
    with pytest.raises(ValueError, match=r"(?s)ckpt\.npz.*missing keys.*pre_logits/kernel"):
        tiny_model(weights=path, representation_size=12)


def test_keras_weights_round_trip_and_adapt(tmp_path, rng):
    source = tiny_model()
    path = str(tmp_path / "tiny.weights.h5")
    source.save_weights(path)
    x = images(rng)
    np.testing.assert_array_equal(to_numpy(tiny_model(weights=path)(x)), to_numpy(source(x)))
    with pytest.warns(UserWarning, match="zero-initialised"):
        bigger = tiny_model(weights=path, image_size=48, classes=4)
    posemb = to_numpy(source.get_layer("embedding").pos_embedding)
    zoomed = scipy.ndimage.zoom(grid_rows(posemb, (4, 4)), (1.5, 1.5, 1), order=1)
    np.testing.assert_array_equal(grid_rows(to_numpy(bigger.get_layer("embedding").pos_embedding), (6, 6)), zoomed)


def test_registry_name_is_fetched(monkeypatch, tmp_path, rng):
    import dataclasses

    from keras_vit.architectures import ARCHITECTURE_CONFIGS
    from keras_vit.weights import download, registry

    arch = {k: v for k, v in TINY.items() if k != "image_size"}
    monkeypatch.setitem(ARCHITECTURE_CONFIGS, "T/8", arch)
    record = dataclasses.replace(
        next(iter(registry.WEIGHTS.values())),
        architecture="T/8", name="tiny-test", image_size=32, classes=10,
        representation_size=None, gelu_approximate=False,
    )
    monkeypatch.setitem(registry.WEIGHTS, record.key, record)
    params = official_params(rng)
    fetched = []
    monkeypatch.setattr(download, "fetch", lambda r, **kw: fetched.append(r) or write_npz(tmp_path, params))
    model = keras_vit.ViT(weights="tiny-test", classifier_activation=None, **arch)
    assert fetched == [record]
    assert (model.image_size, model.classes, model.mlp_activation) == ((32, 32), 10, "gelu")
    np.testing.assert_array_equal(to_numpy(model.get_layer("head").bias), params["head/bias"])


# Errors: one per way a file can be wrong; each message names the file.


def test_error_truncated_file(tmp_path, rng):
    path = write_npz(tmp_path, official_params(rng))
    data = open(path, "rb").read()
    with open(path, "wb") as f:
        f.write(data[: len(data) // 2])
    with pytest.raises(ValueError, match=r"ckpt\.npz.*(truncated|corrupt)"):
        tiny_model(weights=path)


def test_error_empty_file(tmp_path):
    path = tmp_path / "empty.npz"
    path.write_bytes(b"")
    with pytest.raises(ValueError, match=r"empty\.npz.*empty"):
        tiny_model(weights=str(path))


def test_error_not_an_npz_file(tmp_path):
    path = tmp_path / "notes.npz"
    path.write_text("these are not weights\n" * 10)
    with pytest.raises(ValueError, match=r"notes\.npz.*not a valid \.npz"):
        tiny_model(weights=str(path))


def test_error_missing_file(tmp_path):
    with pytest.raises(FileNotFoundError, match=r"nowhere\.npz"):
        tiny_model(weights=str(tmp_path / "nowhere.npz"))


def test_error_wrong_architecture(tmp_path, rng):
    wider = official_params(rng, hidden_size=24, num_layers=3)
    with pytest.raises(ValueError, match=r"(?s)ckpt\.npz.*unexpected keys.*encoderblock_2.*shape mismatches.*checkpoint \(24,\) vs model \(16,\)"):
        tiny_model(weights=write_npz(tmp_path, wider))


def test_error_pickled_object_array_is_never_unpickled(tmp_path, rng):
    marker = tmp_path / "pickle-was-executed"

    class Payload:
        def __reduce__(self):
            return (open, (str(marker), "w"))

    params = official_params(rng)
    params["head/bias"] = np.array([Payload()], dtype=object)
    path = tmp_path / "evil.npz"
    np.savez(path, **params)  # np.savez pickles object arrays
    with pytest.raises(ValueError, match=r"evil\.npz.*pickled.*head/bias"):
        tiny_model(weights=str(path))
    with pytest.raises(ValueError, match=r"evil\.npz.*pickled"):
        load_weights(tiny_model(), str(path))
    assert not marker.exists()


def test_error_unknown_registry_name():
    with pytest.raises(ValueError, match=r"'no-such-weights'.*'Ti/16'.*Valid names.*augreg"):
        keras_vit.ViTTi16(weights="no-such-weights", image_size=32)


def test_timm_distilled_file_loads_into_a_distilled_model(tmp_path, rng):
    from safetensors.numpy import save_file

    from hub_dirs import random_timm_state, timm_forward

    state = random_timm_state(rng, distilled=True)
    save_file(state, tmp_path / "deit.safetensors")
    model = tiny_model(classes=5, distillation_token=True, weights=str(tmp_path / "deit.safetensors"))
    x = images(rng)
    np.testing.assert_allclose(to_numpy(model(x)), timm_forward(state, x, heads=2), rtol=0, atol=2e-5)


def test_single_channel_keras_weights_load_and_three_channel_files_are_refused(tmp_path, rng):
    gray = dict(TINY, input_shape=(32, 32, 1))
    source = keras_vit.ViT(**gray)
    path = str(tmp_path / "gray.weights.h5")
    source.save_weights(path)
    x = rng.normal(size=(2, 32, 32, 1)).astype("float32")
    loaded = keras_vit.ViT(**gray, weights=path, mlp_activation="gelu_tanh")
    np.testing.assert_array_equal(to_numpy(loaded(x)), to_numpy(source(x)))
    npz = write_npz(tmp_path, official_params(rng))
    with pytest.raises(ValueError, match=r"3-channel images.*input_shape=\(32, 32, 1\)"):
        keras_vit.ViT(**gray, weights=npz)
