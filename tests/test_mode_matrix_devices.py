"""The mode matrix over several devices: each set of fast paths (forced on)
training a step and predicting over two CPU devices, against the portable
reference run eagerly in float32 on one (docs/guides/modes.md is the table
of the cells).

jax splits the batch over two host devices
(`XLA_FLAGS=--xla_force_host_platform_device_count=2`,
`keras.distribution.DataParallel`), tensorflow over two logical CPUs
(`MirroredStrategy`): both fixed before the framework starts, so the cells
run in one subprocess per backend with a hard timeout, which writes what
each path set computed. The torch backend has no distribution in Keras 3:
keras_vit refuses several devices and several processes by name.
"""

import json
import os
import subprocess
import sys

import numpy as np
import pytest

from conftest import ROOT
from kernel_helpers import BACKEND
from mode_matrix import (
    DEFAULT_MODE, PATH_SETS, REFUSALS, Run, assert_agrees, check_paths, distinct, reference,
)

# The devices, before the framework starts (jax's flag added to the
# caller's XLA_FLAGS); the distribution's name.
SETUP = {
    "jax": ("import os\nos.environ['XLA_FLAGS'] = os.environ.get('XLA_FLAGS', '') + "
            "' --xla_force_host_platform_device_count=2'\n", "data_parallel"),
    "tensorflow": ("import tensorflow as tf\n"
                   "cpu = tf.config.list_physical_devices('CPU')[0]\n"
                   "two = [tf.config.LogicalDeviceConfiguration()] * 2\n"
                   "tf.config.set_logical_device_configuration(cpu, two)\n", "mirrored"),
}

# Each path set's step of `fit` and `predict` in the distribution's scope;
# the results go to `folder/<path set>.npz`, the replicas and paths to stdout.
CELLS_SCRIPT = """
import json, sys
import numpy as np
folder, distribution, path_sets = sys.argv[1], sys.argv[2], sys.argv[3].split(",")
import mode_matrix
from keras_vit import training
dist = training.get_distribution(distribution)
out = {"replicas": dist.num_replicas}
for path_set in path_sets:
    with mode_matrix.paths(path_set), dist.scope():
        run = mode_matrix.train(mode_matrix.make_model(), mode_matrix.DEFAULT_MODE)
    np.savez(f"{folder}/{path_set}.npz", losses=np.asarray(run.losses), predictions=run.predictions,
             *run.weights)
    out[path_set] = sorted(run.paths)
print(json.dumps(out))
"""

CELLS = distinct(PATH_SETS, DEFAULT_MODE) if BACKEND in SETUP else []
requires_devices = pytest.mark.skipif(
    BACKEND not in SETUP, reason="torch has no distribution in Keras 3: its cells are refusals (below)")


def _runs(folder):
    """Runs the cells in one subprocess; `{"replicas": n, path_set: Run}`."""
    setup, distribution = SETUP[BACKEND]
    env = dict(os.environ, KERAS_BACKEND=BACKEND, TF_CPP_MIN_LOG_LEVEL="3",
               PYTHONPATH=os.pathsep.join([str(ROOT / "tests"), str(ROOT)]))
    proc = subprocess.run([sys.executable, "-c", setup + CELLS_SCRIPT, folder, distribution, ",".join(CELLS)],
                          env=env, cwd=str(ROOT), capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    out = json.loads(proc.stdout.strip().splitlines()[-1])
    runs = {"replicas": out["replicas"]}
    for path_set in CELLS:
        with np.load(f"{folder}/{path_set}.npz") as saved:
            weights = [saved[f"arr_{i}"] for i in range(len(saved.files) - 2)]
            runs[path_set] = Run(list(saved["losses"]), None, saved["predictions"], weights,
                                 set(out[path_set]))
    return runs


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    return _runs(str(tmp_path_factory.mktemp("devices")))


@requires_devices
@pytest.mark.parametrize("path_set", CELLS)
def test_a_step_over_two_devices_agrees_with_the_portable_reference(runs, path_set):
    assert runs["replicas"] == 2
    assert_agrees(runs[path_set], reference())
    check_paths(runs[path_set].paths, path_set, DEFAULT_MODE)


@pytest.mark.skipif(BACKEND != "torch", reason="jax and tensorflow train over several devices (above)")
def test_torch_refuses_several_devices_and_processes_by_name():
    from keras_vit import training
    from keras_vit.training import multiprocess

    with pytest.raises(RuntimeError, match=REFUSALS[("torch", "several devices")]):
        training.get_distribution("data_parallel")
    with pytest.raises(RuntimeError, match=REFUSALS[("torch", "several processes")]):
        multiprocess.initialize(f"127.0.0.1:{multiprocess.free_port()}", num_processes=2, process_id=0)
