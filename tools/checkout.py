"""Binds `keras_vit_tools` to the tools/ folder of this checkout.

`pip install -e` maps the name to the checkout it was run in; a script of
another checkout run directly (`python tools/benchmark_worker.py`) binds it
to its own folder first, so that it benchmarks its own tools.

Example:

>>> import sys
>>> bind_tools()
>>> sys.modules["keras_vit_tools"].__name__
'keras_vit_tools'
"""

import importlib.util
import pathlib
import sys


def bind_tools():
    """`keras_vit_tools` is this file's folder, unless the name is bound already."""
    folder = pathlib.Path(__file__).resolve().parent
    if (folder / "__init__.py").exists() and "keras_vit_tools" not in sys.modules:
        spec = importlib.util.spec_from_file_location(
            "keras_vit_tools", folder / "__init__.py", submodule_search_locations=[str(folder)]
        )
        module = importlib.util.module_from_spec(spec)
        sys.modules["keras_vit_tools"] = module
        spec.loader.exec_module(module)
