"""Checkpoint readers: every layout becomes the official flat dict."""

import pathlib

import numpy as np
import pytest

from conftest import DEIT_NPZ, DEIT_SAFETENSORS, TINY, requires_shared, runs_once
from keras_vit.weights import describe_weights, readers
from keras_vit.weights.formats import timm as timm_format
from keras_vit.weights.mapping import checkpoint_key, model_state
from synthetic import POSEMB, official_params, tiny_model, to_big_vision, to_timm

pytestmark = runs_once("torch", "the readers turn files into NumPy arrays")

ARCH = {k: v for k, v in TINY.items() if k != "image_size"}


@pytest.fixture
def params(rng):
    return official_params(rng, representation_size=12)


def assert_same_dict(actual, expected):
    assert sorted(actual) == sorted(expected)
    for key in expected:
        np.testing.assert_array_equal(actual[key], expected[key], err_msg=key)


def test_official_npz_reads_unchanged(tmp_path, params):
    file = tmp_path / "official.npz"
    np.savez(file, **params)
    checkpoint = readers.read_checkpoint(file)
    assert checkpoint.format == "npz" and checkpoint.ignored == {}
    assert_same_dict(checkpoint.params, params)


@pytest.mark.parametrize("prefix", ["", "params/", "opt/target/"])
def test_big_vision_layout_is_detected(tmp_path, params, prefix):
    raw = to_big_vision(params, prefix)
    if prefix == "opt/target/":
        raw["opt/state/step"] = np.zeros((), "int32")
    file = tmp_path / "bv.npz"
    np.savez_compressed(file, **raw)
    checkpoint = readers.read_checkpoint(file)
    # The class token's position row moved into `cls`: the sum is unchanged.
    expected = dict(params)
    expected["cls"] = params["cls"] + params[POSEMB][:, :1]
    expected[POSEMB] = np.concatenate([np.zeros_like(params["cls"]), params[POSEMB][:, 1:]], 1)
    assert_same_dict(checkpoint.params, expected)
    assert list(checkpoint.ignored) == (["opt/state/step"] if prefix == "opt/target/" else [])


def test_scanned_blocks_are_split(tmp_path, params):
    bv = to_big_vision(params, "")
    scanned = {k: v for k, v in bv.items() if "encoderblock_" not in k}
    for key in [k for k in bv if k.startswith("Transformer/encoderblock_0/")]:
        rest = key[len("Transformer/encoderblock_0/") :]
        scanned["Transformer/encoderblock/" + rest] = np.stack(
            [bv[f"Transformer/encoderblock_{i}/{rest}"] for i in range(TINY["num_layers"])]
        )
    np.savez(tmp_path / "scan.npz", **scanned)
    unscanned = readers.read_checkpoint(tmp_path / "scan.npz").params
    np.savez(tmp_path / "plain.npz", **bv)
    assert_same_dict(unscanned, readers.read_checkpoint(tmp_path / "plain.npz").params)


def test_groupnorm_params_are_squeezed(tmp_path, rng):
    raw = {
        "gn_root/scale": rng.normal(size=(1, 1, 1, 64)),
        "block1/unit1/gn_proj/bias": rng.normal(size=(1, 1, 1, 256)),
        "conv_root/kernel": rng.normal(size=(7, 7, 3, 64)),
    }
    np.savez(tmp_path / "hybrid.npz", **raw)
    params = readers.read_checkpoint(tmp_path / "hybrid.npz").params
    assert params["gn_root/scale"].shape == (64,)
    np.testing.assert_array_equal(params["block1/unit1/gn_proj/bias"], raw["block1/unit1/gn_proj/bias"].ravel())
    assert params["conv_root/kernel"].shape == (7, 7, 3, 64)


def test_timm_safetensors_matches_official(tmp_path, params):
    from safetensors.numpy import save_file

    save_file(to_timm(params, TINY["num_heads"]), tmp_path / "timm.safetensors")
    model = tiny_model(representation_size=12)
    assert_same_dict(readers.read_checkpoint(tmp_path / "timm.safetensors", model).params, params)


def test_timm_pth_matches_official(tmp_path, params):
    torch = pytest.importorskip("torch")
    state = {k: torch.from_numpy(v) for k, v in to_timm(params, TINY["num_heads"]).items()}
    torch.save({"state_dict": state}, tmp_path / "timm.pth")
    model = tiny_model(representation_size=12)
    assert_same_dict(readers.read_checkpoint(tmp_path / "timm.pth", model).params, params)


