"""Runs the test suite once per Keras backend and fails if any run fails.

Usage: python tools/run_tests.py [--backends jax,tensorflow,torch] [pytest args]
"""

import argparse
import os
import re
import subprocess
import sys
import time

BACKENDS = ("jax", "tensorflow", "torch")


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--backends",
        default=",".join(BACKENDS),
        help="comma-separated Keras backends to test (default: all three)",
    )
    args, pytest_args = parser.parse_known_args(argv)
    totals = {"passed": 0, "failed": 0, "skipped": 0, "errors": 0}
    failed_backends = []
    for backend in args.backends.split(","):
        print(f"\n===== KERAS_BACKEND={backend} =====", flush=True)
        env = dict(os.environ, KERAS_BACKEND=backend)
        start = time.time()
        proc = subprocess.run(
            [sys.executable, "-m", "pytest", "-q", *pytest_args],
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
        )
        sys.stdout.write(proc.stdout)
        last = proc.stdout.strip().splitlines()[-1] if proc.stdout.strip() else ""
        for key, pattern in (
            ("passed", r"(\d+) passed"),
            ("failed", r"(\d+) failed"),
            ("skipped", r"(\d+) skipped"),
            ("errors", r"(\d+) errors?"),
        ):
            match = re.search(pattern, last)
            totals[key] += int(match.group(1)) if match else 0
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
