"""The documentation site describes what exists.

Its guides' code runs, its tables are the package's own (the variants, the
weights registry, the current benchmark results), the names and files it
mentions exist, the generated pages are up to date, and `mkdocs build
--strict` passes, so that a broken link or a stale API reference fails.
"""

import importlib
import importlib.util
import json
import os
import re
import subprocess
import sys
import time

import keras
import numpy as np
import pytest

import keras_vit
from conftest import ROOT, SHARED, requires_shared, runs_once
from docs_blocks import (DOCS, HAND_WRITTEN, first_table, markers, python_blocks, run_blocks,
                         section, table_rows, workspace)
from harness import run_doctests
from keras_vit.models import CONSTRUCTORS
from keras_vit.execution.sharded_load import shapes_only

GUIDES = DOCS / "guides"
# The pages, tables and site are checked once, in the torch job (its eager
# calls are the quickest); the library calls a page makes are tested on
# every backend by the library's own tests.
pytestmark = runs_once("torch", "the documentation's checks; the calls its pages make are tested on every backend")


def _text(path):
    return path.read_text(encoding="utf-8")


# ------------------------------------------------------------- code blocks


def test_every_code_block_runs_or_says_why():
    """Each python block of a hand-written page runs in a test, or its marker
    says why not; a marker names a test that exists."""
    counts = {"run": 0, "skip": 0}
    for path in HAND_WRITTEN:
        blocks = python_blocks(path)
        assert len(markers(path)) == sum(1 for b in blocks if b.skip or b.run_by), path
        for block in blocks:
            counts["skip" if block.skip else "run"] += 1
            if block.run_by:
                file, name = block.run_by.split("::")
                assert re.search(rf"^def {name}\(", _text(ROOT / file), flags=re.M), block.run_by
    # Downloads and multi-host runs cannot run offline; everything else does.
    assert counts["run"] >= 2 * counts["skip"], counts


def _runnable_pages():
    return [p for p in HAND_WRITTEN if any(not (b.skip or b.run_by) for b in python_blocks(p))]


@pytest.mark.parametrize("page", _runnable_pages(), ids=lambda p: str(p.relative_to(ROOT)))
def test_page_code_runs(page, tmp_path):
    """A page's blocks, in order and in one namespace, as a reader pastes them."""
    blocks = [b for b in python_blocks(page) if not (b.skip or b.run_by)]
    if any("../shared" in b.code for b in blocks) and not SHARED.exists():
        pytest.skip(f"{page.name} reads the real weights, which are not at {SHARED}")
    folder = workspace(tmp_path)
    run_blocks(blocks, folder, str(page.relative_to(ROOT)))
    # A reader's folder stays as it was: the guides write into a temporary folder
    # (but the photo folder the fine-tuning guide's commands then train on).
    wrote = sorted(p.name for p in folder.iterdir())
    assert wrote == (["textures"] if page.name == "finetune-photos.md" else []), f"{page.name} wrote {wrote}"
    # ... and its temporary folders are the test's, not left in the system's.
    if any("mkdtemp" in b.code for b in blocks):
        assert list((tmp_path / "temporary").iterdir()), page.name


@requires_shared
# Its exports of the real weights take the least time on jax (about 0.6x torch's).
@runs_once("jax", "the documentation's checks; the calls its pages make are tested on every backend")
def test_deployment_guide_runs(tmp_path):
    """The export example, and beyond what it prints, its artifacts: ONNX
    Runtime's top-1 on two photos, the SavedModel's outputs at 384 px."""
    import skimage.data

    from conftest import imagenet_preprocess
    from keras_vit import export

    run = workspace(tmp_path)
    (block,) = [b for b in python_blocks(GUIDES / "deployment.md") if b.run_by]
    printed, namespace = run_blocks([block], run, "deployment.md")
    assert printed.strip().splitlines()[-1] == "(2, 1000) True", printed
    onnx_file, saved_model = namespace["onnx_file"], namespace["saved_model"]
    assert os.path.isfile(onnx_file) and os.path.isdir(saved_model) and not list(run.iterdir())
    photos = np.stack([imagenet_preprocess(skimage.data.chelsea()), imagenet_preprocess(skimage.data.coffee())])
    top1 = export.run_exported(str(onnx_file), "onnx", photos).argmax(-1)
    assert top1[0] in (281, 282, 285) and top1[1] == 967, top1  # a cat, espresso
    x = np.random.default_rng(1).normal(size=(2, 384, 384, 3)).astype("float32")
    diff, outputs, _ = export.verify_export(str(saved_model), "tf_saved_model", namespace["model"], x)
    assert outputs.shape == (2, 1000) and diff <= 1e-4, diff


