"""Starts N processes of one training command on this machine, as N hosts would run it.

Usage: python tools/launch_local.py -n 2 [--timeout 600] [--devices-per-process 2] -- \\
           python examples/finetune.py --smoke --distribution data_parallel

Each process gets a free coordinator port on 127.0.0.1 and its place in the
environment (`KERAS_VIT_COORDINATOR`, `KERAS_VIT_NUM_PROCESSES`,
`KERAS_VIT_PROCESS_ID`, read by `keras_vit.training.multiprocess.initialize`
and so by `examples/finetune.py`); `{process_id}`, `{num_processes}` and
`{coordinator}` in the command are replaced too. Output lines are prefixed
with the process id. When one process fails (or the timeout passes), the
launcher stops the others it started, by their process ids (SIGTERM, then
SIGKILL after a grace period), and exits with the first failure's code
(124 for the timeout).

With tensorflow, worker i listens on the coordinator's port + i, so N
consecutive free ports are chosen. For jax on a CPU, `--devices-per-process`
sets `XLA_FLAGS=--xla_force_host_platform_device_count` for each process.
"""

import argparse
import os
import signal
import socket
import subprocess
import sys
import threading
import time


def _port_free(port, host="127.0.0.1"):
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
        try:
            probe.bind((host, port))
        except OSError:
            return False
    return True


def free_ports(count, host="127.0.0.1", attempts=50):
    """The first of `count` consecutive TCP ports free on `host` now."""
    for _ in range(attempts):
        with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
            probe.bind((host, 0))
            first = probe.getsockname()[1]
        if first + count <= 65535 and all(_port_free(first + i, host) for i in range(count)):
            return first
    raise RuntimeError(f"No {count} consecutive free ports found on {host}.")


def process_environment(process_id, num_processes, coordinator, devices_per_process=None, base=None):
    """The environment of process `process_id`."""
    env = dict(os.environ if base is None else base)
    env.update(
        KERAS_VIT_COORDINATOR=coordinator,
        KERAS_VIT_NUM_PROCESSES=str(num_processes),
        KERAS_VIT_PROCESS_ID=str(process_id),
        PYTHONUNBUFFERED="1",
    )
    if devices_per_process:
        flags = [f for f in env.get("XLA_FLAGS", "").split() if "device_count" not in f]
        flags.append(f"--xla_force_host_platform_device_count={devices_per_process}")
        env["XLA_FLAGS"] = " ".join(flags)
    return env


def _fill(part, **values):
    for key, value in values.items():
        part = part.replace("{" + key + "}", str(value))
    return part


def _relay(process_id, stream, out):
    for line in iter(stream.readline, ""):
        out.write(f"[{process_id}] {line}")
        out.flush()


def _stop(processes, grace):
    """SIGTERM then SIGKILL to the process groups of our children still running."""
    for sig, wait in ((signal.SIGTERM, grace), (signal.SIGKILL, 5)):
        running = [p for p in processes if p.poll() is None]
        for p in running:
            try:
                os.killpg(p.pid, sig)  # each child leads its own session
            except ProcessLookupError:
                pass
        deadline = time.time() + wait
        while running and time.time() < deadline:
            running = [p for p in running if p.poll() is None]
            time.sleep(0.1)


def launch(command, num_processes, timeout=600, devices_per_process=None, grace=10, out=None):
    """Runs `command` in `num_processes` processes; returns their exit codes.

    Args:
        command: list of str, the command line (placeholders allowed).
        num_processes: int.
        timeout: seconds for the whole run.
        devices_per_process: optional jax CPU device count per process.
        grace: seconds between SIGTERM and SIGKILL when stopping.
        out: text stream for the prefixed output, default stdout.

    Returns:
        `(first_failure, codes)`: the first non-zero exit code (124 on
        timeout, 0 when all succeeded) and each process's exit code (None
        for one that was stopped before it ended).
    """
    out = out or sys.stdout
    coordinator = f"127.0.0.1:{free_ports(num_processes)}"
    place = dict(num_processes=num_processes, coordinator=coordinator)
    processes, relays = [], []
    for i in range(num_processes):
        argv = [_fill(part, process_id=i, **place) for part in command]
        env = process_environment(i, num_processes, coordinator, devices_per_process)
        p = subprocess.Popen(
            argv, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
            text=True, start_new_session=True,
        )
        processes.append(p)
        relay = threading.Thread(target=_relay, args=(i, p.stdout, out), daemon=True)
        relay.start()
        relays.append(relay)
    deadline, failure, ended = time.time() + timeout, 0, {}
    try:
        while len(ended) < num_processes:
            for i, p in enumerate(processes):
                if i not in ended and p.poll() is not None:
                    ended[i] = p.returncode
                    if p.returncode and not failure:
                        failure = p.returncode
                        out.write(f"[launcher] process {i} exited with {p.returncode}; stopping the others\n")
            if failure:
                break
            if time.time() > deadline:
                failure = 124
                out.write(f"[launcher] timeout after {timeout}s; stopping all processes\n")
                break
            time.sleep(0.2)
    finally:
        _stop(processes, grace)
        for relay in relays:
            relay.join(timeout=5)
    return failure, [ended.get(i) for i in range(num_processes)]


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("-n", "--num-processes", type=int, required=True)
    parser.add_argument("--timeout", type=float, default=600, help="seconds for the whole run")
    parser.add_argument("--devices-per-process", type=int, default=None, help="jax CPU devices per process")
    parser.add_argument("--grace", type=float, default=10, help="seconds between SIGTERM and SIGKILL")
    parser.add_argument("command", nargs=argparse.REMAINDER, help="-- then the command")
    args = parser.parse_args(argv)
    command = args.command[1:] if args.command[:1] == ["--"] else args.command
    if not command:
        parser.error("give the command after --")
    if args.num_processes < 1:
        parser.error(f"-n must be >= 1; received {args.num_processes}")
    failure, codes = launch(command, args.num_processes, args.timeout, args.devices_per_process, args.grace)
    print(f"[launcher] exit codes: {codes}", flush=True)
    return failure


if __name__ == "__main__":
    sys.exit(main())
