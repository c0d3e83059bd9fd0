"""Shared fixtures: the backend under test, tiny configs and ../shared paths."""

import collections
import gc
import json
import importlib.util
import os
import pathlib
import sys
import zlib

import keras
import numpy as np
import pytest

ROOT = pathlib.Path(__file__).resolve().parents[1]
SHARED = ROOT.parent / "shared"


def _bind_tools():
    """`keras_vit_tools` (the installed name of tools/) is this checkout's tools/.

    `pip install -e .` maps the name to the checkout it was run in; binding
    it here makes a second checkout test its own tools.
    """
    folder = ROOT / "tools"
    spec = importlib.util.spec_from_file_location(
        "keras_vit_tools", folder / "__init__.py", submodule_search_locations=[str(folder)]
    )
    module = importlib.util.module_from_spec(spec)
    sys.modules["keras_vit_tools"] = module
    spec.loader.exec_module(module)


_bind_tools()
DEIT_NPZ = SHARED / "weights" / "deit_tiny_patch16_224.npz"
DEIT_SAFETENSORS = SHARED / "weights" / "deit_tiny_patch16_224.timm.safetensors"

# A ViT small enough to run forward and backward in milliseconds.
TINY = dict(
    image_size=32,
    patch_size=8,
    hidden_size=16,
    num_layers=2,
    num_heads=2,
    mlp_dim=32,
)

# Where a test runs. The suite runs once per backend (tools/run_tests.py), and
# most checks do not depend on the backend: each runs where it can fail.
#
# - every backend (no mark): code that differs per backend (a kernel, a fast
#   path, an execution mode, an export route, `fit` under each trainer, every
#   layer's contract);
# - `runs_once(backend, why)`: code that touches no backend, or whose calls
#   are held on every backend by other tests (docs, tables, argument checks,
#   files, the command line, post-processing in NumPy);
# - `spread(why)`: cases of one code path (another checkpoint's names or
#   sizes over the same layers) shared out over the backends' jobs, each
#   case once;
# - `every_backend(why)`: a test of a `runs_once` or `spread` module that
#   is backend-specific after all.
#
# The mark closest to the test wins (the test's own over its class's over
# its module's `pytestmark`). In the other jobs a test is deselected, not
# skipped, and each job's summary counts them with their reasons.
BACKENDS = ("jax", "tensorflow", "torch")
# Set to 1, every case of a `spread` test runs in every backend's job.
ALL_CASES = "KERAS_VIT_TEST_ALL_CASES"
PLACEMENTS = ("runs_once", "spread", "every_backend")
# Set to 1, tensorflow's predict is keras_vit's XLA predict function in every
# test (`_tensorflow_predict_without_xla`).
XLA_PREDICT = "KERAS_VIT_TEST_XLA_PREDICT"
# A folder that every job of a `tools/run_tests.py` run shares (unset: one
# folder per test process).
SHARED_DIR = "KERAS_VIT_TEST_SHARED_DIR"


def runs_once(backend, what):
    """A mark for a test that runs in one backend's job only.

    `what` says why the backend does not matter to it (the calls it makes are
    tested on every backend by other tests).

    Example: `@runs_once("torch", "docstring examples")`, or a whole module:
    `pytestmark = runs_once("torch", "the weights table is data")`.
    """
    if backend not in BACKENDS:
        raise ValueError(f"runs_once: backend must be one of {BACKENDS}, got {backend!r}")
    return pytest.mark.runs_once(backend=backend, what=what)


def spread(what):
    """A mark for checks whose cases are shared out over the backends' jobs.

    On a parametrized test its cases are spread; on a module (`pytestmark`)
    or a class, its tests are. Each case runs in one backend's job, the
    backends taking the cases in turn (sorted by id, from a start that
    depends on the test's or module's name; `SPREAD_TURNS`), so every case
    runs once, torch's job runs three in five and jax's and tensorflow's one
    in five each. For cases that vary what the backend does not touch (a
    checkpoint layout, a family's key table, a file format's reader), while
    the computation under them is held per backend by the layer and model
    contracts. `what` says so.
    `KERAS_VIT_TEST_ALL_CASES=1` runs every case in every job.

    Example: `@spread("the loader is NumPy; the layers are held per backend")`.
    """
    return pytest.mark.spread(what=what)


