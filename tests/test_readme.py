"""The README describes what exists: its tables and its offline example."""

import re

import keras
import numpy as np
import pytest

import keras_vit
from conftest import ROOT, SHARED, requires_shared
from keras_vit.models import CONSTRUCTORS
from keras_vit.weights import markdown_table

README = (ROOT / "README.md").read_text(encoding="utf-8")


def _table_rows(first_cell_pattern):
    rows = []
    for line in README.splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if line.startswith("|") and re.fullmatch(first_cell_pattern, cells[0]):
            rows.append(cells)
    return rows


def _count(text):
    return int(text.split()[0].replace(",", ""))


def test_weights_table_is_the_registry():
    expected = markdown_table().splitlines()[2:]
    listed = [line for line in README.splitlines() if line.startswith("| ") and "storage.googleapis.com" in line]
    assert listed == expected


def test_variant_tables_list_every_constructor():
    rows = _table_rows(r"`\w+`")
    listed = {cells[0].strip("`") for cells in rows if cells[0].strip("`") in CONSTRUCTORS}
    assert listed == set(CONSTRUCTORS)


@pytest.mark.parametrize("constructor", sorted(CONSTRUCTORS))
def test_variant_table_parameter_counts(constructor):
    (cells,) = [c for c in _table_rows(r"`\w+`") if c[0] == f"`{constructor}`"]
    build = getattr(keras_vit, constructor)
    high = 378 if constructor == "ViTH14" else 384
    for size, text in ((224, cells[-2]), (high, cells[-1])):
        # Shapes only: no time spent on random initial values.
        with keras.StatelessScope(initialize_variables=False):
            count = build(image_size=size).count_params()
        assert count == _count(text), (constructor, size)
        keras.utils.clear_session()


def _run_block(marker, cwd, monkeypatch, capsys):
    """Runs the README's first Python block containing `marker` in `cwd`, as
    a user would paste it; returns its printed lines and its variables."""
    blocks = re.findall(r"```python\n(.*?)```", README, flags=re.S)
    script = next(b for b in blocks if marker in b)
    monkeypatch.chdir(cwd)
    # In this process (the libraries are imported already); conftest resets
    # Keras' global state around each test.
    namespace = {"__name__": "__readme__"}
    exec(compile(script, f"README.md ({marker})", "exec"), namespace)
    return capsys.readouterr().out.strip().splitlines(), namespace


@requires_shared
def test_offline_quickstart_runs(monkeypatch, capsys):
    lines, _ = _run_block("deit_tiny_patch16_224.npz", ROOT, monkeypatch, capsys)
    synsets = [line.split()[0] for line in lines]
    # tabby, tiger cat, Egyptian cat, in any order.
    assert sorted(synsets) == ["n02123045", "n02123159", "n02124075"], lines


@requires_shared
def test_deployment_example_runs(tmp_path, monkeypatch, capsys):
    """The example exports the real weights to ONNX (224 px) and to a
    SavedModel at 384 px; beyond what it prints, both artifacts are checked
    against the model: ONNX Runtime's top-1 on two photos, the SavedModel's
    outputs at 384 px."""
    import skimage.data

    from conftest import imagenet_preprocess
    from keras_vit import export

    # Run where its files may go; the weights are reached from there.
    (tmp_path / "run").mkdir()
    (tmp_path / "shared").symlink_to(SHARED)
    lines, namespace = _run_block("export.export_model", tmp_path / "run", monkeypatch, capsys)
    assert lines[-1] == "(2, 1000) True", lines
    onnx_file, saved_model = tmp_path / "run" / "deit_tiny.onnx", tmp_path / "run" / "deit_tiny_384"
    assert onnx_file.is_file() and saved_model.is_dir()
    photos = np.stack([imagenet_preprocess(skimage.data.chelsea()), imagenet_preprocess(skimage.data.coffee())])
    top1 = export.run_exported(str(onnx_file), "onnx", photos).argmax(-1)
    assert top1[0] in (281, 282, 285) and top1[1] == 967, top1  # a cat, espresso
    x = np.random.default_rng(1).normal(size=(2, 384, 384, 3)).astype("float32")
    diff, outputs, _ = export.verify_export(str(saved_model), "tf_saved_model", namespace["model"], x)
    assert outputs.shape == (2, 1000) and diff <= 1e-4, diff
