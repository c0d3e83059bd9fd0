"""Runs the test suite once per Keras backend and fails if any run fails.

Usage: python tools/run_tests.py [--backends jax,tensorflow,torch] [--workers N] [--quick] [pytest args]

Each backend's run uses pytest-xdist with `--workers` processes (default: one
per CPU core, at most 4) when it is installed, and lists the reason of every
skipped test.

The jax and tensorflow runs compile XLA's CPU code without LLVM's
optimisations (`--xla_backend_optimization_level=0`), and the jax run
also with XLA's older loop emitters for fused element-wise code
(`--xla_cpu_use_fusion_emitters=false`); each option is added to
`XLA_FLAGS` unless `XLA_FLAGS` already sets it or `--xla-optimize` is
given. The tests run thousands of small programs once each, so compiling
is a large part of their time: on jax each eager operation on a new shape
is a program of its own, and on tensorflow keras_vit compiles each new
model's predict function with XLA on a CPU (`keras_vit.execution.tf_xla`).
Without LLVM's optimisations, a fifth came off jax's small-model tests. The
older emitters then took about a third off what was left: jax's first
eager call of a tiny ViT 4.8 to 2.9 s, its first `fit` 2.9 to 1.5 s, and
jax's layer contracts, timm zoo and head-token files 332 to 215 s on a
2-core Zen 1. They round some element-wise functions (tanh) in the last bit
differently, and every float check keeps its tolerance. The tensorflow run
keeps the default emitters: there `predict` (XLA) is compared with exported
artifacts run by TensorFlow's graph runtime, and the int8 artifacts' checks
rest on the two agreeing to the last bits (a tiny DeiT's int8 SavedModel
moved 5-9 % from `predict` with the older emitters, past its check's 3 %
bound, which the default emitters keep). jax's XLA also compiles each
program as one LLVM module (`--xla_cpu_parallel_codegen_split_count=1`)
rather than splitting it for parallel code generation, which the tests'
small programs only pay for: the head-token and pre-training files 124 to
104 s (two workers, 2-core Zen 1); the results are the same code. The
tensorflow run was no faster with it.

The jax run also keeps XLA's compiled programs in a persistent cache, a
fresh folder per run shared by its workers and the processes the tests
start (`JAX_COMPILATION_CACHE_DIR`, every program cached however quick its
compile; unless the caller set the folder). Tests build the same tiny
models again and again, and each new model's `predict` or `fit` traces to
a program XLA has compiled before: the cache then serves it. A new run
starts empty, so each distinct program is still compiled, once.

`--quick` runs the quick tier: the files of `QUICK`, on one backend
(torch unless `--backends` names one), for a check between edits; the
whole suite remains the test of a change.

The jax run also leaves Python's source locations out of the programs it
lowers (`JAX_INCLUDE_FULL_TRACEBACKS_IN_LOCATIONS=false`,
`JAX_TRACEBACK_IN_LOCATIONS_LIMIT=0`, unless the caller set them): jax
otherwise records up to 100 frames of the calling code on every operation,
for profiles and XLA's dumps, which no test reads. The model contract and
block-option files took 131 s rather than 134-140 s in one process (two
alternating runs each, 2-core Zen 3); errors raised in Python are unchanged.

With several workers, each gets an equal share of the CPU's cores for its
OpenMP thread pool (`OMP_NUM_THREADS`, unless already set): torch's pool
otherwise starts a thread per core in every worker, and its spinning threads
then compete for the same cores. That took a fifth off a torch run of the
model tests on 2 cores with 2 workers (40 to 32 s); jax and tensorflow,
which use their own pools, ran as fast either way.
"""

import argparse
import importlib.util
import os
import re
import subprocess
import sys
import tempfile
import time

BACKENDS = ("jax", "tensorflow", "torch")


def summary_counts(output):
    """Counts from pytest's final summary line ("3 passed, 1 skipped in 2.1s").

    Log lines that a backend prints at exit may follow the summary.
    """
    summaries = [
        line for line in output.splitlines()
        if re.search(r"\b(passed|failed|errors?|skipped|no tests ran)\b.* in [\d.]+s", line)
    ]
    last = summaries[-1] if summaries else ""
    counts = {}
    for key, pattern in (
        ("passed", r"(\d+) passed"),
        ("failed", r"(\d+) failed"),
        ("skipped", r"(\d+) skipped"),
        ("errors", r"(\d+) errors?"),
    ):
        match = re.search(pattern, last)
        counts[key] = int(match.group(1)) if match else 0
    return counts


# The XLA options of the jax and tensorflow jobs: (option, value), each set
# unless the caller's XLA_FLAGS names the option.
XLA_TEST_FLAGS = {
    "jax": (("xla_backend_optimization_level", "0"), ("xla_cpu_use_fusion_emitters", "false"),
            ("xla_cpu_parallel_codegen_split_count", "1")),
    "tensorflow": (("xla_backend_optimization_level", "0"),),
}


# The jax job's environment: no source locations in lowered programs.
JAX_TEST_ENV = (("JAX_INCLUDE_FULL_TRACEBACKS_IN_LOCATIONS", "false"), ("JAX_TRACEBACK_IN_LOCATIONS_LIMIT", "0"))


