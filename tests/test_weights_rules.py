"""The rule engine every checkpoint format is a table on, and the tables themselves."""

import ast

import numpy as np
import pytest

from conftest import ROOT, runs_once
from hub_dirs import random_timm_state
from keras_vit.layers.config import RECORDS, training_fields
from keras_vit.weights import canonical as C
from keras_vit.weights.formats import official, timm
from keras_vit.families.vit import KerasHubViT
from keras_vit.families import transformers_source as hf
from keras_vit.families.vit import TransformersViT
from keras_vit.weights.mapping import TABLE as KERAS_VIT_TABLE
from keras_vit.weights.rules import RuleTable

pytestmark = runs_once("torch", "the rules are tables over names and NumPy arrays")


def _assert_same(a, b):
    assert sorted(a) == sorted(b)
    for key in a:
        np.testing.assert_array_equal(a[key], b[key], err_msg=key)


def test_fields_offsets_and_source_keys():
    table = RuleTable(
        [("stage.{i}.{name}.w", C.BLOCK + "{name}/kernel", "linear"), ("{path}", "{path}")],
        index_offset=1,
    )
    params, unknown = table.to_canonical({"stage.1.fc.w": np.ones((3, 2)), "other/x": np.zeros(1)})
    assert unknown == []
    assert params[C.block(C.BLOCK, 0) + "fc/kernel"].shape == (2, 3)
    assert params["other/x"].shape == (1,)
    assert table.source_key(C.block(C.BLOCK, 4) + "fc/kernel") == "stage.5.fc.w"
    assert table.canonical_key("stage.5.fc.w") == C.block(C.BLOCK, 4) + "fc/kernel"
    assert sorted(table.from_canonical(params)) == ["other/x", "stage.1.fc.w"]


@pytest.mark.parametrize(
    "rule, match",
    [
        (("a.{i}", "b", None), "same fields"),
        (("a.{i}", C.ATTENTION + "{part}/kernel", None), "same fields"),
        (("a.{i}", C.BLOCK + "q", "qkv_kernel"), "same fields"),
        (("a", "b", "transpose"), "transform"),
    ],
)
def test_bad_rules_are_refused(rule, match):
    with pytest.raises(ValueError, match=match):
        RuleTable([rule])


def test_fused_tensor_needs_every_part_to_be_written():
    table = RuleTable([("blocks.{i}.qkv", C.ATTENTION + "{part}/bias", "qkv_bias")])
    params, _ = table.to_canonical({"blocks.0.qkv": np.arange(12.0)}, num_heads=2)
    np.testing.assert_array_equal(params[C.block(C.ATTENTION, 0) + "key/bias"], [[4, 5], [6, 7]])
    np.testing.assert_array_equal(table.from_canonical(params)["blocks.0.qkv"], np.arange(12.0))
    params.pop(C.block(C.ATTENTION, 0) + "value/bias")
    with pytest.raises(ValueError, match="no place.*query/bias"):
        table.from_canonical(params)


def test_heads_that_do_not_divide_are_refused():
    with pytest.raises(ValueError, match="does not split into 5 attention heads"):
        timm.TABLE.to_canonical({"blocks.0.attn.qkv.weight": np.zeros((24, 8))}, num_heads=5)


@pytest.mark.parametrize(
    "options",
    [dict(), dict(distilled=True), dict(reg_tokens=2, layer_scale=True, fc_norm=True)],
    ids=["plain", "distilled", "registers"],
)
def test_timm_table_reads_and_writes_back_exactly(rng, options):
    state = random_timm_state(rng, **options)
    params, unknown = timm.TABLE.to_canonical(state, num_heads=2)
    assert unknown == []
    query = params[C.block(C.ATTENTION, 1) + "query/kernel"]
    # The first third of timm's fused rows are the query's, head-major.
    np.testing.assert_array_equal(
        query.reshape(16, 16), state["blocks.1.attn.qkv.weight"][:16].T
    )
    _assert_same(timm.TABLE.from_canonical(params), state)


def test_keras_hub_table_counts_blocks_from_one(rng):
    state = {
        "vit_encoder/transformer_block_1/mha/attention_output/kernel": rng.normal(size=(2, 4, 8)),
        "vit_encoder/transformer_block_1/mha/key/bias": rng.normal(size=(2, 4)),
        "vit_patching_and_embedding/position_embedding/embeddings": rng.normal(size=(5, 8)),
    }
    params, unknown = KerasHubViT.TABLE.to_canonical(state, 2)
    assert unknown == []
    assert sorted(params) == sorted(
        [C.block(C.ATTENTION, 0) + "out/kernel", C.block(C.ATTENTION, 0) + "key/bias", C.POSEMB]
    )
    assert params[C.POSEMB].shape == (1, 5, 8)
    _assert_same(KerasHubViT.TABLE.from_canonical(params), state)


