"""The weights table: fields, names, errors, and exact parameter counts."""

import dataclasses
import re

import keras
import pytest

import keras_vit
from conftest import runs_once
from keras_vit.architectures import ARCHITECTURE_CONFIGS
from keras_vit.weights import registry
from keras_vit.execution.sharded_load import shapes_only
from keras_vit.weights.registry import (
    WEIGHTS,
    UnknownWeightsError,
    get_record,
    list_records,
    markdown_table,
    weights_names,
)

pytestmark = runs_once("jax", "the weights table is data; its parameter counts are the layers' shapes, the "
                              "same under every backend")

RECORDS = list(WEIGHTS.values())
IDS = [f"{r.architecture}:{r.name}" for r in RECORDS]
_COUNTS = {}


def _built_params(record):
    """`count_params()` of the real model built for `record`.

    Variables are created without values (deferred initialisation inside a
    stateless scope): the layers, shapes and count are those of the normal
    model, but no memory is spent on 630M random numbers for H/14.
    """
    config = (
        record.architecture,
        record.image_size,
        record.classes,
        record.representation_size,
        record.classifier,
    )
    if config not in _COUNTS:
        row = ARCHITECTURE_CONFIGS[record.architecture]
        model_class = (
            keras_vit.models.ViTHybrid if "resnet_layers" in row else keras_vit.ViT
        )
        with shapes_only():
            model = model_class(
                **row,
                image_size=record.image_size,
                classes=record.classes,
                representation_size=record.representation_size,
                classifier=record.classifier,
            )
            _COUNTS[config] = model.count_params()
        del model
        keras.utils.clear_session()
    return _COUNTS[config]


@runs_once("jax", "a parameter count is the layers' shapes, the same under every backend")
@pytest.mark.parametrize("record", RECORDS, ids=IDS)
def test_params_equal_built_model(record):
    assert _built_params(record) == record.params


@pytest.mark.parametrize("record", RECORDS, ids=IDS)
def test_record_fields(record):
    assert record.architecture in ARCHITECTURE_CONFIGS
    assert WEIGHTS[record.key] is record
    assert record.key == (record.architecture, record.name)
    row = ARCHITECTURE_CONFIGS[record.architecture]
    if record.representation_size is not None:
        # The pre-logits layer of the original files is D -> D.
        assert record.representation_size == row["hidden_size"]
    assert record.urls[0].startswith("https://storage.googleapis.com/vit_models/")
    assert all(u.startswith("https://") for u in record.urls)
    assert len(set(record.urls)) == len(record.urls)
    assert record.preprocessing_mode == "inception"
    assert record.gelu_approximate is True
    assert record.classifier == "token"
    assert record.sha256 is None  # none published for the GCS files
    assert record.license == "Apache-2.0"
    assert record.classes in (1000, 21843)
    assert record.description.startswith(f"ViT-{record.architecture} ")


def test_file_names_unique():
    names = [r.file_name for r in RECORDS]
    assert len(set(names)) == len(names)
    assert all(n.endswith(".npz") for n in names)


@pytest.mark.parametrize("record", RECORDS, ids=IDS)
def test_name_matches_file(record):
    # Facts in the name must agree with the official file name in the URL.
    url = record.urls[0]
    # Official spellings: "B/16" -> "ViT-B_16", "R50+B/16" -> "R50+ViT-B_16"
    # (the "+" percent-encoded in URLs); AugReg: "B_16", "R50_L_32", "R_Ti_16".
    resnet, _, vit = record.architecture.rpartition("+")
    original = (resnet + "%2B" if resnet else "") + "ViT-" + vit.replace("/", "_")
    stem = record.architecture.replace("/", "_").replace("+", "_")
    if record.name == "imagenet21k":
        assert url.endswith(f"/imagenet21k/{original}.npz")
        assert record.classes == 21843 and record.representation_size
        assert "zeroed" in record.description
    elif record.name.startswith("imagenet21k+imagenet2012"):
        suffix = "-224" if record.name.endswith("-224") else ""
        assert url.endswith(f"/imagenet21k%2Bimagenet2012/{original}{suffix}.npz")
    elif record.name == "augreg-i21k":
        assert re.search(rf"/augreg/{stem}-i21k-300ep-[^/]*-sd_0\.\d\.npz$", url)
        assert record.classes == 21843
    elif record.name.startswith("augreg-i21k+imagenet2012"):
        upstream = get_record(record.architecture, "augreg-i21k").urls[0]
        assert url.startswith(upstream[: -len(".npz")] + "--imagenet2012-")
        assert url.endswith(f"-res_{record.image_size}.npz")
    else:
        assert record.name == "sam-imagenet2012"
        assert url.endswith(f"/sam/{original}.npz")
    if record.name != "imagenet21k":
        assert record.representation_size is None
    if record.classes == 1000:
        expected = 224 if record.name.endswith(("-224", "sam-imagenet2012")) else 384
        assert record.image_size == expected
    else:
        assert record.image_size == 224