def test_fine_tune_your_photos_guide_runs(tmp_path):
    """The guide's command, with --smoke as it says (a tiny random model, 4
    updates), on a folder laid out as it shows; then its reload snippet."""
    import shlex

    from test_finetune_folder import load_example, write_folder

    text = _text(GUIDES / "finetune-photos.md")
    part = section(text, "## Your photos")
    (command,) = [line for block in re.findall(r"```bash\n(.*?)```", part, flags=re.S)
                  for line in block.splitlines() if line.startswith("python examples/finetune.py")]
    argv = shlex.split(command)
    names = re.findall(r"^    (\w+)/IMG_0001\.jpg", part, flags=re.M)
    assert names == ["cat", "dog"], names
    colours = dict(zip(names + ["fish"], [(220, 40, 40), (40, 200, 60), (40, 60, 220)]))
    write_folder(tmp_path / argv[argv.index("--data") + 1], colours=colours, file_name="IMG_{:04d}.jpg")
    previous = os.getcwd()
    os.chdir(tmp_path)
    try:
        results = load_example().main(argv[2:] + ["--smoke", "--verbose", "0"])
    finally:
        os.chdir(previous)
    assert results["updates"] == 4 and "--validation-split" in part
    # A photo with detail, where a nearest-neighbour resize differs from the run's bilinear one.
    from PIL import Image

    photo = tmp_path / "my_photos" / "dog" / "IMG_0001.jpg"
    noise = np.random.default_rng(0).integers(0, 256, (45, 37, 3), dtype=np.uint8)
    Image.fromarray(noise).save(photo, quality=95)
    (block,) = [b for b in python_blocks(GUIDES / "finetune-photos.md") if b.run_by]
    printed, namespace = run_blocks([block], tmp_path, "finetune-photos.md")
    model = namespace["model"]
    assert model.class_names == ("cat", "dog", "fish")
    decoded = eval(printed.strip().splitlines()[-1])  # the printed list of (index, name, score)
    assert len(decoded[0]) == 2
    assert [(i, n) for i, n, _ in decoded[0]] == [(i, model.class_names[i]) for i, _, _ in decoded[0]]
    # The snippet prepares the photo as keras_vit.classify and the run do, and
    # its scores are classify's probabilities.
    _, inputs = keras_vit.load_images(str(photo), model)
    np.testing.assert_allclose(keras.ops.convert_to_numpy(namespace["x"]), inputs, atol=1e-5)
    expected = keras_vit.classify(model, str(photo), top=2)[0]
    assert [(i, n) for i, n, _ in decoded[0]] == [(p.index, p.name) for p in expected]
    assert [s for _, _, s in decoded[0]] == pytest.approx([p.probability for p in expected], abs=1e-6)
    assert sum(p.probability for p in keras_vit.classify(model, str(photo), top=3)[0]) == pytest.approx(1.0)


def test_tfds_snippet_lets_tfds_download():
    """Offline tests cannot download CIFAR-10: the snippet's calls are checked
    to pass download=True (tfds refuses an unprepared dataset without it)."""
    block = next(b for b in python_blocks(GUIDES / "training.md") if "tfds_source" in b.code)
    calls = re.findall(r"tfds_source\(([^)]*)\)", block.code)
    assert calls and all("download=True" in call for call in calls), calls


