"""Image and text: a two-tower checkpoint made at random by transformers for
each family (CLIP, MetaCLIP 2, SigLIP, SigLIP 2), with a tokenizer trained
offline, loads with `keras_vit.ImageTextModel.from_preset` and reproduces
transformers: its tokenizer's ids, `logits_per_image`, the zero-shot
probabilities (one prompt and an ensemble) and the zero-shot pipeline on
real photos."""

import functools
import pathlib
import tempfile

import numpy as np
import pytest

import keras_vit
from conftest import runs_once, spread
from hub_dirs import light_keras_state as _fresh_keras_state  # noqa: F401
from image_text_dirs import (
    FAMILIES,
    image_inputs,
    image_text_dir,
    pipeline_pixels,
    pipeline_text_options,
)

pytestmark = spread("each family's towers are ViT and text layers held on every backend by their contracts; "
                    "each family's parity once")

transformers = pytest.importorskip("transformers")
torch = pytest.importorskip("torch")
pytest.importorskip("tokenizers")
pytest.importorskip("sentencepiece")

TEXTS = [
    "a photo of a cat.", "A BAD photo of the Airplane!!", "x", "  many   spaces here  ",
    "unseen wörds ✓ 123", "a photo </s> of a dog", "a " * 80,
]
CLASSES = ["cat", "dog", "coffee cup", "astronaut", "rocket"]
# keras_vit.classify resizes with its own code, transformers' processors with PIL:
# the pixels differ by a resampling's rounding, the probabilities by little.
CLASSIFY_ATOL = 1e-2
ENSEMBLE = ("a photo of a {}.", "a drawing of the {}.", "itap of a {}.")


@functools.lru_cache(maxsize=None)
def _model(family):
    return keras_vit.ImageTextModel.from_preset(image_text_dir(family)[0])


def _images(seed=0, size=32):
    return np.random.default_rng(seed).uniform(-1, 1, (3, size, size, 3)).astype("float32")


def _torch_embeddings(family, images, texts):
    """transformers' unit-length image and text embeddings and its logits_per_image."""
    _, model, tokenizer = image_text_dir(family)
    tokens = tokenizer(texts, return_tensors="pt", **pipeline_text_options(family))
    with torch.no_grad():
        out = model(**tokens, **image_inputs(images, family))
    return out.image_embeds.numpy(), out.text_embeds.numpy(), out.logits_per_image.numpy()


def _activation(family, logits):
    if "siglip" in family:
        return 1 / (1 + np.exp(-logits))
    logits = logits - logits.max(axis=-1, keepdims=True)
    return np.exp(logits) / np.exp(logits).sum(axis=-1, keepdims=True)


@pytest.mark.parametrize("family", FAMILIES)
def test_tokenizer_gives_transformers_ids(family):
    _, _, tokenizer = image_text_dir(family)
    reference = tokenizer(TEXTS, **dict(pipeline_text_options(family), truncation=True,
                                        **({} if "siglip" in family else {"max_length": 24})))
    ours = _model(family).tokenize(TEXTS)
    np.testing.assert_array_equal(ours["token_ids"], np.array(reference["input_ids"]))
    np.testing.assert_array_equal(ours["padding_mask"], np.array(reference["attention_mask"]))


@pytest.mark.parametrize("family", FAMILIES)
def test_similarity_equals_logits_per_image(family):
    images = _images()
    texts = ["a photo of a cat.", "a cartoon truck", "A bad photo of the Airplane", "itap of a car."]
    _, _, logits = _torch_embeddings(family, images, texts)
    model = _model(family)
    np.testing.assert_allclose(model.similarity(images, texts), logits, rtol=0, atol=1e-4)
    # Embeddings of unit length, and the scores are their scaled products.
    embeddings = model.encode_texts(texts)
    np.testing.assert_allclose(np.linalg.norm(embeddings, axis=-1), 1.0, atol=1e-5)