def every_backend(why):
    """A mark for a test of a `runs_once` or `spread` module that runs in
    every backend's job: `why` names what differs per backend."""
    return pytest.mark.every_backend(why=why)


def per_backend(**choices):
    """The current backend's choice of a case that each job runs one of.

    For a check that needs one case per backend rather than every case on
    each (one export runtime per backend, say), with every backend named so
    that a change of backend cannot leave one out:

    Example: `FORMAT = per_backend(jax="openvino", tensorflow="onnx", torch="litert")`.
    """
    if sorted(choices) != sorted(BACKENDS):
        raise ValueError(f"per_backend needs a choice for each of {BACKENDS}, got {sorted(choices)}")
    return choices[keras.backend.backend()]


# The turns in which `spread` hands out cases. torch runs a tiny model's
# calls eagerly, with nothing to compile, where jax compiles each new
# operation's program and tensorflow traces its functions: the same case
# cost a tenth to a half on torch in the suite's timings
# (tools/run_tests.py prints them), so torch takes three turns of five.
SPREAD_TURNS = ("torch", "jax", "torch", "tensorflow", "torch")


def spread_backend(test_name, case_ids, case_id):
    """The backend whose job runs `case_id` of a `spread` test.

    The cases, sorted by id, take `SPREAD_TURNS` in turn from a start that
    depends on `test_name`.

    Example:

    >>> [spread_backend("test_x", "edcba", case) for case in "abcde"]
    ['torch', 'tensorflow', 'torch', 'torch', 'jax']
    """
    start = zlib.crc32(test_name.encode()) % len(SPREAD_TURNS)
    return SPREAD_TURNS[(start + sorted(case_ids).index(case_id)) % len(SPREAD_TURNS)]


def pytest_configure(config):
    config.addinivalue_line("markers", "xla_predict: on tensorflow, predict is keras_vit's XLA predict function")
    config.addinivalue_line("markers", "runs_once(backend, what): the test runs in that backend's job only")
    config.addinivalue_line("markers", "spread(what): each case of the test (or test of the module) runs in "
                                       "one backend's job")
    config.addinivalue_line("markers", "every_backend(why): runs in every job, whatever its module's mark")


def placement(item):
    """`(node, mark)` of the placement mark closest to `item` (None, None without one)."""
    for node, mark in item.iter_markers_with_node():
        if mark.name in PLACEMENTS:
            return node, mark
    return None, None


def spread_case(item, node):
    """`(group, case id)` of a spread item: a test's cases, or a module's or class's tests."""
    if node is item:
        return f"{item.path}::{item.originalname}", getattr(getattr(item, "callspec", None), "id", "")
    return node.nodeid, item.nodeid[len(node.nodeid):]


def _elsewhere(items):
    """`{item: (backend, why)}` of the items another backend's job runs."""
    here = keras.backend.backend()
    placed = {item: placement(item) for item in items}
    cases = collections.defaultdict(list)
    for item, (node, mark) in placed.items():
        if mark is not None and mark.name == "spread":
            group, case = spread_case(item, node)
            cases[group].append(case)
    out = {}
    for item, (node, mark) in placed.items():
        if mark is None or mark.name == "every_backend":
            continue
        if mark.name == "runs_once":
            if mark.kwargs["backend"] != here:
                out[item] = (mark.kwargs["backend"], mark.kwargs["what"])
            continue
        if os.environ.get(ALL_CASES) == "1":
            continue
        group, case = spread_case(item, node)
        name = group.rsplit("::", 1)[-1] if node is item else group
        if spread_backend(name, cases[group], case) != here:
            out[item] = ("other", f"cases spread over the backends: {mark.kwargs['what']}")
    return out