# ------------------------------------------------------------------ tables


def test_weights_table_is_the_registry():
    from keras_vit.weights import markdown_table

    expected = markdown_table().splitlines()[2:]
    listed = [line for line in _text(GUIDES / "checkpoints.md").splitlines()
              if line.startswith("| ") and "storage.googleapis.com" in line]
    assert listed == expected


def test_variant_tables_list_every_constructor():
    rows = table_rows(_text(GUIDES / "models.md"), r"`\w+`")
    listed = {cells[0].strip("`") for cells in rows if cells[0].strip("`") in CONSTRUCTORS}
    assert listed == set(CONSTRUCTORS)


@pytest.mark.parametrize("constructor", sorted(CONSTRUCTORS))
def test_variant_table_parameter_counts(constructor):
    (cells,) = [c for c in table_rows(_text(GUIDES / "models.md"), r"`\w+`") if c[0] == f"`{constructor}`"]
    build = getattr(keras_vit, constructor)
    high = 378 if build.architecture.endswith("/14") else 384  # 384 is no multiple of 14
    for size, text in ((224, cells[-2]), (high, cells[-1])):
        # Shapes only: no time spent on random initial values.
        with shapes_only():
            count = build(image_size=size).count_params()
        assert count == int(text.split()[0].replace(",", "")), (constructor, size)
        keras.utils.clear_session()


def test_checkpoint_table_columns_are_registered_names():
    """Every figure sits in a registered (architecture, weights) cell, and every
    registered ImageNet-1k checkpoint has a cell (a figure or "—")."""
    from keras_vit.weights.registry import WEIGHTS

    lines = first_table(_text(GUIDES / "checkpoints.md"), after="## Choose a checkpoint")
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


# ------------------------------------------------------- generated pages


def _tool(name, path):
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return module


def test_generated_pages_are_current():
    """The model cards and the README's summary table, as tools/docs_pages.py
    would write them now from the registry and docs/results."""
    from keras_vit_tools import docs_pages

    for name, text in docs_pages.model_cards().items():
        assert _text(docs_pages.CARDS / name) == text, f"python tools/docs_pages.py rewrites {name}"
    assert {p.name for p in docs_pages.CARDS.glob("*.md")} == set(docs_pages.model_cards())
    for name, text in docs_pages.named_preset_cards().items():
        assert _text(docs_pages.NAMED_CARDS / name) == text, f"python tools/docs_pages.py rewrites presets/{name}"
    assert {p.name for p in docs_pages.NAMED_CARDS.glob("*.md")} == set(docs_pages.named_preset_cards())
    readme = _text(ROOT / "README.md")
    assert docs_pages.readme_with_table(readme, docs_pages.summary_table()) == readme
    assert docs_pages.main(["--check"]) == 0


def test_model_cards_hold_each_record():
    """Read back from the committed cards, independently of the generator:
    one card per registered checkpoint, with its file, licence, size, classes."""
    from keras_vit.weights.registry import WEIGHTS

    cards = {}
    for path in (DOCS / "model-cards").glob("*.md"):
        if path.name != "index.md":
            for card in _text(path).split("\n## ")[1:]:
                name = card.split("`")[1]
                arch = re.search(r"^\| Architecture \| ViT-(\S+):", card, flags=re.M).group(1)
                cards[(arch, name)] = card
    assert set(cards) == set(WEIGHTS)
    for key, record in WEIGHTS.items():
        card = cards[key]
        assert f"({record.urls[0]})" in card and f"| Licence | {record.license} |" in card
        assert f"| Image size | {record.image_size} x {record.image_size} |" in card
        assert f"| Classes | {record.classes}" in card and f"| Parameters | {record.params:,} |" in card
        assert ("tanh" if record.gelu_approximate else "exact erf") in card


