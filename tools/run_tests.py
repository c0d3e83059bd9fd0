"""Runs the test suite once per Keras backend and fails if any run fails.

Usage: python tools/run_tests.py [--backends jax,tensorflow,torch] [--workers N] [--quick]
                                 [--coverage] [--placement] [pytest args]

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

Each job prints its 15 slowest tests (pytest's `--durations=15`, unless
the arguments name `--durations`), and the run starts and ends with the
CPU's model and flags and a float32 matrix-product probe (NumPy, GFLOP/s):
a time means something only beside the machine that took it.

`--coverage` runs every job under coverage.py (branches measured, the
processes the tests start included) and ends with keras_vit's line and
branch coverage over the jobs combined; the combined data stays in
`.coverage` at the checkout's root for `coverage report -m` or
`coverage html`.

`--placement` collects the suite under each backend, as its job selects
it and with every case (`KERAS_VIT_TEST_ALL_CASES=1`), and lists the tests
that no job runs (a spread case that only one job collects, say); it runs
no test, and exits 1 when it finds one.

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
import json
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


# The quick tier, on one backend: the layers and their contracts, loading,
# the package's structure (which imports every module on its own) and the
# command line, and a file of each task, of zero-shot with its text tower,
# of presets written out, of training presets and of inspection (the model
# contract, a minute on its own, is the whole suite's).
QUICK = (
    "tests/test_layers.py",
    "tests/test_layer_contracts.py",
    "tests/test_loading.py",
    "tests/test_readers.py",
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


# The slowest tests each job lists.
DURATIONS = 15

# coverage.py's settings for `--coverage`: keras_vit's lines and branches,
# a data file per process (the workers and the processes tests start),
# combined at the end.
COVERAGE_RC = """\
[run]
branch = True
parallel = True
source_pkgs = keras_vit
data_file = {data_file}
patch = subprocess
"""

# The CPU flags a time depends on most.
CPU_FLAGS = ("avx2", "fma", "avx512f", "avx512_bf16", "avx512_vnni", "amx_bf16", "amx_tile")


def cpu_description(cpuinfo=None):
    """The CPU's model, family and the flags of `CPU_FLAGS` it has, in one line.

    `cpuinfo`: the text of /proc/cpuinfo (read when None; "unknown CPU"
    where there is none).
    """
    if cpuinfo is None:
        try:
            with open("/proc/cpuinfo", encoding="utf-8") as f:
                cpuinfo = f.read()
        except OSError:
            return "unknown CPU"
    fields = {}
    for line in cpuinfo.splitlines():
        key, _, value = line.partition(":")
        fields.setdefault(key.strip(), value.strip())
    flags = set(fields.get("flags", "").split())
    cores = cpuinfo.count("processor\t:") or os.cpu_count()
    return (f"{fields.get('model name', 'unknown CPU')} (family {fields.get('cpu family', '?')} "
            f"model {fields.get('model', '?')}, {cores} cores; flags: "
            f"{' '.join(f for f in CPU_FLAGS if f in flags) or 'none of ' + ' '.join(CPU_FLAGS)})")


def matmul_probe(n=2048, reps=5):
    """GFLOP/s of NumPy's float32 product of two n x n matrices (median of `reps`)."""
    import numpy as np

    a = np.random.default_rng(0).random((n, n), dtype=np.float32)
    a @ a
    times = []
    for _ in range(reps):
        start = time.perf_counter()
        a @ a
        times.append(time.perf_counter() - start)
    return 2 * n**3 / sorted(times)[reps // 2] / 1e9


def machine_line():
    return f"CPU: {cpu_description()}; NumPy float32 matmul {matmul_probe():.0f} GFLOP/s"


def coverage_totals(report):
    """`(line %, branch %, text)` from coverage.py's JSON report (a dict)."""
    totals = report["totals"]
    lines = 100 * totals["covered_lines"] / max(totals["num_statements"], 1)
    branches = 100 * totals["covered_branches"] / max(totals["num_branches"], 1)
    text = (f"keras_vit coverage, the jobs combined: lines {lines:.2f} % "
            f"({totals['covered_lines']} of {totals['num_statements']}), branches {branches:.2f} % "
            f"({totals['covered_branches']} of {totals['num_branches']}), "
            f"both {totals['percent_covered']:.2f} %")
    return lines, branches, text


def combine_coverage(folder, rcfile, data_file):
    """Combines the jobs' data files of `folder` into `data_file`; returns `coverage_totals`."""
    run = lambda command, *args: subprocess.run(  # noqa: E731
        [sys.executable, "-m", "coverage", command, f"--rcfile={rcfile}", f"--data-file={data_file}", *args],
        check=True, capture_output=True, text=True)
    if os.path.exists(data_file):
        os.remove(data_file)  # an earlier run's
    run("combine", "--quiet", folder)
    report = os.path.join(folder, "coverage.json")
    run("json", "--quiet", "-o", report)
    with open(report, encoding="utf-8") as f:
        return coverage_totals(json.load(f))


# The environment variable naming a folder that every job of a run shares,
# for the files a test writes the same way under every backend.
SHARED_DIR = "KERAS_VIT_TEST_SHARED_DIR"


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


def parse_args(argv):
    """`(args, backends, pytest arguments)` of the command line."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--backends", default=",".join(BACKENDS),
                        help="comma-separated Keras backends to test (default: all three)")
    parser.add_argument("--workers", type=int, default=min(os.cpu_count() or 1, 4),
                        help="pytest-xdist worker processes per backend (default: CPU cores, "
                        "at most 4; 1 runs in a single process)")
    parser.add_argument("--xla-optimize", action="store_true",
                        help="compile XLA's programs (jax, tensorflow) with XLA's default options "
                        "(LLVM's optimisations, the fusion emitters), as a user's run does (slower to compile)")
    parser.add_argument("--quick", action="store_true",
                        help="run the quick tier (QUICK's files) on one backend: torch unless --backends names one")
    parser.add_argument("--placement", action="store_true",
                        help="run no test: list the tests that no backend's job runs (exit 1 if any)")
    parser.add_argument("--coverage", action="store_true",
                        help="measure keras_vit's line and branch coverage (coverage.py) over the jobs "
                        "combined; the data stays in .coverage")
    args, pytest_args = parser.parse_known_args(argv)
    backends = args.backends.split(",")
    unknown = [b for b in backends if b not in BACKENDS]
    if unknown:
        parser.error(f"--backends takes {', '.join(BACKENDS)}; got {', '.join(unknown)}")
    if args.quick:
        if args.backends == parser.get_default("backends"):
            backends = ["torch"]
        pytest_args = [*QUICK, *pytest_args]
    if args.workers < 1:
        parser.error(f"--workers must be at least 1, got {args.workers}")
    if args.coverage and importlib.util.find_spec("coverage") is None:
        parser.error("--coverage needs coverage.py: pip install -e \".[test]\"")
    return args, backends, pytest_args


def pytest_options(workers, pytest_args):
    """`(pytest's options, OpenMP threads per worker or None)`."""
    options = ["-q", "-rfEs"]
    if not any(a.startswith("--durations") for a in pytest_args):
        options.append(f"--durations={DURATIONS}")
    if workers > 1 and importlib.util.find_spec("xdist") is not None:
        # Whole files per worker: module-scoped fixtures are built once. The
        # files go out in collection order, longest first (tests/conftest.py:
        # LONG_FILES), not pytest-xdist's order by number of tests.
        options += ["-n", str(workers), "--dist", "loadfile", "--no-loadscope-reorder"]
        return options, max(1, (os.cpu_count() or 1) // workers)
    return options, None


def collected(backend, all_cases, pytest_args=()):
    """The test ids pytest collects and keeps under `backend` (every spread
    case in every job where `all_cases`)."""
    env = dict(os.environ, KERAS_BACKEND=backend)
    if all_cases:
        env["KERAS_VIT_TEST_ALL_CASES"] = "1"
    proc = subprocess.run([sys.executable, "-m", "pytest", "--collect-only", "-q", "-p", "no:cacheprovider",
                           *pytest_args], env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    if proc.returncode not in (0, 5):  # 5: nothing collected
        raise RuntimeError(f"collecting the {backend} job failed:\n{proc.stdout[-3000:]}")
    return {line.strip() for line in proc.stdout.splitlines() if "::" in line and not line.startswith(" ")}


def unplaced(selected, every_case):
    """The ids of `every_case` (`{backend: ids}`) that no job's `selected`
    (`{backend: ids}`) holds, sorted.

    Example:

    >>> unplaced({"jax": {"a"}, "torch": {"b"}}, {"jax": {"a", "c"}, "torch": {"b"}})
    ['c']
    """
    ran = set().union(*selected.values())
    return sorted(set().union(*every_case.values()) - ran)


def check_placement(backends, pytest_args):
    """Prints the tests no job runs; returns the exit code (1 if any)."""
    selected = {b: collected(b, False, pytest_args) for b in backends}
    every_case = {b: collected(b, True, pytest_args) for b in backends}
    missing = unplaced(selected, every_case)
    for test in missing:
        print(f"no job runs {test}")
    print(f"{sum(map(len, selected.values()))} tests over {len(backends)} jobs; {len(missing)} that no job runs")
    return 1 if missing else 0


def run_job(backend, command, args, threads, shared_dir=None):
    """Runs one backend's job; returns `(exit code, its output)` and prints the output.

    `shared_dir`: the run's folder of backend-free test files
    (`KERAS_VIT_TEST_SHARED_DIR`, `conftest.shared_files`), or None.
    """
    print(f"\n===== KERAS_BACKEND={backend} =====", flush=True)
    with tempfile.TemporaryDirectory(prefix=f"keras_vit_{backend}_cache_") as cache_dir:
        env = backend_env(backend, args.xla_optimize, threads=threads, cache_dir=cache_dir)
        if shared_dir is not None:
            env.setdefault(SHARED_DIR, shared_dir)
        proc = subprocess.run(command, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    sys.stdout.write(proc.stdout)
    return proc.returncode, proc.stdout


def main(argv=None):
    args, backends, pytest_args = parse_args(argv)
    if args.placement:
        return check_placement(backends, pytest_args)
    options, threads = pytest_options(args.workers, pytest_args)
    print(machine_line(), flush=True)
    totals = {"passed": 0, "failed": 0, "skipped": 0, "errors": 0}
    failed_backends, times, coverage_text = [], {}, None
    with (tempfile.TemporaryDirectory(prefix="keras_vit_coverage_") as coverage_dir,
          tempfile.TemporaryDirectory(prefix="keras_vit_shared_") as shared_dir):
        runner = [sys.executable, "-m", "pytest"]
        rcfile = os.path.join(coverage_dir, "coveragerc")
        if args.coverage:
            with open(rcfile, "w", encoding="utf-8") as f:
                f.write(COVERAGE_RC.format(data_file=os.path.join(coverage_dir, ".coverage")))
            runner = [sys.executable, "-m", "coverage", "run", f"--rcfile={rcfile}", "-m", "pytest"]
        for backend in backends:
            start = time.time()
            code, output = run_job(backend, [*runner, *options, *pytest_args], args, threads, shared_dir)
            for key, count in summary_counts(output).items():
                totals[key] += count
            times[backend] = time.time() - start
            print(f"[{backend}] exit code {code} in {times[backend]:.0f}s")
            if code != 0:
                failed_backends.append(backend)
        if args.coverage:
            coverage_text = combine_coverage(coverage_dir, rcfile, os.path.abspath(".coverage"))[2]
    failed = totals["failed"] + totals["errors"]
    if failed_backends and not failed:
        failed = len(failed_backends)
    print(
        f"\nbackends with failures: {', '.join(failed_backends) or 'none'}"
        f"\ntotal: {totals['passed']} passed, {failed} failed, "
        f"{totals['skipped']} skipped in {sum(times.values()):.0f}s "
        f"({', '.join(f'{b} {t:.0f}s' for b, t in times.items())})"
    )
    if coverage_text:
        print(coverage_text)
    print(machine_line())
    return 1 if failed_backends else 0


if __name__ == "__main__":
    sys.exit(main())
