"""The mode matrix, training and inference: each set of fast paths
(`mode_matrix.PATH_SETS`, forced on whatever this machine's hardware rules
say) under each mode of `fit`, `evaluate` and `predict` and each precision,
held to the portable reference run eagerly in float32 (tests/mode_matrix.py
says how; docs/guides/modes.md is the table of the cells).
"""

import pathlib

import pytest

from kernel_helpers import BACKEND
from mode_matrix import (
    DEFAULT_MODE, MODES, PATH_SETS, STANDS_ASIDE, assert_agrees, compiled_graphs, expected_paths,
    forced_and_disabled, initial_weights, make_model, paths, records_paths, train,
)

# The reference is the "eager" "portable" cell itself. A path set whose
# cell would run the same paths as an earlier one in that mode is not run
# again (on torch, "second" inside torch.compile: there the oneDNN
# projection stands aside and "fast" takes `F.linear` too).
CELLS = []
for _mode in MODES[BACKEND]:
    _seen = []
    for _path_set in PATH_SETS:
        _paths = expected_paths(_path_set, _mode)
        if (_mode, _path_set) != ("eager", "portable") and (_path_set == "portable" or _paths not in _seen):
            CELLS.append((_mode, _path_set))
        _seen.append(_paths)

# The precision cells: each policy with each set of fast paths that runs
# paths of its own under it (the portable form's rounding is the float32
# cells' business).
POLICIES = ("mixed_bfloat16", "bfloat16", "mixed_float16")
PRECISION_CELLS = []
for _policy in POLICIES:
    _seen = []
    for _path_set in ("fast", "second"):
        _paths = expected_paths(_path_set, DEFAULT_MODE, _policy)
        if _paths not in _seen:
            PRECISION_CELLS.append((_policy, _path_set))
        _seen.append(_paths)


@pytest.fixture(scope="module")
def weights():
    return initial_weights()


@pytest.fixture(scope="module")
def reference(weights):
    with paths("portable"):
        return train(make_model(weights), "eager")


def check_paths(taken, path_set, mode, policy="float32"):
    """The cell ran the paths of its set (none that stand aside in its mode)."""
    forced, _ = forced_and_disabled(path_set)
    expected = expected_paths(path_set, mode, policy)
    aside = set(STANDS_ASIDE.get((BACKEND, mode), ()))
    assert expected <= taken <= forced, (sorted(expected), sorted(taken))
    assert not taken & aside, sorted(taken & aside)


@pytest.mark.parametrize("mode, path_set", CELLS)
def test_fit_evaluate_predict_agree_with_the_portable_reference(reference, weights, mode, path_set):
    """`fit` (whose trained weights hold the gradients), `evaluate` and
    `predict`, eager, in Keras' default mode and compiled (`jit_compile=True`:
    XLA on jax and tensorflow, torch.compile on torch)."""
    with compiled_graphs() as graphs, paths(path_set):
        run = train(make_model(weights), mode)
    assert_agrees(run, reference)
    if records_paths(mode):
        check_paths(run.paths, path_set, mode)
    if mode == "compiled":
        assert BACKEND != "torch" or graphs[0] > 0, "torch.compile compiled nothing"


@pytest.mark.parametrize("policy, path_set", PRECISION_CELLS)
def test_precision_policies_agree_within_their_dtype(reference, weights, policy, path_set):
    """Mixed precision and bfloat16 in Keras' default mode (on tensorflow the
    graph runtime: keras_vit's XLA predict function is float32's), against
    the float32 reference within the compute dtype's tolerance."""
    with paths(path_set):
        run = train(make_model(weights, policy), DEFAULT_MODE)
    assert_agrees(run, reference, dtype=policy.removeprefix("mixed_"))
    check_paths(run.paths, path_set, DEFAULT_MODE, policy)


def test_the_docs_list_every_path_that_stands_aside():
    """docs/guides/modes.md's table of paths that stand aside names each
    (backend, mode, path) the matrix lets stand aside, with a reason."""
    table = (pathlib.Path(__file__).parents[1] / "docs" / "guides" / "modes.md").read_text()
    rows = [[c.strip() for c in line.strip("|").split("|")] for line in table.splitlines()
            if line.startswith("| ") and line.count("|") == 5]
    for (backend, mode), names in STANDS_ASIDE.items():
        for name in names:
            assert any(r[0] == backend and r[1] == f"`{name}`" and r[2].startswith(mode) and r[3]
                       for r in rows), (backend, mode, name)
