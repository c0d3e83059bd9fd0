"""Checkpoints are read once: each tensor of a file at most once per load, one
load of a keras-hub preset for both towers, no second model of a preset's
size, and no NumPy copy of a tower made into a zero-shot classifier."""

import collections

import keras
import numpy as np
import pytest

import keras_vit
from conftest import TINY, every_backend, shared_files, spread
from hub_dirs import light_keras_state as _fresh_keras_state  # noqa: F401
from keras_vit.weights import files

pytestmark = spread("what a load reads is keras_vit's readers, each case once; the peak memory of creating "
                    "the variables differs per backend (every_backend)")

pytest.importorskip("transformers")
pytest.importorskip("tokenizers")


@pytest.fixture
def reads(monkeypatch):
    """Counts of `files.read_tensor` calls, by tensor key."""
    counts = collections.Counter()
    read = files.read_tensor

    def counting(path, key):
        counts[key] += 1
        return read(path, key)

    monkeypatch.setattr(files, "read_tensor", counting)
    return counts


def _assert_same_body(model, again):
    """Every variable outside the head equal in both models."""
    saved = {w.path: keras.ops.convert_to_numpy(w) for w in model.weights if not w.path.startswith("head")}
    loaded = {w.path: keras.ops.convert_to_numpy(w) for w in again.weights if not w.path.startswith("head")}
    assert saved.keys() == loaded.keys()
    for path in saved:
        np.testing.assert_array_equal(saved[path], loaded[path], err_msg=path)


def _keys(directory):
    from safetensors import safe_open

    with safe_open(f"{directory}/model.safetensors", framework="numpy") as handle:
        return set(handle.keys())


def test_two_tower_preset_reads_each_tensor_once(reads):
    from image_text_dirs import image_text_dir

    directory = image_text_dir("clip")[0]
    model = keras_vit.ImageTextModel.from_preset(directory)
    assert reads and max(reads.values()) == 1, reads.most_common(3)
    read = set(reads)
    assert read <= _keys(directory)
    # Both towers came from the one reading.
    assert any(k.startswith("vision_model.") for k in read) and any(k.startswith("text_model.") for k in read)
    assert "logit_scale" in read
    assert model.image_encoder.built and model.text_encoder.built


def test_plain_preset_reads_each_tensor_once(reads, tmp_path):
    model = keras_vit.ViT(**TINY)
    model.save_to_preset(tmp_path, format="transformers", preprocessing="inception",
                         class_names=[f"c{i}" for i in range(model.output_shape[-1])])
    with pytest.warns(UserWarning, match="zero-initialised"):
        again = keras_vit.from_preset(tmp_path, classes=4)
    assert reads and max(reads.values()) == 1, reads.most_common(3)
    assert again.output_shape[-1] == 4
    _assert_same_body(model, again)


def test_keras_vit_preset_with_overrides_builds_one_model(monkeypatch, tmp_path):
    from keras_vit.presets import loading

    model = keras_vit.ViT(**TINY)
    model.save_to_preset(tmp_path)
    built = []
    build = loading._build
    monkeypatch.setattr(loading, "_build", lambda *a, **k: built.append(a) or build(*a, **k))
    with pytest.warns(UserWarning, match="zero-initialised"):
        again = keras_vit.from_preset(tmp_path, classes=3)
    assert len(built) == 1
    assert again.output_shape[-1] == 3
    _assert_same_body(model, again)


def test_keras_hub_two_tower_preset_is_loaded_once(monkeypatch):
    pytest.importorskip("keras_hub")
    from keras_hub_image_text_dirs import keras_hub_image_text_dir

    from keras_vit.weights.formats import keras_hub_family

    directory = keras_hub_image_text_dir("siglip")[0]
    loads = []
    read = keras_hub_family.read_variables
    monkeypatch.setattr(keras_hub_family, "read_variables", lambda *a, **k: loads.append(a) or read(*a, **k))
    model = keras_vit.ImageTextModel.from_preset(directory)
    assert len(loads) == 1, loads
    assert model.image_encoder.built


