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


def _slug(heading):
    """GitHub's anchor of a heading: lower case, punctuation dropped, spaces as hyphens."""
    return re.sub(r"[^\w\- ]", "", heading.strip().lower()).replace(" ", "-")


def test_contents_list_every_section_in_order_with_working_anchors():
    start = README.index("**Contents**\n\n") + len("**Contents**\n\n")
    toc = README[start:README.index("\n\n", start)].splitlines()
    entries = [re.fullmatch(r"- \[(.+)\]\(#([^)]+)\)", line) for line in toc]
    assert all(entries), toc
    headings = re.findall(r"^## (.+)$", README, flags=re.M)
    assert [e.group(1) for e in entries] == headings
    anchors = [e.group(2) for e in entries]
    assert anchors == [_slug(h) for h in headings] and len(set(anchors)) == len(anchors)


def test_checkpoint_table_columns_are_registered_names():
    """Every figure sits in a registered (architecture, weights) cell, and every
    registered ImageNet-1k checkpoint has a cell (a figure or "—")."""
    from keras_vit.weights.registry import WEIGHTS

    section = README[README.index("### Choose a checkpoint"):README.index("### Loading rules")]
    lines = [line for line in section.splitlines() if line.startswith("| ")]
    header = [c.strip().strip("`") for c in lines[0].strip("|").split("|")]
    listed = set()
    for line in lines[2:]:  # after the header and its rule
        cells = [c.strip() for c in line.strip("|").split("|")]
        arch, constructor = cells[0], cells[1]
        assert getattr(keras_vit, constructor).architecture == arch
        for name, cell in zip(header[2:], cells[2:]):
            assert bool(cell) == ((arch, name) in WEIGHTS), (arch, name, cell)
            if cell:
                listed.add((arch, name))
                assert cell == "—" or re.fullmatch(r"\d\d\.\d\d? [ᵃᵇᶜ]", cell), cell
    assert listed == {key for key, record in WEIGHTS.items() if record.classes == 1000}


def test_tfds_snippet_lets_tfds_download():
    """Offline tests cannot download CIFAR-10: the snippet's calls are checked
    to pass download=True (tfds refuses an unprepared dataset without it)."""
    block = next(b for b in re.findall(r"```python\n(.*?)```", README, flags=re.S) if "tfds_source" in b)
    calls = re.findall(r"tfds_source\(([^)]*)\)", block)
    assert calls and all("download=True" in call for call in calls), calls


def _section(heading):
    start = README.index(f"\n## {heading}\n")
    return README[start:README.index("\n## ", start + 1)]


def test_fine_tune_your_photos_section_runs(tmp_path, monkeypatch, capsys):
    """The section's command, with --smoke as it says (a tiny random model, 4
    updates), on a folder laid out as it shows; then its reload snippet."""
    import shlex

    from test_finetune_folder import load_example, write_folder

    section = _section("Fine-tune on your own photos")
    (command,) = [line for block in re.findall(r"```bash\n(.*?)```", section, flags=re.S)
                  for line in block.splitlines() if line.startswith("python examples/finetune.py")]
    argv = shlex.split(command)
    data = argv[argv.index("--data") + 1]
    names = re.findall(r"^    (\w+)/IMG_0001\.jpg", section, flags=re.M)
    assert names == ["cat", "dog"], names
    colours = dict(zip(names + ["fish"], [(220, 40, 40), (40, 200, 60), (40, 60, 220)]))
    write_folder(tmp_path / data, colours=colours, file_name="IMG_{:04d}.jpg")
    monkeypatch.chdir(tmp_path)
    results = load_example().main(argv[2:] + ["--smoke", "--verbose", "0"])
    assert results["updates"] == 4
    printed = capsys.readouterr().out
    assert "held-out accuracy: " in printed and "--validation-split" in section
    lines, namespace = _run_block('from_preset("my_vit")', tmp_path, monkeypatch, capsys)
    model = namespace["model"]
    assert model.class_names == ("cat", "dog", "fish")
    decoded = eval(lines[-1])  # the printed list of (index, name, score)
    assert [(i, n) for i, n, _ in decoded[0]] == [(i, model.class_names[i]) for i, _, _ in decoded[0]]
    assert len(decoded[0]) == 2
