"""The mode matrix while exporting: each export format of the backend traced
with every fast path forced on, the artifact run in its runtime against the
portable form's `predict` (docs/guides/modes.md is the table of the cells).

While a model is traced for an exporter, `kernels.export_mode()` is on and
the dispatcher tries only the exporters' workarounds, whatever is forced or
disabled: every fast path stands aside. So each path set traces what the
others trace, and each format is one cell, with every path forced (the set
most likely to leak into a trace); `test_every_path_set_traces_the_portable_form`
holds the other sets to the same. A torch model's SavedModel (and LiteRT of
a dynamic batch) is written by the tensorflow backend in a subprocess, from
the model's configuration and weights (`keras_vit.export.pipeline`), where
nothing of this process's context reaches: its trace is the tensorflow
row's cell; torch's LiteRT cell exports a fixed batch, which litert-torch
traces here.
"""

import numpy as np
import pytest

from kernel_helpers import BACKEND, taken
from keras_vit import export, kernels
from keras_vit.export import pipeline
from keras_vit.kernels import registry
from mode_matrix import BATCH, PATH_SETS, X, assert_close, make_model, paths, portable_predictions


def _batch_size(format):
    return BATCH if (BACKEND, format) == ("torch", "litert") else None


FORMATS = [f for f in export.BACKEND_FORMATS[BACKEND]
           if not pipeline._via_tensorflow(BACKEND, f, _batch_size(f))]
# What may compute while a model is exported: the exporters' workarounds, in
# the trace, and `pack_for_inference`'s marks on the kernels of the
# `for_inference` copy that `prepare_model` makes before tracing (they
# change no product: the exporters' products read the kernels as they are).
ALLOWED = {o.name for o in registry.registered(backend=BACKEND) if o.export or o.op == "pack_for_inference"}


@pytest.mark.parametrize("format", FORMATS)
def test_artifacts_traced_with_every_path_forced_run_like_the_portable_predict(format, tmp_path):
    model = make_model()
    with paths("fast"), taken() as seen:
        path = export.export_model(model, str(tmp_path / f"model{export.SUFFIXES[format]}"), format,
                                   batch_size=_batch_size(format))
    assert set(seen) <= ALLOWED, sorted(set(seen) - ALLOWED)
    assert_close(format, export.run_exported(path, format, X), portable_predictions())


@pytest.mark.parametrize("path_set", PATH_SETS)
def test_every_path_set_traces_the_portable_form(path_set):
    """Inside `export_mode()` each path set runs the exporters' workarounds
    only, and computes what the portable form computes."""
    model = make_model()
    with paths(path_set), kernels.export_mode(), taken() as seen:
        outputs = model.predict(X, batch_size=BATCH, verbose=0)
    assert set(seen) <= ALLOWED, sorted(set(seen) - ALLOWED)
    assert_close(path_set, outputs, portable_predictions())
    assert np.abs(outputs[0] - outputs[1]).max() > 1e-3  # not a constant function