# The files that take longest on some backend (20 s to 110 s of a 2-core
# run's 340 to 540 s per backend), longest first. pytest-xdist hands whole
# files to its workers in collection order (tools/run_tests.py turns off its
# own order, most tests first, which put files of a few long tests last): a
# long file handed out last kept one worker busy while the other stood idle.
LONG_FILES = (
    "test_layer_contracts.py",
    "test_task_compile.py",
    "test_mode_matrix.py",
    "test_benchmark.py",
    "test_training_multiprocess.py",
    "test_export.py",
    "test_quantization.py",
    "test_model_contract.py",
    "test_training_distribute.py",
    "test_failures.py",
    "test_fast_paths.py",
    "test_docstrings.py",
    "test_timm_zoo.py",
    "test_docs.py",
    "test_pretraining.py",
    "test_kernels.py",
    "test_training_example.py",
    "test_task_export.py",
)


def _long_files_first(items):
    """`items` with LONG_FILES' tests first, in that order, then the other
    files by their number of tests, most first (pytest-xdist's own order);
    each file's tests keep their order."""
    counts = collections.Counter(item.path.name for item in items)
    rank = {name: i for i, name in enumerate(LONG_FILES)}

    def key(item):
        name = item.path.name
        return (rank.get(name, len(rank)), -counts[name], str(item.path))

    return sorted(items, key=key)  # stable: each file's tests keep their order


def pytest_collection_modifyitems(config, items):
    elsewhere = _elsewhere(items)
    if elsewhere:
        config.hook.pytest_deselected(items=list(elsewhere))
        items[:] = [item for item in items if item not in elsewhere]
        _RUN_ELSEWHERE.update(elsewhere.values())
    items[:] = _long_files_first(items)


_RUN_ELSEWHERE = collections.Counter()


def pytest_sessionfinish(session):
    if hasattr(session.config, "workeroutput"):  # a pytest-xdist worker: tell the controller
        session.config.workeroutput["run_elsewhere"] = json.dumps([[*k, n] for k, n in _RUN_ELSEWHERE.items()])
        _save_coverage()


def _save_coverage():
    """Writes the coverage data of this process now, under `run_tests.py --coverage`.

    A pytest-xdist worker whose session does not end within 15 s of the
    controller's shutdown (a library's threads still running) is ended with
    `os._exit`, and coverage.py's own save at exit never runs: one worker's
    share of a job went missing that way.
    """
    coverage = sys.modules.get("coverage")
    current = coverage.Coverage.current() if coverage is not None else None
    if current is not None:
        current.stop()
        current.save()


@pytest.hookimpl(optionalhook=True)
def pytest_testnodedown(node, error):
    # Each worker collects every test: the counts are the same in each.
    for backend, what, count in json.loads(getattr(node, "workeroutput", {}).get("run_elsewhere", "[]")):
        _RUN_ELSEWHERE[(backend, what)] = max(_RUN_ELSEWHERE[(backend, what)], count)


def pytest_terminal_summary(terminalreporter):
    for (backend, what), count in sorted(_RUN_ELSEWHERE.items()):
        where = "in the other backends' jobs" if backend == "other" else f"once, in the {backend} job"
        terminalreporter.write_line(f"{count} deselected: run {where} ({what})")


# The input statistics DeiT/timm-trained weights expect.
IMAGENET_MEAN = np.array([0.485, 0.456, 0.406], "float32")
IMAGENET_STD = np.array([0.229, 0.224, 0.225], "float32")


def imagenet_preprocess(image):
    """Shorter side to 256 (bicubic), centre crop 224, ImageNet mean/std."""
    from keras_vit.preprocessing import center_crop

    crop = center_crop(image, 224, crop_fraction=224 / 256)
    return (crop.astype("float32") / 255.0 - IMAGENET_MEAN) / IMAGENET_STD


requires_shared = pytest.mark.skipif(
    not DEIT_NPZ.exists(),
    reason=f"the real weights are not at {DEIT_NPZ} (../shared is absent)",
)


@pytest.fixture(scope="module", autouse=True)
def _freeze_long_lived_objects():
    """Moves what outlives a test module (imported libraries, caches) out of
    the garbage collector's reach.

    Keras runs a full collection whenever a layer drops a variable
    (`quantize`), and Python's own collections come as objects pile up;
    with TensorFlow, torch and JAX imported each one walks about 600,000
    objects (0.5 s). Frozen, a collection walks only what the current module
    made. Collected first, so only live objects are frozen.
    """
    gc.collect()
    gc.freeze()
    yield