@pytest.mark.parametrize("family", FAMILIES)
@pytest.mark.parametrize("templates", [("a photo of a {}.",), ENSEMBLE], ids=["one", "ensemble"])
def test_zero_shot_probabilities_equal_transformers(family, templates):
    images = _images(seed=1)
    texts = [t.format(name) for name in CLASSES for t in templates]
    image_embeds, text_embeds, _ = _torch_embeddings(family, images, texts)
    # The CLIP paper's ensemble, computed from transformers' embeddings.
    classes = text_embeds.reshape(len(CLASSES), len(templates), -1).mean(axis=1)
    classes /= np.linalg.norm(classes, axis=-1, keepdims=True)
    model = _model(family)
    logits = model.logit_scale * image_embeds @ classes.T + model.logit_bias
    classifier = model.zero_shot_classifier(CLASSES, templates=templates)
    assert isinstance(classifier, keras_vit.ViT) and classifier.class_names == tuple(CLASSES)
    assert classifier.preprocessing == model.preprocessing
    probabilities = classifier.predict(images, verbose=0)
    np.testing.assert_allclose(probabilities, _activation(family, logits), rtol=0, atol=1e-4)


@pytest.mark.parametrize("family", FAMILIES)
def test_zero_shot_pipeline_agrees_with_predict_on_processor_pixels(family):
    """transformers' own pipeline on real photos; keras_vit's zero-shot
    classifier on the pixels the pipeline's image processor made."""
    import skimage.data
    from PIL import Image

    folder = image_text_dir(family)[0]
    pipeline = transformers.pipeline("zero-shot-image-classification", model=folder)
    photos = [Image.fromarray(skimage.data.chelsea()), Image.fromarray(skimage.data.astronaut())]
    results = pipeline(photos, candidate_labels=CLASSES, hypothesis_template="a photo of a {}.")
    classifier = _model(family).zero_shot_classifier(CLASSES)
    for photo, result in zip(photos, results):
        pixels = pipeline_pixels(pipeline.image_processor(images=[photo], return_tensors="np"), family)
        probabilities = classifier.predict(pixels, verbose=0)[0]
        expected = {row["label"]: row["score"] for row in result}
        np.testing.assert_allclose(probabilities, [expected[c] for c in CLASSES], rtol=0, atol=1e-4)
        top = keras_vit.decode_predictions(probabilities[None], top=1, model=classifier)[0][0]
        assert top[1] == result[0]["label"]
    if family == "siglip2":
        # The pipeline gives SigLIP 2 each photo at its native aspect ratio
        # (NaFlex patches); the zero-shot classifier takes square images.
        return
    # From the photos themselves: keras_vit's own resize, crop and scaling.
    ranked = keras_vit.classify(classifier, photos, top=len(CLASSES))
    for predictions, result in zip(ranked, results):
        expected = {row["label"]: row["score"] for row in result}
        got = {p.name: p.probability for p in predictions}
        np.testing.assert_allclose([got[c] for c in CLASSES], [expected[c] for c in CLASSES], rtol=0, atol=CLASSIFY_ATOL)
        assert predictions[0].name == result[0]["label"]


def test_zero_shot_classifier_saves_and_reloads(tmp_path):
    classifier = _model("siglip").zero_shot_classifier(CLASSES[:3], templates=ENSEMBLE)
    classifier.save_to_preset(tmp_path)
    again = keras_vit.from_preset(tmp_path)
    images = _images(seed=2)
    assert again.class_names == tuple(CLASSES[:3]) and again.l2_normalize
    np.testing.assert_array_equal(again.predict(images, verbose=0), classifier.predict(images, verbose=0))
    with pytest.raises(ValueError, match="embedding head"):
        classifier.save_to_preset(tmp_path / "hf", format="transformers")


@pytest.mark.parametrize("family", ["siglip", "siglip2"])
def test_image_text_model_saves_and_reloads(tmp_path, family):
    """keras_vit's image-text preset: SigLIP's SentencePiece tokenizer with
    transformers' rule, SigLIP 2's `tokenizer.json` with its lowercasing and
    left padding; the same ids, mask and scores after reloading."""
    model = _model(family)
    model.save_to_preset(tmp_path)
    again = keras_vit.ImageTextModel.from_preset(tmp_path)
    for key, value in model.tokenize(TEXTS).items():
        np.testing.assert_array_equal(again.tokenize(TEXTS)[key], value)
    images = _images(seed=3)
    np.testing.assert_allclose(again.similarity(images, TEXTS[:3]), model.similarity(images, TEXTS[:3]),
                               rtol=0, atol=1e-6)


