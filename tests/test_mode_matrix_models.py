"""The mode matrix on changed models: each set of fast paths (forced on)
training and predicting with an int8-quantized model (`model.quantize("int8")`)
and with LoRA adapters (`model.enable_lora`), in Keras' default mode, against
the same model's portable form in that mode, float32 (whether Keras' int8
and LoRA layers compute alike eagerly and compiled is Keras' business; the
float32 cells hold the portable form in each mode to the eager one).
docs/guides/modes.md is the table of the cells.

A quantized or LoRA-enabled projection is called as the Keras layer it is
(`kernels.runs_plain`): its product is Keras' own, and the fast paths serve
the rest (the patch embedding's product, the other projections, attention,
the sublayer calls). Keras trains a quantized model: its int8 kernels are
frozen, its float weights (norms, biases, embeddings) train.
"""

import numpy as np
import pytest

from conftest import to_numpy

from mode_matrix import (
    DEFAULT_MODE, PATH_SETS, TOLERANCES, assert_agrees, check_paths, distinct, make_model, paths,
    portable_predictions, reference, train,
)

# Keras' default mode on tensorflow is keras_vit's XLA predict function (conftest).
pytestmark = pytest.mark.xla_predict

VARIANTS = ("int8", "lora")
# The "portable" cell is the reference itself.
CELLS = [(variant, path_set) for variant in VARIANTS
         for path_set in distinct(PATH_SETS, DEFAULT_MODE, skip=("portable",))]


def test_the_variants_change_the_model():
    """Quantized, the model computes something else than the float one, by
    more than a cell's tolerance (so that its cells are not the float cells
    again); adapted, it trains the adapters (random: not the float model
    either) and the head only."""
    quantized = make_model(variant="int8")
    modes = {getattr(layer, "quantization_mode", None) for layer in quantized._flatten_layers()}
    assert modes == {None, "int8"}, modes
    changed = portable_predictions("int8") - portable_predictions()
    assert np.abs(changed).max() > 5 * TOLERANCES["float32"]
    adapted = make_model(variant="lora")
    trained = [v.path for v in adapted.trainable_variables]
    assert len(trained) == 3 * 2 + 2, trained
    assert all("lora_kernel" in p or p.startswith("head/") for p in trained), trained
    factors = [v for v in adapted.trainable_variables if "lora_kernel_b" in v.path]
    assert all(np.abs(to_numpy(v)).min() > 0 for v in factors)


@pytest.mark.parametrize("variant, path_set", CELLS)
def test_changed_models_train_and_predict_like_the_portable_reference(variant, path_set):
    """A step of `fit` and `predict` of the quantized or adapted model, in
    Keras' default mode (XLA on jax; the graph runtime, with an XLA predict
    function, on tensorflow; eager on torch)."""
    with paths(path_set):
        run = train(make_model(variant=variant), DEFAULT_MODE)
    assert_agrees(run, reference(variant, DEFAULT_MODE))
    check_paths(run.paths, path_set, DEFAULT_MODE)