@pytest.fixture(autouse=True)
def _fresh_keras_state():
    # Keras' global state afresh, without the full garbage collection that
    # `clear_session` runs by default: even frozen (above), the objects a
    # module's cached models and TensorFlow's late import (by
    # `set_random_seed`) leave made it 0.1 s a test; Python collects them
    # as they pile up.
    keras.utils.clear_session(free_memory=False)
    keras.config.set_dtype_policy("float32")
    keras.config.set_image_data_format("channels_last")
    # Every test starts from the same seed (Keras initialisers, NumPy,
    # Python, the backend's own generator), so its weights do not depend on
    # which tests ran before it, and a tolerance checked once holds on every
    # run, alone or in the whole suite.
    keras.utils.set_random_seed(0)
    yield
    keras.config.set_dtype_policy("float32")
    keras.config.set_image_data_format("channels_last")


@pytest.fixture(autouse=True)
def _tensorflow_predict_without_xla(request):
    """On tensorflow, `predict` runs in TensorFlow's graph runtime, as Keras'
    own default does on a CPU, rather than through keras_vit's XLA predict
    function (`keras_vit.execution.tf_xla`), except in tests marked
    `@pytest.mark.xla_predict`: the tests that are about that function and
    the mode matrix's default-mode cells.

    XLA compiles each new model's predict function for seconds, and most
    tests build new tiny models to compare with a reference, whatever
    runtime computes them. `KERAS_VIT_TEST_XLA_PREDICT=1` keeps keras_vit's
    choice in every test.
    """
    if (keras.backend.backend() != "tensorflow" or request.node.get_closest_marker("xla_predict")
            or os.environ.get(XLA_PREDICT) == "1"):
        yield
        return
    from keras_vit.execution import tf_xla

    original = tf_xla.uses_xla
    tf_xla.uses_xla = lambda model: False
    try:
        yield
    finally:
        tf_xla.uses_xla = original


@pytest.fixture
def backend():
    return keras.backend.backend()


@pytest.fixture
def rng():
    return np.random.default_rng(0)


def to_numpy(x):
    return keras.ops.convert_to_numpy(x)


def inference(fn, *args):
    """`fn(*args)` (an inference call: no state updated) as NumPy, through one
    compiled program on jax.

    jax's eager mode compiles each operation of a new shape on its own: for
    the one-off shapes of a test, several times slower than compiling the
    call once (3 s against 0.3 s for an image layer on a photo). The other
    backends call `fn` eagerly.
    """
    if keras.backend.backend() == "jax":
        import jax

        # A new function each call: jax keys its traces by the function, and
        # the weights a trace holds as constants may have changed since.
        return keras.tree.map_structure(np.asarray, jax.jit(lambda *a: fn(*a))(*args))
    return keras.tree.map_structure(to_numpy, fn(*args))


_PROCESS_SHARED_DIR = []


def shared_files(name, write):
    """The folder `name` of files written by `write(folder)` once per run.

    For the files a test writes the same way under every backend (a
    full-size preset, say): the first process of a run to ask writes them,
    into a folder of its own that it then renames, so that another process
    sees either nothing or the whole folder; the others, the other backends'
    jobs included, read them. Under `tools/run_tests.py` the run's jobs
    share `KERAS_VIT_TEST_SHARED_DIR`; otherwise each test process keeps its own.
    """
    import shutil
    import tempfile

    root = os.environ.get(SHARED_DIR)
    if not root:
        if not _PROCESS_SHARED_DIR:
            _PROCESS_SHARED_DIR.append(tempfile.mkdtemp(prefix="keras_vit_shared_"))
        root = _PROCESS_SHARED_DIR[0]
    folder = pathlib.Path(root) / name
    if folder.is_dir():
        return folder
    partial = pathlib.Path(tempfile.mkdtemp(prefix=f".{name}-", dir=root))
    try:
        write(partial)
        os.rename(partial, folder)
    except OSError:
        if not folder.is_dir():  # not another process's folder that came first
            raise
    finally:
        shutil.rmtree(partial, ignore_errors=True)
    return folder


def pytest_report_header(config):
    return f"keras backend: {keras.backend.backend()} (KERAS_BACKEND={os.environ.get('KERAS_BACKEND')})"