def test_clip_zero_shot_classifier_holds_the_image_projection():
    model = _model("clip")
    classifier = model.zero_shot_classifier(CLASSES)
    tower_head = model.image_encoder.get_layer("head").kernel
    np.testing.assert_array_equal(np.asarray(classifier.get_layer("projection").kernel), np.asarray(tower_head))
    assert classifier.get_layer("predictions").activation.__name__ == "softmax"
    assert _model("siglip2").zero_shot_classifier(CLASSES).classifier == "map"


@pytest.mark.parametrize(
    "call, match",
    [
        (lambda m: m.zero_shot_classifier(CLASSES, templates=["a photo"]), "holding `{}` once"),
        (lambda m: m.zero_shot_classifier([]), "non-empty sequence of strings"),
        (lambda m: m.encode_texts([1, 2]), "non-empty sequence of strings"),
        (lambda m: m.encode_images(_images(), batch_size=0), "batch_size"),
    ],
)
def test_bad_arguments_are_refused(call, match):
    with pytest.raises(ValueError, match=match):
        call(_model("clip"))


def test_long_text_and_image_encodings_show_progress(capsys):
    """Many prompts (classes times templates) or images make several
    batches: a progress bar, unless `verbose=0`; the embeddings are the same."""
    model = _model("siglip")
    quiet = model.class_embeddings(CLASSES, templates=["a {}", "the {}"], batch_size=3, verbose=0)
    assert capsys.readouterr().out == ""
    shown = model.class_embeddings(CLASSES, templates=["a {}", "the {}"], batch_size=3)
    assert "4/4" in capsys.readouterr().out  # ten prompts, three a batch
    np.testing.assert_allclose(shown, quiet, atol=1e-6)
    model.zero_shot_classifier(CLASSES[:2], batch_size=3)
    assert capsys.readouterr().out == ""  # one batch: no bar
    pixels = np.zeros((5,) + tuple(model.image_encoder.input_shape[1:]), "float32")
    model.encode_images(pixels, batch_size=2)
    assert "3/3" in capsys.readouterr().out
    model.similarity(pixels, CLASSES, batch_size=2, verbose=0)
    assert capsys.readouterr().out == ""
    with pytest.raises(ValueError, match="verbose"):
        model.encode_texts(CLASSES, verbose="yes")


def test_a_vision_tower_alone_is_not_an_image_text_model(tmp_path):
    _, model, _ = image_text_dir("siglip")
    model.vision_model.save_pretrained(tmp_path)
    with pytest.raises(ValueError, match="two-tower"):
        keras_vit.ImageTextModel.from_preset(tmp_path)