# The quick tier, on one backend: the layers, the model contract, loading,
# the package's structure (which imports every module on its own) and the
# command line, and a file of each task, of zero-shot with its text tower,
# of presets written out, of training presets and of inspection.
QUICK = (
    "tests/test_layers.py",
    "tests/test_layer_contracts.py",
    "tests/test_model_contract.py",
    "tests/test_loading.py",
    "tests/test_readers.py",
    "tests/test_read_once.py",
    "tests/test_structure.py",
    "tests/test_registry.py",
    "tests/test_cli.py",
    "tests/test_classify.py",
    "tests/test_image_text.py",
    "tests/test_dense_presets.py",
    "tests/test_detection.py",
    "tests/test_preset_export.py",
    "tests/test_training_presets.py",
    "tests/test_inspection.py",
)


def backend_env(backend, optimize_xla=False, environ=None, threads=None, cache_dir=None):
    """The environment a backend's test run gets (see the module docstring).

    `threads`: OpenMP threads per test process, or None to leave it unset.
    `cache_dir`: the folder of jax's persistent compilation cache, or None.
    """
    env = dict(os.environ if environ is None else environ, KERAS_BACKEND=backend)
    if backend == "jax" and cache_dir is not None and "JAX_COMPILATION_CACHE_DIR" not in env:
        env["JAX_COMPILATION_CACHE_DIR"] = cache_dir
        env["JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS"] = "0"
        env["JAX_PERSISTENT_CACHE_MIN_ENTRY_SIZE_BYTES"] = "0"
    if backend == "jax":
        for name, value in JAX_TEST_ENV:
            env.setdefault(name, value)
    if threads is not None and "OMP_NUM_THREADS" not in env:
        env["OMP_NUM_THREADS"] = str(threads)
    if backend in XLA_TEST_FLAGS and not optimize_xla:
        flags = env.get("XLA_FLAGS", "")
        added = [f"--{option}={value}" for option, value in XLA_TEST_FLAGS[backend] if option not in flags]
        env["XLA_FLAGS"] = " ".join([flags, *added]).strip()
    return env


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--backends",
        default=",".join(BACKENDS),
        help="comma-separated Keras backends to test (default: all three)",
    )
    parser.add_argument(
        "--workers",
        type=int,
        default=min(os.cpu_count() or 1, 4),
        help="pytest-xdist worker processes per backend (default: CPU cores, "
        "at most 4; 1 runs in a single process)",
    )
    parser.add_argument(
        "--xla-optimize",
        action="store_true",
        help="compile XLA's programs (jax, tensorflow) with XLA's default options "
        "(LLVM's optimisations, the fusion emitters), as a user's run does (slower to compile)",
    )
    parser.add_argument(
        "--quick",
        action="store_true",
        help="run the quick tier (QUICK's files) on one backend: torch unless --backends names one",
    )
    args, pytest_args = parser.parse_known_args(argv)
    backends = args.backends.split(",")
    if args.quick:
        if args.backends == parser.get_default("backends"):
            backends = ["torch"]
        pytest_args = [*QUICK, *pytest_args]
    if args.workers < 1:
        parser.error(f"--workers must be at least 1, got {args.workers}")
    options = ["-q", "-rs"]
    threads = None
    if args.workers > 1 and importlib.util.find_spec("xdist") is not None:
        # Whole files per worker: module-scoped fixtures are built once. The
        # files go out in collection order, longest first (tests/conftest.py:
        # LONG_FILES), not pytest-xdist's order by number of tests.
        options += ["-n", str(args.workers), "--dist", "loadfile", "--no-loadscope-reorder"]
        threads = max(1, (os.cpu_count() or 1) // args.workers)
    totals = {"passed": 0, "failed": 0, "skipped": 0, "errors": 0}
    failed_backends = []
    for backend in backends:
        print(f"\n===== KERAS_BACKEND={backend} =====", flush=True)
        start = time.time()
        with tempfile.TemporaryDirectory(prefix=f"keras_vit_{backend}_cache_") as cache_dir:
            env = backend_env(backend, args.xla_optimize, threads=threads, cache_dir=cache_dir)
            proc = subprocess.run(
                [sys.executable, "-m", "pytest", *options, *pytest_args],
                env=env,
                stdout=subprocess.PIPE,
                stderr=subprocess.STDOUT,
                text=True,
            )
        sys.stdout.write(proc.stdout)
        for key, count in summary_counts(proc.stdout).items():
            totals[key] += count
        print(f"[{backend}] exit code {proc.returncode} in {time.time() - start:.0f}s")
        if proc.returncode != 0:
            failed_backends.append(backend)
    failed = totals["failed"] + totals["errors"]
    if failed_backends and not failed:
        failed = len(failed_backends)
    print(
        f"\nbackends with failures: {', '.join(failed_backends) or 'none'}"
        f"\ntotal: {totals['passed']} passed, {failed} failed, "
        f"{totals['skipped']} skipped"
    )
    return 1 if failed_backends else 0


if __name__ == "__main__":
    sys.exit(main())
