"""The README describes what exists: its tables and its offline example."""

import os
import re
import subprocess
import sys

import keras
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


@requires_shared
def test_offline_quickstart_runs(tmp_path):
    blocks = re.findall(r"```python\n(.*?)```", README, flags=re.S)
    script = next(b for b in blocks if "deit_tiny_patch16_224.npz" in b)  # the first: the quickstart
    env = dict(os.environ, KERAS_BACKEND=keras.backend.backend())
    result = subprocess.run(
        [sys.executable, "-c", script],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert result.returncode == 0, result.stderr[-3000:]
    synsets = [line.split()[0] for line in result.stdout.strip().splitlines()]
    # tabby, tiger cat, Egyptian cat, in any order.
    assert sorted(synsets) == ["n02123045", "n02123159", "n02124075"], result.stdout


@requires_shared
def test_deployment_example_runs(tmp_path):
    blocks = re.findall(r"```python\n(.*?)```", README, flags=re.S)
    (script,) = [b for b in blocks if "export.export_model" in b]
    # Run where its files may go; the weights are reached from there.
    script = script.replace("../shared/weights", str(SHARED / "weights"))
    env = dict(os.environ, KERAS_BACKEND=keras.backend.backend())
    result = subprocess.run(
        [sys.executable, "-c", script], cwd=tmp_path, env=env, capture_output=True, text=True,
        timeout=600,
    )
    assert result.returncode == 0, result.stderr[-3000:]
    assert result.stdout.strip().splitlines()[-1] == "(2, 1000) True", result.stdout
    assert (tmp_path / "deit_tiny.onnx").is_file() and (tmp_path / "deit_tiny_384").is_dir()
