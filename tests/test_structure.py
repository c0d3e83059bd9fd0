"""The shape of the code base: import floors, modules that import alone, sizes.

keras_vit's subpackages stand on the floors of the table in
docs/guides/architecture.md (`validation` and `architectures` at the bottom,
then kernels, layers and weights, then families and models, then tasks and
the command line): a module imports only from its floor and below, no
module imports, directly or through others, a module that imports it back,
and tools/ and examples/ use the package, never the reverse.
"""

import ast
import json
import re
import subprocess
import sys

import pytest

from conftest import ROOT, runs_once

pytestmark = runs_once("torch", "the code base's imports, sizes and names are read from the source, whatever "
                                "the backend")

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


# tools/ installs as `keras_vit_tools`; its modules also import each other
# by bare name (run as scripts) and the examples import it as `tools`.
TOOL_ALIASES = ("keras_vit_tools.", "tools.", "")


def _script_modules():
    """`{name: path}` of tools/ (as `keras_vit_tools.x`) and examples/ (as `examples.x`)."""
    found = {f"keras_vit_tools.{p.stem}": p for p in sorted((ROOT / "tools").glob("*.py")) if p.stem != "__init__"}
    found.update({f"examples.{p.stem}": p for p in sorted((ROOT / "examples").glob("*.py"))})
    return found


def whole_graph():
    """The import graph of the package, tools/ and examples/ together."""
    modules = {**_modules(), **_script_modules()}
    tools = {name.split(".", 1)[1] for name in modules if name.startswith("keras_vit_tools.")}
    graph = {}
    for name, path in modules.items():
        targets = set()
        for node in ast.walk(ast.parse(path.read_text())):
            names = []
            if isinstance(node, ast.Import):
                names = [alias.name for alias in node.names]
            elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
                # `from package import module` imports the module.
                names = [f"{node.module}.{a.name}" if f"{node.module}.{a.name}" in modules
                         or node.module in ("keras_vit_tools", "tools") else node.module for a in node.names]
            for imported in names:
                for alias in TOOL_ALIASES:
                    rest = imported[len(alias):] if imported.startswith(alias) else None
                    if rest in tools and (alias or not name.startswith("keras_vit.")):
                        targets.add(f"keras_vit_tools.{rest}")
                if imported in modules:
                    targets.add(imported)
        graph[name] = targets - {name}
    return graph


def floors():
    """`{subpackage or top-level module: floor}` from docs/guides/architecture.md's table."""
    text = (ROOT / "docs" / "guides" / "architecture.md").read_text()
    table = text.split("<!-- floors: read by tests/test_structure.py -->", 1)[1]
    found = {}
    for line in table.splitlines()[2:]:
        if not line.startswith("|"):
            break
        floor, names = line.split("|")[1:3]
        for name in re.findall(r"`(\w+)`", names):
            found[f"keras_vit.{name}"] = int(floor)
    return found


def _unit(module):
    """The subpackage or top-level module a module belongs to (`keras_vit.x`)."""
    return ".".join(module.split(".")[:2])


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


def test_the_floors_table_names_every_subpackage_and_top_level_module():
    units = {_unit(name) for name in _modules()} - {"keras_vit"}
    assert set(floors()) == units


def upward_imports(graph, floor):
    """The imports of `graph` that go up the floors `floor` (`floors()`)."""
    return sorted(
        f"{name} (floor {floor[_unit(name)]}) imports {target} (floor {floor[_unit(target)]})"
        for name, targets in graph.items() if name != "keras_vit"
        for target in targets if target != "keras_vit" and floor[_unit(target)] > floor[_unit(name)]
    )


def test_imports_go_down_the_floors():
    assert upward_imports(import_graph(), floors()) == []


def test_the_floor_check_finds_an_upward_import():
    graph = {"keras_vit.weights.loader": {"keras_vit.tasks.images", "keras_vit.layers.norms"}}
    assert upward_imports(graph, floors()) == [
        "keras_vit.weights.loader (floor 3) imports keras_vit.tasks.images (floor 10)"]