def test_expected_names():
    original = ("B/16", "B/32", "B/8", "L/16", "L/32", "H/14")
    for arch in original:
        assert "imagenet21k" in weights_names(arch)
    for arch in original[:-1]:
        assert "imagenet21k+imagenet2012" in weights_names(arch)
    assert "imagenet21k+imagenet2012" not in weights_names("H/14")
    for arch in ("Ti/16", "S/16", "S/32", "B/16", "B/32", "L/16", "B/8"):
        assert "augreg-i21k" in weights_names(arch)
    assert weights_names("B/16") == sorted(weights_names("B/16"))
    assert weights_names("no/such") == []


def test_vit_keras_mirrors():
    for arch in ("B/16", "B/32", "L/16", "L/32"):
        for name in ("imagenet21k", "imagenet21k+imagenet2012"):
            urls = get_record(arch, name).urls
            assert len(urls) == 2
            assert urls[1].startswith("https://github.com/faustomorales/vit-keras/")
            assert urls[1].endswith(f"ViT-{arch.replace('/', '_')}_{name}.npz")


def test_list_records():
    assert list_records() == RECORDS
    b16 = list_records("B/16")
    assert b16 and all(r.architecture == "B/16" for r in b16)
    assert sorted(r.name for r in b16) == weights_names("B/16")
    assert list_records("no/such") == []


def test_unknown_name_error_lists_names_and_architectures():
    with pytest.raises(KeyError) as info:
        get_record("B/16", "imagenet")
    message = str(info.value)
    for name in weights_names("B/16"):
        assert repr(name) in message
    for arch in ARCHITECTURE_CONFIGS:
        assert repr(arch) in message
    assert "'imagenet'" in message
    with pytest.raises(ValueError, match="Unknown architecture 'Q/7'"):
        get_record("Q/7", "imagenet21k")
    assert issubclass(UnknownWeightsError, (KeyError, ValueError))


def test_register_rejects_duplicates():
    record = get_record("B/16", "imagenet21k")
    with pytest.raises(ValueError, match="already registered"):
        registry.register(record)
    clash = dataclasses.replace(record, name="other")
    with pytest.raises(ValueError, match="already used"):
        registry.register(clash)
    assert ("B/16", "other") not in WEIGHTS
    with pytest.raises(ValueError, match="WeightsRecord"):
        registry.register({"name": "x"})


@pytest.mark.parametrize(
    "field, value, match",
    [
        ("urls", (), "`urls`"),
        ("urls", "https://x/y.npz", "`urls`"),
        ("preprocessing_mode", "caffe", "`preprocessing_mode`"),
        ("classifier", "mean", "`classifier`"),
        ("sha256", "abc", "`sha256`"),
        ("file_name", "a/b.npz", "`file_name`"),
    ],
)
def test_record_validation(field, value, match):
    record = get_record("B/16", "imagenet21k")
    with pytest.raises(ValueError, match=match):
        dataclasses.replace(record, **{field: value})


def test_markdown_table():
    table = markdown_table()
    lines = table.splitlines()
    assert lines[0].startswith("| Architecture |")
    assert set(lines[1]) <= set("|-: ")
    rows = lines[:1] + lines[2:]
    assert len(rows) == 1 + len(RECORDS)
    for record in RECORDS:
        assert f"({record.urls[0]})" in table
        assert f"{record.params:,}" in table
    # Grouped by architecture, in the order of ARCHITECTURE_CONFIGS.
    archs = [row.split("|")[1].strip() for row in rows[1:]]
    order = list(ARCHITECTURE_CONFIGS)
    assert archs == sorted(archs, key=order.index)