def test_zero_shot_classifier_takes_the_towers_tensors_not_numpy_copies(monkeypatch):
    from keras_vit.tasks import zero_shot

    tower = keras_vit.ViT(**{**TINY, "classes": 8, "classifier_activation": None})
    tower.get_layer("head").bias.assign(np.zeros(8, "float32"))
    given = {}
    load = zero_shot.load_checkpoint

    def capture(model, checkpoint):
        given.update(checkpoint.params)
        return load(model, checkpoint)

    monkeypatch.setattr(zero_shot, "load_checkpoint", capture)
    embeddings = np.random.default_rng(1).normal(size=(3, 8)).astype("float32")
    classifier = zero_shot.zero_shot_classifier(tower, embeddings, ["a", "b", "c"], logit_scale=10.0)
    tower_values = [k for k in given if not k.startswith("head/")]
    assert tower_values and all(keras.ops.is_tensor(given[k]) for k in tower_values), [
        (k, type(given[k]).__name__) for k in tower_values if not keras.ops.is_tensor(given[k])
    ][:3]
    # The classifier owns its copies: training it leaves the tower as it was.
    images = np.random.default_rng(2).uniform(-1, 1, (4, 32, 32, 3)).astype("float32")
    before = tower.predict(images, verbose=0)
    classifier.compile(optimizer=keras.optimizers.SGD(0.5), loss="sparse_categorical_crossentropy")
    classifier.fit(images, np.array([0, 1, 2, 0]), epochs=1, verbose=0)
    np.testing.assert_array_equal(tower.predict(images, verbose=0), before)


# Peak memory of loading a B/16 preset, in a process of its own: the peak
# resident set (VmHWM) reset just before the call (/proc/self/clear_refs),
# over the resident set then. `getrusage`'s peak cannot be used: a process
# started from the test inherits the test process's peak across exec (about
# 2 GiB after it built the B/16), above anything the load reaches. glibc's
# malloc raises its mmap threshold as large blocks are freed, after which
# freed buffers stay in the heap and count twice in the peak, by chance from
# run to run (torch 1.17x to 1.44x, tensorflow 1.27x to 1.40x on one
# machine); with the threshold fixed (MALLOC_MMAP_THRESHOLD_, as the docs
# advise for a memory-tight host) the probe sees what keras_vit itself holds.
MEMORY_PROBE = """
import gc, sys
import numpy as np, keras_vit

def mib(key):
    with open("/proc/self/status") as status:
        return next(int(line.split()[1]) / 1024 for line in status if line.startswith(key))

keras_vit.ViT(image_size=32, patch_size=16, hidden_size=8, num_layers=1, num_heads=2, mlp_dim=8)
gc.collect()
try:
    with open("/proc/self/clear_refs", "w") as refs:
        refs.write("5")  # the peak resident set starts again from the current one
except OSError as error:
    print("NO_RESET", error)
    sys.exit()
before = mib("VmRSS")
model = keras_vit.from_preset(sys.argv[1])
weights = sum(int(np.prod(v.shape)) for v in model.weights) * 4 / 2**20
print(weights, mib("VmHWM") - before)
"""


@every_backend("each backend creates and fills its variables its own way")
def test_loading_a_b16_preset_peaks_under_1_3x_its_weights(tmp_path, backend):
    import os
    import subprocess
    import sys

    def write(folder):
        model = keras_vit.ViTB16(
            classes=1000, preprocessing=keras_vit.preprocessing.Preprocessing.from_mode("imagenet", image_size=224),
            class_names=[str(i) for i in range(1000)])
        model.save_to_preset(folder, format="transformers")

    # The preset's files are the same whichever backend wrote them.
    preset = shared_files("b16_transformers_preset", write)
    env = dict(os.environ, KERAS_BACKEND=backend, MALLOC_MMAP_THRESHOLD_="131072")
    result = subprocess.run([sys.executable, "-c", MEMORY_PROBE, str(preset)], env=env, capture_output=True,
                            text=True, timeout=600)
    assert result.returncode == 0, result.stderr[-2000:]
    if "NO_RESET" in result.stdout:
        pytest.skip(f"this system cannot reset a process's peak resident set: {result.stdout.strip()}")
    weights, growth = map(float, result.stdout.split()[-2:])
    # The load reads the file: it holds the model and about one tensor more.
    assert 320 < weights < 340 and weights <= growth <= 1.3 * weights, (weights, growth)
