"""The shape of the code base: import floors, modules that import alone, sizes.

keras_vit's modules form floors (`keras_vit.architectures` and
`keras_vit.validation` at the bottom, then layers and weights, then models,
then the tools around them): no module imports, directly or through
others, a module that imports it back.
"""

import ast
import json
import pathlib
import subprocess
import sys

from conftest import ROOT

PACKAGE = ROOT / "keras_vit"
# Functions longer than this many lines of code (docstring excluded) are hard
# to read in one sitting.
MAX_FUNCTION_LINES = 80


def _module_name(path):
    parts = path.relative_to(ROOT).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _modules():
    return {_module_name(p): p for p in sorted(PACKAGE.rglob("*.py"))}


def _imports(path, modules):
    """keras_vit modules `path` imports, at any depth of its code."""
    found = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            names = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            # `from package import submodule` imports the submodule.
            names = [
                f"{node.module}.{a.name}" if f"{node.module}.{a.name}" in modules else node.module
                for a in node.names
            ]
        else:
            continue
        found.update(name for name in names if name in modules)
    return found


def import_graph():
    """`{module: set of keras_vit modules it imports}`."""
    modules = _modules()
    return {name: _imports(path, modules) - {name} for name, path in modules.items()}


def find_cycle(graph):
    """A list of modules forming an import cycle, or None."""
    state, stack = {}, []

    def visit(node):
        state[node] = "open"
        stack.append(node)
        for target in sorted(graph[node]):
            if state.get(target) == "open":
                return stack[stack.index(target):] + [target]
            if target not in state:
                cycle = visit(target)
                if cycle:
                    return cycle
        stack.pop()
        state[node] = "done"
        return None

    for node in sorted(graph):
        if node not in state:
            cycle = visit(node)
            if cycle:
                return cycle
    return None


def test_cycle_finder_finds_a_cycle():
    assert find_cycle({"a": {"b"}, "b": {"c"}, "c": {"a"}}) == ["a", "b", "c", "a"]
    assert find_cycle({"a": {"b"}, "b": set()}) is None


def test_no_import_cycle():
    graph = import_graph()
    assert len(graph) >= 30
    cycle = find_cycle(graph)
    assert cycle is None, "import cycle: " + " -> ".join(cycle)


def test_ground_floor_imports_nothing_above_it():
    graph = import_graph()
    assert graph["keras_vit.validation"] == set()
    assert graph["keras_vit.architectures"] == {"keras_vit.validation"}
    for name, targets in graph.items():
        if name.startswith(("keras_vit.weights", "keras_vit.layers")):
            assert not any(t.startswith("keras_vit.models") for t in targets), (name, targets)


def test_every_module_imports_alone():
    """Each module imports in a process where no other keras_vit module is loaded."""
    script = (
        "import importlib, json, sys\n"
        "import keras\n"
        "failed = {}\n"
        "for name in json.loads(sys.argv[1]):\n"
        "    for loaded in [m for m in sys.modules if m.split('.')[0] == 'keras_vit']:\n"
        "        del sys.modules[loaded]\n"
        "    try:\n"
        "        importlib.import_module(name)\n"
        "    except Exception as error:\n"
        "        failed[name] = repr(error)\n"
        "print(json.dumps(failed))\n"
    )
    names = sorted(_modules())
    result = subprocess.run(
        [sys.executable, "-c", script, json.dumps(names)],
        cwd=ROOT, capture_output=True, text=True, timeout=600,
    )
    assert result.returncode == 0, result.stderr[-2000:]
    assert json.loads(result.stdout.strip().splitlines()[-1]) == {}


def _long_functions(folder):
    for path in sorted(folder.rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                first = node.body[0]
                if ast.get_docstring(node) is not None:
                    lines = node.end_lineno - first.end_lineno
                else:
                    lines = node.end_lineno - node.lineno + 1
                if lines > MAX_FUNCTION_LINES:
                    yield f"{path.relative_to(ROOT)}:{node.lineno} {node.name} ({lines} lines)"


def test_functions_are_short():
    long = [f for folder in ("keras_vit", "tools", "examples") for f in _long_functions(ROOT / folder)]
    assert long == []


def test_inspection_module_does_not_shadow_the_standard_library():
    assert not (PACKAGE / "inspect.py").exists()
    import keras_vit

    assert not hasattr(keras_vit, "inspect") and "keras_vit.inspect" not in sys.modules


# The libraries a backend brings; `keras.src` is Keras' private backend code.
BACKEND_MODULES = ("torch", "jax", "jaxlib", "tensorflow", "keras.src")


def _backend_code(path):
    """`line: what` of each use of backend code in a module: an import of a
    backend library, a read of `sys.modules`, a call of `...backend()`."""
    found = []
    for node in ast.walk(ast.parse(path.read_text())):
        names = []
        if isinstance(node, ast.Import):
            names = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            names = [node.module] + [f"{node.module}.{alias.name}" for alias in node.names]
        if any(n == m or n.startswith(m + ".") for n in names for m in BACKEND_MODULES):
            found.append(f"{node.lineno}: imports {names}")
        if any(n in ("keras.backend.backend", "keras.config.backend") for n in names):
            found.append(f"{node.lineno}: imports the backend's name")
        if isinstance(node, ast.Attribute) and node.attr == "modules" and getattr(node.value, "id", None) == "sys":
            found.append(f"{node.lineno}: reads sys.modules")
        if isinstance(node, ast.Call) and getattr(node.func, "attr", None) == "backend":
            found.append(f"{node.lineno}: calls {ast.unparse(node.func)}()")
    return found


def test_backend_code_finder_finds_it(tmp_path):
    module = tmp_path / "m.py"
    module.write_text(
        "import sys\nimport keras\nfrom jax import numpy\n"
        "def f():\n    import torch.nn\n    if keras.backend.backend() == 'jax':\n"
        "        return sys.modules.get('tensorflow')\n"
    )
    assert sorted(int(line.split(":")[0]) for line in _backend_code(module)) == [3, 5, 6, 7]


def test_models_are_backend_free():
    """keras_vit.models describes architectures: backend code lives in
    keras_vit.execution (and the kernels), reached through functions."""
    found = {
        str(path.relative_to(ROOT)): _backend_code(path)
        for path in sorted((PACKAGE / "models").rglob("*.py"))
    }
    assert len(found) >= 8
    assert {path: uses for path, uses in found.items() if uses} == {}
