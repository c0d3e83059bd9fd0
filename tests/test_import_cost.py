"""`import keras_vit` loads Keras and its backend, and nothing else heavy:
no other backend, no transformers, keras-hub, timm or exporter, and no
package that `import keras` alone does not load (they are imported where a
call needs them: readers of checkpoints, exporters, tf.data pipelines).
The baseline is Keras as the `keras-vit` commands import it
(`keras_vit_tools.front_end.lean_keras_import`: without scikit-learn,
matplotlib, and jax under another backend), so keras_vit needs none of
those either; each imports as usual afterwards.

Runs in every backend's job: which backend Keras imports, and so which
modules are there to leak, differs per backend.
"""

import json
import os
import subprocess
import sys

from conftest import ROOT

import keras

# Loaded only by the calls that need them (a checkpoint of theirs, an export, a tf.data path).
NEVER_AT_IMPORT = ("transformers", "keras_hub", "timm", "onnx", "onnxruntime", "openvino", "tf2onnx",
                   "litert", "ai_edge_litert", "safetensors", "cv2", "skimage")
BACKEND_MODULES = ("tensorflow", "torch")  # jax: Keras itself imports it where installed (its Orbax callback)
# One interpreter: what `import keras` loads, then what `import keras_vit` adds.
SCRIPT = """
import importlib, json, sys
sys.path.insert(0, sys.argv[1])
from front_end import KERAS_EXTRAS, lean_keras_import
lean_keras_import()
before = {name.partition(".")[0] for name in sys.modules}
import keras_vit
after = {name.partition(".")[0] for name in sys.modules}
added = sorted(after - before - set(sys.stdlib_module_names) - {"keras_vit"})
left_out = [name for name in KERAS_EXTRAS if name not in after]
for name in left_out:
    importlib.import_module(name)  # not barred for later
print("RESULT " + json.dumps({"added": added, "loaded": sorted(after), "left_out": left_out}))
"""


def test_import_keras_vit_loads_no_library_it_does_not_need():
    backend = keras.backend.backend()
    env = dict(os.environ, KERAS_BACKEND=backend, TF_CPP_MIN_LOG_LEVEL="3", PYTHONPATH=str(ROOT))
    proc = subprocess.run([sys.executable, "-c", SCRIPT, str(ROOT / "tools")], env=env, cwd=ROOT, capture_output=True, text=True,
                          timeout=180)
    assert proc.returncode == 0, proc.stderr[-2000:]
    result = json.loads(next(line for line in proc.stdout.splitlines() if line.startswith("RESULT "))[7:])
    assert result["added"] == [], f"import keras_vit loads {result['added']} beyond import keras"
    loaded = set(result["loaded"])
    assert backend in loaded  # the check sees the backend's own modules
    unwanted = [name for name in (*NEVER_AT_IMPORT, *BACKEND_MODULES) if name in loaded and name != backend]
    assert unwanted == [], f"import keras_vit under {backend} loads {unwanted}"
    assert result["left_out"] == ["sklearn", "matplotlib"] + (["jax"] if backend != "jax" else [])