def test_summary_table_reads_the_current_results():
    """Each figure of the README's table is the fastest plain system of its
    library in the setup's result file, the backend named beside it."""
    from keras_vit_tools.benchmark import WORKLOADS

    readme = _text(ROOT / "README.md")
    rows = table_rows(readme, r"\[.+\]\(docs/results/[\w-]+\.md\)")
    assert len(rows) >= 5, rows
    by_label = {f"{arch} {size} px, {'inference' if kind == 'infer' else 'training step'}, batch {batch}": name
                for name, (kind, arch, size, batch) in WORKLOADS.items()}
    for cells in rows:
        setup = re.search(r"docs/results/([\w-]+)\.md", cells[0]).group(1)
        results = json.loads(_text(DOCS / "results" / f"{setup}.json"))["results"]
        label, dtype = cells[1].rsplit(", ", 1)
        workload = by_label[label]
        for library, cell in (("keras_vit", cells[2]), ("keras_hub", cells[3])):
            rates = {r["system"].split("-", 1)[1]: r["images_per_s"] for r in results
                     if r["status"] == "ok" and r["workload"] == workload and r["dtype"] == dtype
                     and re.fullmatch(rf"{library}-(jax|tensorflow|torch)", r["system"])}
            value, backend = cell.split()
            assert backend.strip("()") == max(rates, key=rates.get), (cells, rates)
            assert float(value.replace(",", "")) == pytest.approx(max(rates.values()), rel=5e-3), cells


def test_results_keep_one_current_file_per_setup():
    """No dated or numbered runs; every JSON beside the pages is linked from one."""
    results = DOCS / "results"
    names = [p.name for p in DOCS.rglob("*") if p.is_file()]
    assert not [n for n in names if re.search(r"\d{4}-\d\d-\d\d|_run\d", n)], names
    pages = "".join(_text(p) for p in DOCS.rglob("*.md"))
    for path in DOCS.rglob("*.json"):
        assert f"({path.name})" in pages or f"/{path.name})" in pages, path
    assert (results / "cpu-avx512.md").is_file() and (results / "gpu-h100.md").is_file()


def test_benchmark_name_writes_the_setup_result():
    from keras_vit_tools import benchmark

    run_doctests(benchmark.results_prefix)
    assert benchmark.results_prefix("gpu-h100") == ROOT / "docs" / "results" / "gpu-h100"
    with pytest.raises(SystemExit, match="cpu-avx512"):
        benchmark.results_prefix("../elsewhere")


def test_docs_tools_examples():
    from keras_vit_tools import docs_pages

    assert run_doctests(docs_pages) >= 3
    pytest.importorskip("griffe", reason="the docs extra is not installed (pip install -e '.[docs]')")
    extension = _tool("griffe_keras", ROOT / "tools" / "docs_site" / "griffe_keras.py")
    assert run_doctests(extension) >= 3


# ------------------------------------------------------ stale references


def _command_lines(path):
    """The console-script command lines of `path`'s shell blocks, as argument lists."""
    import shlex

    found = []
    for block in re.findall(r"```(?:bash|sh|console)\n(.*?)```", _text(path), flags=re.S):
        for line in block.replace("\\\n", " ").splitlines():
            words = shlex.split(line, comments=True)
            while words and re.match(r"[A-Z_]+=", words[0]):  # KERAS_BACKEND=... before the command
                words = words[1:]
            if words and words[0].startswith("keras-vit"):
                found.append(words)
    return found


def test_every_command_line_in_the_docs_parses():
    """Each `keras-vit`, `keras-vit-convert` and `keras-vit-benchmark` line of
    the README's and the guides' shell blocks is accepted by the command's
    own parser (nothing runs)."""
    from keras_vit_tools import benchmark, commands

    parsers = {
        "keras-vit": commands.keras_vit_parser().parse_args,
        "keras-vit-convert": commands.convert_parser().parse_args,
        "keras-vit-benchmark": benchmark.parse_args,
    }
    lines = [(path, words) for path in (*HAND_WRITTEN, ROOT / "README.md") for words in _command_lines(path)]
    assert {words[0] for _, words in lines} == set(parsers), lines
    for path, words in lines:
        try:
            parsers[words[0]](words[1:])
        except SystemExit as exit:
            pytest.fail(f"{path.relative_to(ROOT)}: {' '.join(words)} (exit {exit.code})")


