"""Runs the Example sections of the public docstrings."""

import doctest
import importlib
import pkgutil

import pytest

import keras_vit

# Modules whose examples need only a tiny model and no files.
MODULES = sorted(
    name
    for _, name, _ in pkgutil.walk_packages(keras_vit.__path__, "keras_vit.")
    if name.startswith(("keras_vit.layers.", "keras_vit.models.vit", "keras_vit.models.hybrid"))
)


@pytest.mark.parametrize("module_name", MODULES)
def test_docstring_examples(module_name):
    module = importlib.import_module(module_name)
    finder = doctest.DocTestFinder(exclude_empty=True)
    runner = doctest.DocTestRunner(optionflags=doctest.ELLIPSIS | doctest.NORMALIZE_WHITESPACE)
    for test in finder.find(module, module_name, extraglobs={"keras_vit": keras_vit}):
        runner.run(test)
    result = runner.summarize(verbose=False)
    assert result.failed == 0, f"{result.failed} docstring example(s) failed in {module_name}"
    if not module_name.endswith(".utils"):
        assert result.attempted > 0, f"{module_name} has no docstring example"


def test_examples_exist():
    assert len(MODULES) >= 6
