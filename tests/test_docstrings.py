"""Runs the Example sections of the public docstrings, module by module.

Every module listed must have examples, and every example must run and
pass (`harness.run_doctests`). Examples needing network access are marked
`# doctest: +SKIP` in the docstrings themselves.
"""

import importlib
import pkgutil
import tempfile

import pytest

import keras_vit
from conftest import runs_once
from harness import run_doctests

# The examples show how a function is called and what it gives; each
# function is tested on every backend by its own tests, so the examples run
# in one job (torch's: its eager calls are the quickest).
examples_run_once = runs_once("torch", "docstring examples; the functions they show are tested on every backend")

# Modules without docstring examples, and why.
WITHOUT_EXAMPLES = {
    "keras_vit.version": "a version string",
    "keras_vit.models": "re-exports",
    "keras_vit.weights": "re-exports",
    "keras_vit.weights.formats": "a package: its modules have the examples",
    "keras_vit.layers": "re-exports",
    "keras_vit.training": "re-exports",
    "keras_vit.execution": "a package: its modules have the examples",
    "keras_vit.families": "a package: its modules have the examples",
    "keras_vit.weights.formats.timm_architectures": "data generated from timm by tools/timm_table.py",
    "keras_vit.presets.catalogue_data": "data generated from timm, transformers and keras-hub by "
    "tools/preset_catalogue.py",
    "keras_vit.execution.jax_state": "trainer internals, tested by fault injection in test_failures.py",
    "keras_vit.training.datasets": "needs datasets; tested in test_training_data.py",
    "keras_vit.export": "re-exports",
    "keras_vit.export.torch_route": "torch-backend exporters writing files; run by test_export.py on torch",
    "keras_vit.presets": "re-exports",
    "keras_vit.inspection": "re-exports",
    "keras_vit.preprocessing": "re-exports",
    "keras_vit.tasks": "a package: its modules have the examples",
    "keras_vit.cli": "a package: its modules have the examples",
    "keras_vit.families": "a package: its modules have the examples",
    "keras_vit.families.task_source": "reads task checkpoint directories; tested in test_dense_presets.py",
    "keras_vit.tasks.dense_data": "reads folders of image and mask files; tested in test_dense_training.py",
    "keras_vit.cli.dense": "the work of keras-vit depth and segment; tested in test_dense_presets.py",
    "keras_vit.cli.tasks": "the work of keras-vit detect and masks; tested in test_detection.py and "
    "test_prompt_masks.py",
}

# The named constructors share one docstring template: the examples of the
# smallest plain and hybrid variant run (the others build models of up to
# 632M parameters), and every constructor is checked to carry the template.
SAMPLED = {"keras_vit.models.variants": ("ViTTi16", "RViTTi16")}

MODULES = sorted(
    name
    for _, name, _ in pkgutil.walk_packages(keras_vit.__path__, "keras_vit.")
    if name not in WITHOUT_EXAMPLES and name not in SAMPLED
) + [
    "keras_vit_tools.reference", "keras_vit_tools.commands", "keras_vit_tools.zero_shot_command",
    "keras_vit_tools.front_end", "keras_vit_tools.checkout", "keras_vit_tools.convert_command",
    "keras_vit_tools.dense_command", "keras_vit_tools.tasks_command",
]


def test_every_module_is_listed():
    assert len(MODULES) >= 30, MODULES
    for name in WITHOUT_EXAMPLES:
        importlib.import_module(name)


@pytest.fixture
def scratch(tmp_path, monkeypatch):
    """The examples' `tempfile.mkdtemp()` folders go under the test's own temporary path."""
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    return tmp_path


@examples_run_once
@pytest.mark.parametrize("module_name", MODULES)
def test_docstring_examples(module_name, scratch):
    run_doctests(importlib.import_module(module_name))


@examples_run_once
def test_named_constructor_examples(scratch):
    from keras_vit.models import variants

    for name in keras_vit.architectures.CONSTRUCTORS:
        doc = getattr(variants, name).__doc__
        assert f">>> model = keras_vit.{name}(image_size=" in doc, name
        assert ">>> model.output_shape\n    (None, 10)" in doc, name
    for name in SAMPLED["keras_vit.models.variants"]:
        run_doctests(getattr(variants, name))
