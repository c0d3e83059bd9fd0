"""Tests of the `keras-vit` command line (`keras_vit.cli`)."""

import numpy as np
import pytest
from conftest import DEIT_NPZ, requires_shared, runs_once, spread
from PIL import Image

from keras_vit.cli import commands as cli
from keras_vit_tools.commands import keras_vit as run_cli

pytestmark = spread("the command line over the library's calls, held on every backend; each case once")

CAT_CLASSES = {281, 282, 285}  # tabby, tiger cat, Egyptian cat


def test_usage_errors(tmp_path, capsys):
    with pytest.raises(SystemExit):
        run_cli(["inspect", "missing.png", "--out", str(tmp_path), "--wieghts", "w.npz"])
    assert "'--wieghts'; did you mean '--weights'?" in capsys.readouterr().err
    image = tmp_path / "x.png"
    Image.fromarray(np.zeros((32, 32, 3), "uint8")).save(image)
    assert run_cli(["inspect", str(image), "--out", str(tmp_path)]) == 2
    assert "--model is needed" in capsys.readouterr().err
    assert run_cli(["inspect", str(image), "--model", "NoSuchViT", "--weights", "w", "--out", str(tmp_path)]) == 2
    assert "Unknown model 'NoSuchViT'" in capsys.readouterr().err


@requires_shared
@runs_once("torch", "the command's files and summary; the maps it draws are held on every backend by "
           "test_inspection")
def test_inspect_chelsea_with_real_weights(tmp_path, capsys):
    import skimage.data

    photo = tmp_path / "chelsea.png"
    Image.fromarray(skimage.data.chelsea()).save(photo)
    out = tmp_path / "plots"
    status = run_cli(
        [
            # No --model: the architecture is read from the checkpoint.
            "inspect", str(photo), "--weights", str(DEIT_NPZ),
            "--gelu", "erf", "--preprocessing", "imagenet", "--class-names", "imagenet1k", "--out", str(out),
        ]
    )
    assert status == 0
    names = (
        "attention_rollout.png",
        "attention_distance.png",
        "position_embedding_similarity.png",
        "embedding_filters.png",
    )
    for name in names:
        data = (out / name).read_bytes()
        assert data[:8] == b"\x89PNG\r\n\x1a\n", name
        assert 10_000 < len(data) < 400_000, name
        width, height = Image.open(out / name).size
        assert width >= 400 and height >= 250, name
    summary = (out / "summary.txt").read_text()
    # The model as the command line named it, which keras_vit.load_model takes.
    assert summary.startswith(f"model: {DEIT_NPZ},")
    assert summary in capsys.readouterr().out
    top = summary.split("top-5 classes: ")[1].split(",")[0]
    assert int(top.split(" ")[0]) in CAT_CLASSES, summary
    assert "cat" in top, summary  # --class-names: named offline from keras_vit.labels
    assert summary.count("  layer ") == 12


def test_inspect_a_preset_uses_its_preprocessing_and_class_names(tmp_path, capsys):
    import keras_vit

    # A 6x6 grid: the summary's "4+ patches apart" needs one.
    model = keras_vit.ViT(image_size=48, patch_size=8, hidden_size=16, num_layers=2, num_heads=2,
                          mlp_dim=32, classes=3, class_names=["apple", "pear", "plum"],
                          preprocessing=dict(mean=[0.2] * 3, std=[0.5] * 3, image_size=[48, 48], resize=96))
    model.get_layer("head").bias.assign(np.array([0.0, 5.0, 0.0], "float32"))  # "pear" wins
    model.save_to_preset(tmp_path / "preset")
    photo = tmp_path / "photo.png"
    Image.fromarray(np.full((40, 60, 3), 200, "uint8")).save(photo)
    for flag in ("--preset", "--model"):  # the same resolver either way
        assert run_cli(["inspect", str(photo), flag, str(tmp_path / "preset"), "--out", str(tmp_path / "o")]) == 0
        # Three classes: the summary names as many as there are, not five.
        assert "top-3 classes: 1 pear" in capsys.readouterr().out
    again = keras_vit.from_preset(tmp_path / "preset")
    display, pixels = keras_vit.load_images(np.full((40, 60, 3), 200, "uint8"), again)
    assert again.preprocessing.crop_fraction == 0.5
    np.testing.assert_allclose(pixels, (display / 255.0 - 0.2) / 0.5, atol=1e-5)


def test_summary_on_a_small_grid_has_no_nan():
    import keras_vit
    from keras_vit import inspection

    model = keras_vit.ViT(image_size=32, patch_size=8, hidden_size=16, num_layers=1,
                          num_heads=2, mlp_dim=32, classes=10)
    images = np.zeros((1, 32, 32, 3), "float32")
    _, grid = inspection.attention_rollout(model, images, return_grid=True)
    text = cli._summary("vit", model, model.predict(images, verbose=0), inspection.mean_attention_distance(model, images),
                        grid, inspection.position_embedding_similarity(model))
    assert "nan" not in text.lower() and "4+ patches apart n/a (grid too small)" in text
