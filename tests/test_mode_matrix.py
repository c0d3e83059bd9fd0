"""The mode matrix, training and inference: each set of fast paths
(`mode_matrix.PATH_SETS`, forced on whatever this machine's hardware rules
say) under each mode of `fit` and `predict` and each precision, held to the
portable reference run eagerly in float32 (tests/mode_matrix.py says how;
docs/guides/modes.md is the table of the cells; the other modes are in
tests/test_mode_matrix_*.py).
"""

import pathlib

import pytest

from conftest import runs_once
from kernel_helpers import BACKEND
from mode_matrix import (
    DEFAULT_MODE, MODES, PATH_SETS, REFUSALS, STANDS_ASIDE, alternatives, assert_agrees, check_paths,
    compiled_graphs, distinct, expected_paths, make_model, paths, records_paths, reference, train,
)

# Keras' default mode on tensorflow is keras_vit's XLA predict function (conftest).
pytestmark = pytest.mark.xla_predict

# The reference is the "eager" "portable" cell itself. A path set whose
# cell would run the same paths as an earlier one in that mode is not run
# again (on torch, "second" inside torch.compile: there the oneDNN
# projection stands aside and "fast" takes `F.linear` too).
CELLS = [(mode, path_set) for mode in MODES[BACKEND]
         for path_set in distinct(PATH_SETS, mode, skip=("portable",) if mode == "eager" else ())]

# The precision cells: each policy with each set of fast paths that runs
# paths of its own under it (the portable form's rounding is the float32
# cells' business). A policy whose cell would give the same paths operands
# of the same dtypes as an earlier policy's is not run again: "bfloat16"
# differs from "mixed_bfloat16" in its variables, which only torch's
# sublayer-call paths read (the others take kernels cast to the compute
# dtype).
POLICIES = ("mixed_bfloat16", "bfloat16", "mixed_float16")


def _precision_cells():
    cells, seen = [], set()
    reads_variables = set(alternatives().get("call_sublayer", ()))
    for policy in POLICIES:
        compute = policy.removeprefix("mixed_")
        variables = "float32" if policy.startswith("mixed_") else policy
        for path_set in distinct(("fast", "second"), DEFAULT_MODE, policy):
            found = frozenset(expected_paths(path_set, DEFAULT_MODE, policy))
            key = (compute, found, variables if found & reads_variables else None)
            if key not in seen:
                cells.append((policy, path_set))
                seen.add(key)
    return cells


PRECISION_CELLS = _precision_cells()


@pytest.mark.parametrize("mode, path_set", CELLS)
def test_fit_and_predict_agree_with_the_portable_reference(mode, path_set):
    """A step of `fit` (whose trained weights hold the gradients) and
    `predict`, eager, in Keras' default mode and compiled (`jit_compile=True`:
    XLA on jax and tensorflow, torch.compile on torch); on tensorflow's
    default mode `evaluate` too (the graph runtime's inference, where
    `predict` is XLA's)."""
    with compiled_graphs() as graphs, paths(path_set):
        run = train(make_model(), mode)
    assert_agrees(run, reference())
    if records_paths(mode):
        check_paths(run.paths, path_set, mode)
    if mode == "compiled" and BACKEND == "torch":
        # `predict` is one graph: no path breaks it (a graph break at each
        # projection once ran the rest of the call eagerly, past dynamo's
        # recompilation limit). `fit` has Keras' own breaks (the backward,
        # the optimizer's step).
        assert graphs[0] > run.predict_graphs == 1, (graphs[0], run.predict_graphs)


@pytest.mark.parametrize("policy, path_set", PRECISION_CELLS)
def test_precision_policies_agree_within_their_dtype(policy, path_set):
    """Mixed precision and bfloat16 in Keras' default mode (on tensorflow the
    graph runtime: keras_vit's XLA predict function is float32's), against
    the float32 reference within the compute dtype's tolerance."""
    with paths(path_set):
        run = train(make_model(policy=policy), DEFAULT_MODE)
    assert_agrees(run, reference(), dtype=policy.removeprefix("mixed_"))
    check_paths(run.paths, path_set, DEFAULT_MODE, policy)


def _table_rows(columns):
    """The rows of docs/guides/modes.md's tables of `columns` columns, as lists of cells."""
    text = (pathlib.Path(__file__).parents[1] / "docs" / "guides" / "modes.md").read_text()
    return [[c.strip() for c in line.strip().strip("|").split("|")] for line in text.splitlines()
            if line.startswith("| ") and line.count("|") == columns + 1]


def _names(cell):
    return [name.strip().strip("`") for name in cell.split(",")]


@runs_once("torch", "the tables name every backend's paths and refusals")
def test_the_docs_list_every_path_that_stands_aside_and_every_refusal():
    """docs/guides/modes.md's table of paths that stand aside names each
    (backend, mode, path) the matrix lets stand aside, with a reason, and its
    table of refusals each (backend, mode) the library refuses."""
    rows = _table_rows(4)
    for (backend, mode), names in STANDS_ASIDE.items():
        for name in names:
            assert any(backend in _names(r[0]) and name in _names(r[1]) and r[2].startswith(mode) and r[3]
                       for r in rows), (backend, mode, name)
    for (backend, mode), message in REFUSALS.items():
        assert any(backend in _names(r[0]) and r[1] == mode and message in r[2] and r[3]
                   for r in rows), (backend, mode, message)