def test_tools_and_examples_use_the_package_never_the_reverse():
    graph = whole_graph()
    assert any(t.startswith("keras_vit.") for t in graph["keras_vit_tools.convert"])
    assert "keras_vit_tools.front_end" in graph["examples.finetune"]
    package = [name for name in graph if name == "keras_vit" or name.startswith("keras_vit.")]
    backwards = {name: sorted(t for t in graph[name] if t != "keras_vit" and not t.startswith("keras_vit."))
                 for name in package}
    assert {name: found for name, found in backwards.items() if found} == {}
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
    """Each module imports in a process where no other keras_vit module is loaded.

    Importing any submodule runs the package's `__init__` first, which loads
    the same modules in the same order whichever submodule was asked for; so
    each module is imported after the package alone, with every module that
    the package did not load removed again before the next one.
    """
    script = (
        "import importlib, json, sys\n"
        "import keras\n"
        "failed = {}\n"
        "try:\n"
        "    import keras_vit\n"
        "except Exception as error:\n"
        "    print(json.dumps({'keras_vit': repr(error)}))\n"
        "    sys.exit()\n"
        "package = {m for m in sys.modules if m.split('.')[0] == 'keras_vit'}\n"
        "for name in json.loads(sys.argv[1]):\n"
        "    for loaded in [m for m in sys.modules if m.split('.')[0] == 'keras_vit' and m not in package]:\n"
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


def test_class_names_are_unique_in_the_package():
    """One meaning per name: a class name names one class of keras_vit."""
    homes = {}
    for path in sorted(PACKAGE.rglob("*.py")):
        for node in ast.parse(path.read_text()).body:
            if isinstance(node, ast.ClassDef):
                homes.setdefault(node.name, []).append(_module_name(path))
    assert {name: where for name, where in homes.items() if len(where) > 1} == {}


def test_inspection_module_does_not_shadow_the_standard_library():
    assert not (PACKAGE / "inspect.py").exists()
    import keras_vit

    assert not hasattr(keras_vit, "inspect") and "keras_vit.inspect" not in sys.modules


# Folders of keras_vit whose modules say what they compute in `keras.ops` alone:
# no backend library, no branch on the backend, no private Keras API.
BACKEND_FREE_FOLDERS = ("layers", "models")
# Where private APIs of other libraries may be used: the kernels package and the
# modules whose point is a runtime (export, serving, saving, training, distribution,
# and the variables a sharded load makes without values: Keras' list of them).
PRIVATE_API_HOMES = ("kernels", "export", "saving", "training", "execution/sharded_load")
PRIVATE_APIS = ("keras.src", "torch.ops", "torch.nn.modules.module", "torch._C")
BACKEND_LIBRARIES = ("torch", "jax", "jaxlib", "tensorflow")


def _dotted(node):
    """`a.b.c` for a Name/Attribute chain, else None."""
    parts = []
    while isinstance(node, ast.Attribute):
        parts.append(node.attr)
        node = node.value
    if isinstance(node, ast.Name):
        return ".".join([node.id, *reversed(parts)])
    return None


def _module_references(tree):
    """`(line, dotted name)` of every import and whole attribute chain in `tree`, in order."""
    inner = {id(node.value) for node in ast.walk(tree) if isinstance(node, ast.Attribute)}
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found += [(node.lineno, alias.name) for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            found += [(node.lineno, f"{node.module}.{alias.name}") for alias in node.names]
        elif isinstance(node, ast.Attribute) and id(node) not in inner and _dotted(node):
            found.append((node.lineno, _dotted(node)))
    return sorted(found)


def _starts(name, prefixes):
    return any(name == p or name.startswith(p + ".") for p in prefixes)


def backend_code(path):
    """Lines of `path` that import a backend library, branch on the backend or
    use a private Keras API."""
    tree = ast.parse(path.read_text())
    found = []
    for line, name in _module_references(tree):
        if _starts(name, BACKEND_LIBRARIES) or _starts(name, ("keras.src",)):
            found.append(f"{line}: {name}")
        elif name in ("keras.backend.backend", "keras.config.backend", "backend.backend"):
            found.append(f"{line}: {name}()")
        elif _starts(name, ("sys.modules",)):
            found.append(f"{line}: {name}")
    return found


def private_api_uses(path):
    tree = ast.parse(path.read_text())
    return [f"{line}: {name}" for line, name in _module_references(tree) if _starts(name, PRIVATE_APIS)]


def test_the_checks_find_backend_code(tmp_path):
    sample = tmp_path / "sample.py"
    sample.write_text(
        "import keras\nimport torch.nn.functional as F\nfrom jax import numpy\n"
        "from keras.src.backend import get_keras_mask\n"
        "def f():\n    if keras.backend.backend() == 'torch':\n        return torch.ops.mkldnn.x\n"
        "    return keras.ops.add\n"
    )
    assert backend_code(sample) == [
        "2: torch.nn.functional", "3: jax.numpy", "4: keras.src.backend.get_keras_mask",
        "6: keras.backend.backend()", "7: torch.ops.mkldnn.x",
    ]
    assert private_api_uses(sample) == ["4: keras.src.backend.get_keras_mask", "7: torch.ops.mkldnn.x"]


def check_backend_free(folders=BACKEND_FREE_FOLDERS):
    """`{path: [offending lines]}` of the modules under `folders` that hold backend code."""
    return {
        str(path.relative_to(ROOT)): lines
        for folder in folders
        for path in sorted((PACKAGE / folder).rglob("*.py"))
        if (lines := backend_code(path))
    }


@pytest.mark.parametrize("folder", BACKEND_FREE_FOLDERS)
def test_folder_holds_no_backend_code(folder):
    """These folders say what they compute in `keras.ops`; backend-specific fast
    paths live in keras_vit/kernels, registered over the portable form."""
    assert (PACKAGE / folder).is_dir()
    assert check_backend_free([folder]) == {}


def test_private_apis_stay_inside_their_homes():
    homes = [PACKAGE / home for home in PRIVATE_API_HOMES]
    outside = {}
    for path in sorted(PACKAGE.rglob("*.py")):
        if any(path == h.with_suffix(".py") or h in path.parents for h in homes):
            continue
        if uses := private_api_uses(path):
            outside[str(path.relative_to(ROOT))] = uses
    assert outside == {}
    # The fence holds something: the kernels use torch's and Keras' private APIs.
    assert private_api_uses(PACKAGE / "kernels" / "torch_backend.py")
