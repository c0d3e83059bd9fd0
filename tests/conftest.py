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

def runs_once(backend, what):
    """A mark for a test that runs in one backend's job only.

    `what` says why the backend does not matter to it (the calls it makes are
    tested on every backend by other tests). In the other jobs the test is
    deselected, not skipped, and the run's summary says how many and why
    (`pytest_terminal_summary`).

    Example: `@runs_once("torch", "docstring examples")`.
    """
    return pytest.mark.runs_once(backend=backend, what=what)


BACKENDS = ("jax", "tensorflow", "torch")
# Set to 1, every case of a `spread` test runs in every backend's job.
ALL_CASES = "KERAS_VIT_TEST_ALL_CASES"


def spread(what):
    """A mark for a parametrized test whose cases are spread over the backends' jobs.

    Each case runs in one backend's job, the backends taking the cases in
    turn (sorted by id, from a start that depends on the test's name), so
    every case runs once and every backend runs about a third of them. For
    tests whose cases vary what the backend does not touch (a checkpoint
    layout, a family's key table, a file format's reader), while the
    computation under them is held per backend by the layer and model
    contracts. `what` says so; the summary of the other jobs counts it.
    `KERAS_VIT_TEST_ALL_CASES=1` runs every case in every job.

    Example: `@spread("the loader is NumPy; the layers are held per backend")`.
    """
    return pytest.mark.spread(what=what)


def spread_backend(test_name, case_ids, case_id):
    """The backend whose job runs `case_id` of a `spread` test.

    Example:

    >>> [spread_backend("test_x", "dcba", case) for case in "abcd"]
    ['tensorflow', 'torch', 'jax', 'tensorflow']
    """
    start = zlib.crc32(test_name.encode()) % len(BACKENDS)
    return BACKENDS[(start + sorted(case_ids).index(case_id)) % len(BACKENDS)]


def pytest_configure(config):
    config.addinivalue_line("markers", "runs_once(backend, what): the test runs in that backend's job only")
    config.addinivalue_line("markers", "spread(what): each case of the test runs in one backend's job")


def _elsewhere(items):
    """`{item: (backend, why)}` of the items another backend's job runs."""
    here = keras.backend.backend()
    cases = collections.defaultdict(list)
    for item in items:
        if item.get_closest_marker("spread") is not None and hasattr(item, "callspec"):
            cases[(item.path, item.originalname)].append(item.callspec.id)
    out = {}
    for item in items:
        once = item.get_closest_marker("runs_once")
        if once is not None and once.kwargs["backend"] != here:
            out[item] = (once.kwargs["backend"], once.kwargs["what"])
        mark = item.get_closest_marker("spread")
        if mark is None or not hasattr(item, "callspec") or os.environ.get(ALL_CASES) == "1":
            continue
        owner = spread_backend(item.originalname, cases[(item.path, item.originalname)], item.callspec.id)
        if owner != here:
            out[item] = ("other", f"cases spread over the backends: {mark.kwargs['what']}")
    return out


# The files that take longest on some backend (40 s to 140 s of a 2-core
# run's 700 to 900 s per backend), longest first. pytest-xdist hands whole
# files to its workers in collection order (tools/run_tests.py turns off its
# own order, most tests first, which put files of a few long tests last): a
# long file handed out last kept one worker busy while the other stood idle.
LONG_FILES = (
    "test_export.py",
    "test_benchmark.py",
    "test_training_multiprocess.py",
    "test_mode_matrix.py",
    "test_task_compile.py",
    "test_model_contract.py",
    "test_layer_contracts.py",
    "test_quantization.py",
    "test_pretraining.py",
    "test_fast_paths.py",
    "test_image_text.py",
    "test_failures.py",
    "test_timm_zoo.py",
    "test_models.py",
    "test_dense_parity.py",
    "test_dense_training.py",
    "test_task_export.py",
    "test_docstrings.py",
    "test_image_text_export.py",
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

    Keras runs a full collection in `clear_session` and whenever a layer
    drops a variable (`quantize`); with TensorFlow, torch and JAX imported
    each one walks about 600,000 objects (0.5 s). Frozen, a collection walks
    only what the current module made. Collected first, so only live objects
    are frozen.
    """
    gc.collect()
    gc.freeze()
    yield


@pytest.fixture(autouse=True)
def _fresh_keras_state():
    keras.utils.clear_session()
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


def pytest_report_header(config):
    return f"keras backend: {keras.backend.backend()} (KERAS_BACKEND={os.environ.get('KERAS_BACKEND')})"
