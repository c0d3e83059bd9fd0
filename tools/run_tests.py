"""Runs the test suite once per Keras backend and fails if any run fails.

Usage: python tools/run_tests.py [--backends jax,tensorflow,torch] [--workers N] [pytest args]

Each backend's run uses pytest-xdist with `--workers` processes (default: one
per CPU core, at most 4) when it is installed, and lists the reason of every
skipped test.

The jax run compiles XLA's CPU code without LLVM's optimisations
(`XLA_FLAGS=--xla_backend_optimization_level=0`, unless `XLA_FLAGS` already
sets the level or `--xla-optimize` is given). The tests run thousands of
small programs once each, so compiling is a large part of their time: this
took a fifth off the small-model tests and about a sixth off the whole job
(the few tests on full-size images run slower). Matrix products call the
same library kernels either way, and every numerical check keeps its
tolerance. The tensorflow job, which compiles far less, ran no faster with
it, so it keeps the default.

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


XLA_TEST_FLAG = "--xla_backend_optimization_level=0"


def backend_env(backend, optimize_xla=False, environ=None, threads=None):
    """The environment a backend's test run gets (see the module docstring).

    `threads`: OpenMP threads per test process, or None to leave it unset.
    """
    env = dict(os.environ if environ is None else environ, KERAS_BACKEND=backend)
    if threads is not None and "OMP_NUM_THREADS" not in env:
        env["OMP_NUM_THREADS"] = str(threads)
    flags = env.get("XLA_FLAGS", "")
    if backend == "jax" and not optimize_xla and "xla_backend_optimization_level" not in flags:
        env["XLA_FLAGS"] = f"{flags} {XLA_TEST_FLAG}".strip()
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
        help="compile jax's XLA programs with LLVM's optimisations, "
        "as a user's run does (slower to compile)",
    )
    args, pytest_args = parser.parse_known_args(argv)
    if args.workers < 1:
        parser.error(f"--workers must be at least 1, got {args.workers}")
    options = ["-q", "-rs"]
    threads = None
    if args.workers > 1 and importlib.util.find_spec("xdist") is not None:
        # Whole files per worker: module-scoped fixtures are built once.
        options += ["-n", str(args.workers), "--dist", "loadfile"]
        threads = max(1, (os.cpu_count() or 1) // args.workers)
    totals = {"passed": 0, "failed": 0, "skipped": 0, "errors": 0}
    failed_backends = []
    for backend in args.backends.split(","):
        print(f"\n===== KERAS_BACKEND={backend} =====", flush=True)
        env = backend_env(backend, args.xla_optimize, threads=threads)
        start = time.time()
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