def test_official_table_renames_linen_and_flattens_groupnorm(rng):
    linen = {
        "Transformer/encoderblock_3/LayerNorm_1/scale": rng.normal(size=4),
        "Transformer/encoderblock_3/MultiHeadDotProductAttention_0/query/kernel": rng.normal(size=(4, 2, 2)),
        "Transformer/encoderblock_3/MlpBlock_0/Dense_1/bias": rng.normal(size=4),
        "block2/unit1/gn1/scale": rng.normal(size=(1, 1, 1, 4)),
        "gn_root/bias": rng.normal(size=4),
        "embedding/kernel": rng.normal(size=(2, 2, 3, 4)),
    }
    params, _ = official.to_canonical(linen)
    assert sorted(params) == sorted([
        C.block(C.NORM_2, 3) + "scale", C.block(C.ATTENTION, 3) + "query/kernel",
        C.block(C.MLP_OUT, 3) + "bias", "block2/unit1/gn1/scale", "gn_root/bias", "embedding/kernel",
    ])
    assert params["block2/unit1/gn1/scale"].shape == (4,)
    # The pre-Linen names of the official files are the canonical ones.
    again, _ = official.to_canonical(params)
    _assert_same(again, params)


def test_transformers_and_keras_vit_tables_name_the_same_canonical_keys():
    body = TransformersViT().rule_table("ViTForImageClassification")
    assert body.source_key(C.POSEMB) == "vit.embeddings.position_embeddings"
    assert body.source_key(C.block(C.MLP_IN, 2) + "kernel") == "vit.encoder.layer.2.intermediate.dense.weight"
    assert KERAS_VIT_TABLE.source_key(C.POSEMB) == "embedding/pos_embedding"
    assert KERAS_VIT_TABLE.canonical_key("encoderblock_2/LayerNorm_2/gamma") == C.block(C.NORM_2, 2) + "scale"


def _code_strings(path):
    """String constants of a module's code, docstrings left out."""
    tree = ast.parse(path.read_text())
    docstrings = {
        id(node.body[0].value)
        for node in ast.walk(tree)
        if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef))
        and node.body and isinstance(node.body[0], ast.Expr)
    }
    return [
        node.value for node in ast.walk(tree)
        if isinstance(node, ast.Constant) and isinstance(node.value, str) and id(node) not in docstrings
    ]


def test_position_embedding_key_is_spelled_once():
    """Code names the canonical position-embedding key through `weights.canonical`."""
    spelled = {
        path.relative_to(ROOT).as_posix()
        for folder in ("keras_vit", "tools")
        for path in sorted((ROOT / folder).rglob("*.py"))
        if any("posembed_input" in text for text in _code_strings(path))
    }
    assert spelled == {"keras_vit/weights/canonical.py"}


@pytest.mark.parametrize(
    "name",
    sorted(
        {n for record in RECORDS.values() for n in record.field_names()}
        - set(TransformersViT.EXPORTED_OPTIONS) - set(training_fields())
    ),
)
def test_transformers_export_refuses_every_option_it_does_not_write(name):
    """Any block or encoder option outside `EXPORTED_OPTIONS`, present or added later,
    is refused when it leaves its default: nothing is written without it."""
    assert hf.export_class({}) == "ViTForImageClassification"
    with pytest.raises(ValueError, match=f"{name}="):
        hf.export_class({name: object()})


@pytest.mark.parametrize("name", training_fields())
def test_transformers_export_takes_any_training_option(name):
    """Dropout, remat and patch dropout change training only: the weights are a
    transformers model's whatever their value."""
    value = {"remat": True}.get(name, 0.25)
    assert hf.export_class({name: value}) == "ViTForImageClassification"


def test_timm_arguments_read_are_timm_arguments():
    from keras_vit.weights.formats.timm_architectures import CLASS_DEFAULTS

    assert timm.READ <= set(CLASS_DEFAULTS["VisionTransformer"])
    args, _ = timm.model_arguments({"architecture": "vit_tiny_patch16_224", "pretrained_cfg": {},
                                    "model_args": {"proj_bias": True, "qk_norm": False}})
    assert args["hidden_size"] == 192  # arguments at timm's defaults are accepted
    # Read: timm's `proj_bias` is the attention output's and the MLP's biases.
    args, _ = timm.model_arguments({"architecture": "vit_tiny_patch16_224", "pretrained_cfg": {},
                                    "model_args": {"proj_bias": False}})
    assert args["attention_out_bias"] is False and args["mlp_bias"] is False
    with pytest.raises(ValueError, match="qk_norm=True"):
        timm.model_arguments({"architecture": "vit_tiny_patch16_224", "pretrained_cfg": {},
                              "model_args": {"qk_norm": True}})
