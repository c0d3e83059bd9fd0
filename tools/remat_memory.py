"""Peak memory of a ViT training step with and without rematerialised blocks.

Each case runs in a fresh subprocess (so peaks do not mix): it builds the
model at random, compiles SGD, runs `--steps` training steps on random
images with `train_on_batch`, and reports the process's peak resident set
size (`ru_maxrss`, Linux: the high-water mark of CPU memory, which holds
the activations kept for the backward pass) and the seconds of the last
step; under jax also XLA's own count of the temporary buffers of the
gradient computation (`memory_analysis()`). On a GPU the backend's
allocator peak would be the number to read; this tool measures the CPU.

    python tools/remat_memory.py --model ViTB16 --batch-size 8
    KERAS_BACKEND=torch python tools/remat_memory.py --batch-size 8 --json out.json
"""

import argparse
import json
import os
import resource
import subprocess
import sys
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def run_case(args):
    sys.path.insert(0, ROOT)
    import keras
    import numpy as np

    import keras_vit

    model = getattr(keras_vit, args.model)(remat=args.remat, classes=10, classifier_activation=None)
    model.compile(
        optimizer=keras.optimizers.SGD(0.01),
        loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True),
    )
    rng = np.random.default_rng(0)
    size = model.image_size
    x = rng.normal(size=(args.batch_size, *size, 3)).astype("float32")
    y = rng.integers(0, 10, size=args.batch_size)
    idle = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    seconds = None
    for _ in range(args.steps):
        start = time.perf_counter()
        loss = float(model.train_on_batch(x, y))
        seconds = time.perf_counter() - start
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    result = dict(
        backend=keras.backend.backend(), model=args.model, batch_size=args.batch_size,
        remat=args.remat, peak_rss_mib=peak / 1024, before_training_mib=idle / 1024,
        last_step_seconds=seconds, loss=loss,
    )
    if keras.backend.backend() == "jax":
        result["xla_temp_mib"] = _xla_temp_mib(model, x, y)
    print(json.dumps(result))


def _xla_temp_mib(model, x, y):
    """XLA's temporary buffers for the gradient of the loss (its own accounting)."""
    import jax
    import keras

    def loss(trainable, other, x, y):
        logits, _ = model.stateless_call(trainable, other, x, training=True)
        return keras.ops.mean(keras.losses.sparse_categorical_crossentropy(y, logits, from_logits=True))

    values = ([v.value for v in model.trainable_variables], [v.value for v in model.non_trainable_variables])
    compiled = jax.jit(jax.grad(loss)).lower(*values, x, y).compile()
    return compiled.memory_analysis().temp_size_in_bytes / 2**20


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--model", default="ViTB16", help="a keras_vit constructor")
    p.add_argument("--batch-size", type=int, default=8, help="images per training step")
    p.add_argument("--steps", type=int, default=2, help="training steps (the first compiles)")
    p.add_argument("--json", default=None, help="file to write the results to")
    p.add_argument("--case", choices=("plain", "remat"), default=None, help=argparse.SUPPRESS)
    args = p.parse_args(argv)
    if args.case:
        args.remat = args.case == "remat"
        return run_case(args)
    results = []
    for case in ("plain", "remat"):
        command = [sys.executable, os.path.abspath(__file__), "--case", case, "--model", args.model,
                   "--batch-size", str(args.batch_size), "--steps", str(args.steps)]
        out = subprocess.run(command, check=True, capture_output=True, text=True).stdout
        results.append(json.loads(out.strip().splitlines()[-1]))
        r = results[-1]
        xla = f", XLA temporaries {r['xla_temp_mib']:.0f} MiB" if "xla_temp_mib" in r else ""
        print(f"{r['backend']} {r['model']} batch {r['batch_size']} remat={r['remat']}: "
              f"peak RSS {r['peak_rss_mib']:.0f} MiB (before training {r['before_training_mib']:.0f} MiB), "
              f"step {r['last_step_seconds']:.1f} s{xla}")
    if args.json:
        with open(args.json, "w") as f:
            json.dump(results, f, indent=1)
    return results


if __name__ == "__main__":
    main()