def test_zero_shot_command_ranks_the_classes(tmp_path, capsys):
    import skimage.data
    from PIL import Image

    from keras_vit_tools import commands

    photo = tmp_path / "chelsea.png"
    Image.fromarray(skimage.data.chelsea()).save(photo)
    folder = image_text_dir("siglip")[0]
    status = commands.keras_vit(["zero-shot", folder, str(photo), "--classes", *CLASSES[:3],
                                 "--top", "2"])
    lines = capsys.readouterr().out.splitlines()
    assert status == 0 and lines[0] == str(photo) and len(lines) == 3
    classifier = _model("siglip").zero_shot_classifier(CLASSES[:3])
    # The photo prepared as keras_vit.classify prepares it (which agrees with
    # transformers' pipeline, above), then the classifier's own outputs.
    _, pixels = keras_vit.load_images(str(photo), classifier)
    probabilities = classifier.predict(pixels, verbose=0)[0]
    best = np.argsort(-probabilities)[:2]
    assert [line.split() for line in lines[1:]] == [[f"{probabilities[i]:.4f}", CLASSES[i]] for i in best]
    assert commands.keras_vit(["zero-shot", str(tmp_path / "none.png"), "--preset", folder,
                               "--classes", "cat"]) == 2
    capsys.readouterr()
    # The same classes from a file, one a line.
    names = tmp_path / "classes.txt"
    names.write_text("# three of them\n" + "\n".join(CLASSES[:3]) + "\n\n", encoding="utf-8")
    assert commands.keras_vit(["zero-shot", folder, str(photo), "--classes-file", str(names), "--top", "2"]) == 0
    assert capsys.readouterr().out.splitlines() == lines
    (tmp_path / "empty.txt").write_text("# nothing\n")
    for given, message in ((tmp_path / "empty.txt", "names no class"), (tmp_path / "gone.txt", "No class names file")):
        assert commands.keras_vit(["zero-shot", folder, str(photo), "--classes-file", str(given)]) == 2
        assert message in capsys.readouterr().err
    # Many prompts: their progress bar on the error stream, the results alone on the output.
    assert commands.keras_vit(["zero-shot", folder, str(photo), "--classes-file", str(names), "--top", "2",
                               "--templates", "imagenet"]) == 0
    shown = capsys.readouterr()
    out = shown.out.splitlines()
    assert out[0] == str(photo) and len(out) == 3 and all(line.split(None, 1)[1] in CLASSES for line in out[1:]), out
    assert "8/8" in shown.err and "\x1b" not in shown.err  # 240 prompts, 32 a batch; no terminal: a plain line
    with pytest.raises(SystemExit):
        commands.keras_vit(["zero-shot", folder, str(photo), "--classes", "cat", "--classes-file", str(names)])
    assert "not allowed with argument" in capsys.readouterr().err


GUIDE = "docs/guides/zero_shot.md"


# jax's ONNX export of these tiny towers is the quickest; each backend's
# export of the classifier and the text tower is test_image_text_export.py's.
@runs_once("jax", "a guide's calls are tested on every backend by the library's tests")
def test_zero_shot_guide_runs(tmp_path, monkeypatch):
    """The guide's blocks, in order in one namespace, as a reader pastes them;
    each python block runs here or says why not."""
    import contextlib
    import io
    import re

    from conftest import ROOT

    text = (ROOT / GUIDE).read_text(encoding="utf-8")
    blocks = re.findall(r"(?:(<!-- docs-test: [^\n]*-->)\n)?```python\n(.*?)```", text, flags=re.S)
    marker = "<!-- docs-test: run by tests/test_image_text.py::test_zero_shot_guide_runs -->"
    assert all(m == marker or m.startswith("<!-- docs-test: skip (") for m, _ in blocks)
    codes = [code for m, code in blocks if m == marker]
    assert len(codes) == 5
    run, scratch = tmp_path / "run", tmp_path / "tmp"
    run.mkdir(), scratch.mkdir()
    monkeypatch.chdir(run)
    monkeypatch.setattr(tempfile, "tempdir", str(scratch))  # the page's mkdtemp, inside the test's folder
    namespace = {"__name__": "__docs__"}
    with contextlib.redirect_stdout(io.StringIO()) as printed:
        for code in codes:
            exec(compile(code, GUIDE, "exec"), namespace)
    # Printed to no terminal, the encoding of the 320 prompts of the
    # 80-template classifier is one plain line (`keras_vit.tasks.progress`),
    # with no bar, carriage return or escape code.
    text = printed.getvalue()
    assert not any(c in text for c in ("\r", "\x1b", "━")), repr(text)
    lines = text.splitlines()
    assert lines[1].startswith("10/10 "), lines
    lines = [line for line in lines if line != lines[1]]
    assert lines[0] == "(2, 2) True" and lines[-2:] == ["True", "True"], lines
    assert lines[3].startswith("int8 onnx: top-1 agrees with float32 on "), lines
    assert not list(run.iterdir())  # the reader's folder is left as it was
    classifier, folder = namespace["classifier"], pathlib.Path(namespace["folder"])
    again = keras_vit.from_preset(folder / "cat-dog-rocket-cup")
    np.testing.assert_array_equal(again.predict(namespace["pixels"], verbose=0),
                                  classifier.predict(namespace["pixels"], verbose=0))
    assert (folder / "zero_shot.onnx").exists() and (folder / "text.onnx").exists()
