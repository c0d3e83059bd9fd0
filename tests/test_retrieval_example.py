"""examples/retrieval.py: its recall@k, its photos and captions, a --smoke
run and a run on a folder of one's own."""

import importlib.util

import numpy as np
import pytest

from conftest import ROOT, spread

pytestmark = spread("the example's flags and files over the image-text model, held on every backend; each "
                    "case once")

pytest.importorskip("tokenizers")
pytest.importorskip("skimage")


def _load():
    spec = importlib.util.spec_from_file_location("retrieval_example", ROOT / "examples" / "retrieval.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_every_flag_is_documented():
    for action in _load().build_parser()._actions:
        assert action.help, action.option_strings


def test_recall_at_k_counts_each_row_own_column():
    example = _load()
    scores = np.array([[0.9, 0.5, 0.1], [0.7, 0.6, 0.2], [0.3, 0.2, 0.1]])
    # Row 0: own column best; row 1: second; row 2: third.
    assert example.recall_at_k(scores, 1) == pytest.approx(1 / 3)
    assert example.recall_at_k(scores, 2) == pytest.approx(2 / 3)
    assert example.recall_at_k(scores, 3) == 1.0
    # A tie with a better-scored column counts against the row.
    assert example.recall_at_k(np.array([[0.5, 0.5], [0.0, 1.0]]), 1) == 1.0
    assert example.recall_at_k(np.array([[0.4, 0.5], [0.0, 1.0]]), 1) == 0.5


def test_photos_are_written_with_their_captions(tmp_path):
    example = _load()
    captions = example.write_photos(tmp_path)
    assert sorted(captions) == example.image_files(tmp_path) and len(set(captions.values())) == len(captions)


def test_smoke_run_reports_recall(tmp_path, capsys, monkeypatch):
    example = _load()
    scratch = tmp_path / "scratch"
    scratch.mkdir()
    monkeypatch.setattr(example.tempfile, "tempdir", str(scratch))
    results = example.main(["--smoke", "--output", str(tmp_path / "results.json")])
    assert not list(scratch.iterdir()), "the run's photos were left behind"
    assert results["images"] == len(example.PHOTOS)
    for direction in ("image_to_text", "text_to_image"):
        assert set(results[direction]) == {"recall@1", "recall@5"}
        assert results[direction]["recall@1"] <= results[direction]["recall@5"] <= 1
    assert (tmp_path / "results.json").exists()
    assert "images for 'a photo of a cat':" in capsys.readouterr().out


def test_a_folder_of_ones_own_is_ranked(tmp_path, capsys):
    from PIL import Image

    example = _load()
    for name, value in (("dark.png", 20), ("light.jpg", 230)):
        Image.fromarray(np.full((40, 60, 3), value, "uint8")).save(tmp_path / name)
    assert example.main(["--smoke", "--images", str(tmp_path), "--top", "2"]) == {}
    lines = capsys.readouterr().out.splitlines()
    assert lines[0] == "images for 'a photo of a cat':"
    assert sorted(line.split()[1] for line in lines[1:3]) == ["dark.png", "light.jpg"]