def _prose(path):
    """A page without its fenced code blocks (those run, or say why not)."""
    return re.sub(r"```.*?```", "", _text(path), flags=re.S)


def _resolves(dotted):
    parts = dotted.split(".")
    for cut in range(len(parts), 0, -1):
        try:
            obj = importlib.import_module(".".join(parts[:cut]))
        except ImportError:
            continue
        for part in parts[cut:]:
            obj = getattr(obj, part)
        return True
    return False


@pytest.mark.parametrize("path", HAND_WRITTEN, ids=lambda p: str(p.relative_to(ROOT)))
def test_named_modules_functions_and_files_exist(path):
    """Every `keras_vit.x.y` the prose names resolves, and every repository
    file it names (`tests/...`, `tools/...`, `examples/...`) exists."""
    prose = _prose(path)
    for dotted in sorted(set(re.findall(r"`(keras_vit(?:\.\w+)+)", prose))):
        try:
            assert _resolves(dotted), dotted
        except AttributeError as error:
            raise AssertionError(f"{path.name} names `{dotted}`: {error}") from None
    for file in sorted(set(re.findall(r"`((?:tests|tools|examples|keras_vit|docs)/[\w./-]+\.(?:py|md|sh|json))`",
                                      prose))):
        assert (ROOT / file).exists(), f"{path.name} names {file}, which does not exist"


# ------------------------------------------------------------- the site


def test_every_page_is_in_the_site_navigation():
    """Every Markdown page under docs/ has a place in mkdocs.yml's nav, and
    every nav entry is a page (some MkDocs versions fail a strict build on a
    page left out; others only note it)."""
    nav = set(re.findall(r"(\S+\.md)\s*$", (ROOT / "mkdocs.yml").read_text(), re.M))
    pages = {p.relative_to(DOCS).as_posix() for p in DOCS.rglob("*.md")}
    assert pages - nav == set(), "pages missing from the nav"
    assert nav - pages == set(), "nav entries without a page"


def test_site_builds_strictly(tmp_path):
    """`mkdocs build --strict`: every page in the navigation, every link and
    anchor resolving, every API reference found, no docstring naming an
    argument its signature lacks."""
    pytest.importorskip("mkdocs", reason="the docs extra is not installed (pip install -e '.[docs]')")
    started = time.perf_counter()
    result = subprocess.run(
        [sys.executable, "-m", "mkdocs", "build", "--strict", "--site-dir", str(tmp_path / "site")],
        cwd=ROOT, capture_output=True, text=True, timeout=600,
    )
    log = result.stdout + result.stderr
    assert result.returncode == 0, log[-4000:]
    pages = {p.relative_to(tmp_path / "site").as_posix() for p in (tmp_path / "site").rglob("index.html")}
    assert {"index.html", "guides/finetune-photos/index.html", "reference/models/index.html",
            "model-cards/index.html"} <= pages
    models = (tmp_path / "site" / "reference" / "models" / "index.html").read_text(encoding="utf-8")
    assert "keras_vit.models.variants.ViTB16" in models and "forward_intermediates" in models
    # Every named constructor has its own entry and docstring; classes show their
    # constructor's signature.
    from keras_vit.architectures import CONSTRUCTORS

    text = re.sub(r"\s+", " ", re.sub(r"<[^>]+>", "", models))
    for name in CONSTRUCTORS:
        assert f'id="keras_vit.models.variants.{name}"' in models, name
        assert f"Builds {name}, the" in text, name
    assert "ViT(image_size=None, patch_size=16" in text
    layers = (tmp_path / "site" / "reference" / "layers" / "index.html").read_text(encoding="utf-8")
    assert "TransformerBlock(" in re.sub(r"<[^>]+>", "", layers)
    print(f"mkdocs build --strict: {time.perf_counter() - started:.1f} s")