def test_pth_with_code_is_refused(tmp_path):
    pytest.importorskip("torch")
    import pickle

    marker = tmp_path / "executed"

    class Payload:
        def __reduce__(self):
            return (open, (str(marker), "w"))

    with open(tmp_path / "evil.pth", "wb") as f:
        pickle.dump({"head.weight": Payload()}, f, protocol=2)
    with pytest.raises(ValueError, match="evil.pth"):
        readers.read_checkpoint(tmp_path / "evil.pth", tiny_model())
    assert not marker.exists()


def test_keras_h5_reads_by_layer_names(tmp_path):
    model = tiny_model(representation_size=12)
    model.save_weights(tmp_path / "tiny.weights.h5")
    expected = model_state(model)
    # A template without pre-logits still names them (Dense layer class).
    template = tiny_model(classes=3)
    assert_same_dict(readers.read_checkpoint(tmp_path / "tiny.weights.h5", template).params, expected)
    # A distilled model's file (two heads, which exclude a pre-logits layer).
    distilled = tiny_model(classes=4, distillation_token=True)
    distilled.save_weights(tmp_path / "deit.weights.h5")
    assert_same_dict(readers.read_checkpoint(tmp_path / "deit.weights.h5", distilled).params,
                     model_state(distilled))


def test_checkpoint_key_table():
    assert checkpoint_key("embedding/cls") == "cls"
    assert checkpoint_key("encoder_norm/gamma") == "Transformer/encoder_norm/scale"
    assert (
        checkpoint_key("encoderblock_11/LayerNorm_2/beta")
        == "Transformer/encoderblock_11/LayerNorm_2/bias"
    )
    assert checkpoint_key("block2/unit3/gn2/gamma") == "block2/unit3/gn2/scale"
    assert checkpoint_key("head/kernel") == "head/kernel"


def test_describe_npz_reads_only_headers(tmp_path, rng):
    params = official_params(rng, image_size=(32, 32), classes=7, representation_size=12)
    np.savez(tmp_path / "a.npz", **params)
    info = describe_weights(str(tmp_path / "a.npz"), ARCH)
    # An .npz does not record its GELU (the loaders ask for mlp_activation).
    assert (info.image_size, info.classes, info.gelu_approximate) == (32, 7, None)
    assert info.representation_size == 12
    np.savez(tmp_path / "bv.npz", **to_big_vision(params))
    assert describe_weights(tmp_path / "bv.npz", ARCH).image_size == 32


def test_describe_timm_and_keras(tmp_path, params):
    from safetensors.numpy import save_file

    save_file(to_timm(params, TINY["num_heads"]), tmp_path / "t.safetensors")
    info = describe_weights(tmp_path / "t.safetensors", ARCH)
    assert (info.image_size, info.classes, info.gelu_approximate) == (32, 10, False)
    tiny_model().save_weights(tmp_path / "k.weights.h5")
    info = describe_weights(tmp_path / "k.weights.h5", ARCH)
    # A weights file knows its head's width, not its resolution or GELU.
    assert (info.image_size, info.classes, info.gelu_approximate) == (None, 10, None)
    # The head, not the pre-logits layer before it; DeiT's two heads.
    tiny_model(classes=5, representation_size=12).save_weights(tmp_path / "p.weights.h5")
    assert describe_weights(tmp_path / "p.weights.h5", ARCH).classes == 5
    tiny_model(classes=4, distillation_token=True).save_weights(tmp_path / "d.weights.h5")
    assert describe_weights(tmp_path / "d.weights.h5", ARCH).classes == 4


def test_describe_non_square_grid_gives_no_size(tmp_path, rng):
    np.savez(tmp_path / "wide.npz", **official_params(rng, image_size=(32, 48)))
    assert describe_weights(tmp_path / "wide.npz", ARCH).image_size is None


def test_describe_unknown_name_lists_valid_names():
    with pytest.raises(ValueError, match=r"Unknown weights name 'no-such-weights'.*Valid names"):
        describe_weights("no-such-weights", dict(patch_size=16, hidden_size=192, num_layers=12, num_heads=3, mlp_dim=768))


@requires_shared
def test_real_npz_and_safetensors_hold_the_same_tensors():
    npz = readers.read_checkpoint(DEIT_NPZ).params
    timm = timm_format.read_file(DEIT_SAFETENSORS, num_heads=3).params
    assert_same_dict(timm, npz)
    info = describe_weights(pathlib.Path(DEIT_NPZ), dict(patch_size=16))
    assert (info.image_size, info.classes) == (224, 1000)
