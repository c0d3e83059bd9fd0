"""`keras-vit-benchmark --preset startup`: the first result, cold.

Each measured command runs in a fresh interpreter, one after another, and
is timed from its start to its exit (wall time, and the CPU time of its
user and system modes, steadier on a machine shared with other jobs), with
its peak resident memory (its `VmHWM`, read while it runs):

- `import keras` and `import keras_vit` on each backend (`KERAS_BACKEND`);
- `keras-vit depth CKPT IMAGE` and `keras-vit classify CKPT IMAGE` on each
  backend, beside transformers' `pipeline("depth-estimation")` and
  `pipeline("image-classification")` on the same checkpoint folder, one
  image each: the whole command, from the interpreter's start to its
  result on disk or on the screen.

The checkpoints are made at random by transformers' own classes and saved
with `save_pretrained` with their image processors, in a temporary folder:
Depth Anything V2 Small's sizes (`benchmark_tasks.CONFIGS["DA2-S"]`) for
depth and ViT-S/16 at 224 px for classification (`--small` off: tiny
sizes, for a check that everything runs). Rounds are interleaved
(`--rounds`); each command keeps its fastest round and that round's memory.

Example:

>>> ratio_rows({("import", "keras_vit", "torch"): {"wall_s": 6.0, "cpu_s": 3.0},
...             ("import", "keras", "torch"): {"wall_s": 5.0, "cpu_s": 3.0}})
[('import keras_vit / import keras', 'torch', 1.2, 1.0)]
"""

import json
import os
import pathlib
import subprocess
import sys
import tempfile
import time

HERE = pathlib.Path(__file__).resolve().parent
BACKENDS = ("torch", "jax", "tensorflow")
# transformers' pipeline of each task command.
PIPELINES = {"depth": "depth-estimation", "classify": "image-classification"}
# Runs one transformers pipeline on one image, as a user's script would:
# argv is task, checkpoint folder, image, output folder.
HF_SCRIPT = """
import sys
from transformers import pipeline
task, folder, image, out = sys.argv[1:]
result = pipeline(task, model=folder, device="cpu")(image)
if task == "depth-estimation":
    result["depth"].save(out + "/depth.png")
else:
    print(result[0]["label"], round(result[0]["score"], 4))
"""
# `keras-vit ARGS...` from this folder's front end (the installed
# `keras_vit_tools` may be another checkout's): argv is this folder, then ARGS.
FRONT_END = """
import importlib.util, sys
folder = sys.argv.pop(1)
spec = importlib.util.spec_from_file_location("keras_vit_tools", folder + "/__init__.py",
                                              submodule_search_locations=[folder])
sys.modules["keras_vit_tools"] = module = importlib.util.module_from_spec(spec)
spec.loader.exec_module(module)
from keras_vit_tools.commands import keras_vit
sys.exit(keras_vit())
"""
VIT_S = dict(hidden_size=384, num_hidden_layers=12, num_attention_heads=6, intermediate_size=1536, image_size=224,
             patch_size=16, num_labels=1000)
VIT_TINY = dict(hidden_size=16, num_hidden_layers=2, num_attention_heads=2, intermediate_size=32, image_size=32,
                patch_size=8, num_labels=10)


def write_checkpoints(folder, small=True):
    """Writes `depth/`, `classify/` and `image.png` under `folder`; returns their paths.

    Args:
        folder: a `pathlib.Path`, existing.
        small: Depth Anything V2 Small and ViT-S/16 sizes (else tiny ones).
    """
    import numpy as np
    import torch
    import transformers
    from PIL import Image

    if __package__:
        from .benchmark_tasks import CONFIGS  # the dense preset's sizes
    else:
        from benchmark_tasks import CONFIGS

    torch.manual_seed(0)
    _, depth_args = CONFIGS["DA2-S" if small else "DA2-tiny"]
    depth = transformers.DepthAnythingForDepthEstimation(transformers.DepthAnythingConfig(**depth_args)).eval()
    depth.save_pretrained(folder / "depth")
    # Depth Anything's processor: the shorter side to 518 (a multiple of the patch), aspect kept.
    side = 518 if small else 28
    transformers.DPTImageProcessor(
        size={"height": side, "width": side}, keep_aspect_ratio=True, ensure_multiple_of=14 if small else 7,
        do_pad=False, image_mean=[0.485, 0.456, 0.406], image_std=[0.229, 0.224, 0.225],
    ).save_pretrained(folder / "depth")
    vit_args = VIT_S if small else VIT_TINY
    config = transformers.ViTConfig(**vit_args, id2label={i: f"class {i}" for i in range(vit_args["num_labels"])})
    transformers.ViTForImageClassification(config).eval().save_pretrained(folder / "classify")
    size = vit_args["image_size"]
    transformers.ViTImageProcessor(size={"height": size, "width": size}).save_pretrained(folder / "classify")
    pixels = np.random.default_rng(0).integers(0, 256, (480, 640, 3), dtype=np.uint8)
    Image.fromarray(pixels).save(folder / "image.png")
    return folder / "depth", folder / "classify", folder / "image.png"


def commands(folder, depth, classify, image, backends=BACKENDS):
    """The measured commands: {(what, system, backend): (argv, environment additions)}."""
    python = sys.executable
    out = str(folder / "out")
    cases = {}
    for backend in backends:
        env = {"KERAS_BACKEND": backend}
        cases[("import", "keras", backend)] = ([python, "-c", "import keras"], env)
        cases[("import", "keras_vit", backend)] = ([python, "-c", "import keras_vit"], env)
        front = [python, "-c", FRONT_END, str(HERE)]
        cases[("depth", "keras_vit", backend)] = ([*front, "depth", str(depth), str(image), "--out", out], env)
        cases[("classify", "keras_vit", backend)] = ([*front, "classify", str(classify), str(image)], env)
    for what, task in PIPELINES.items():
        checkpoint = depth if what == "depth" else classify
        cases[(what, "transformers", "torch")] = ([python, "-c", HF_SCRIPT, task, str(checkpoint), str(image), out], {})
    return cases


def _high_water_mib(pid):
    """The process's peak resident memory so far (`VmHWM`), in MiB, or None where unreadable."""
    try:
        with open(f"/proc/{pid}/status") as status:
            for line in status:
                if line.startswith("VmHWM:"):
                    return int(line.split()[1]) / 1024
    except OSError:
        pass
    return None


def measure(argv, extra_env, timeout):
    """Runs `argv` in a fresh process: its wall and CPU time and peak RSS (MiB), or why it failed.

    The peak is the kernel's high-water mark of the command's own memory
    (`VmHWM`, read while it runs); the child's `ru_maxrss` would also count
    the parent's memory at the fork, which the kernel records at the exec.
    """
    env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="3", PYTHONPATH=os.pathsep.join(
        p for p in (str(HERE.parent), os.environ.get("PYTHONPATH")) if p), **extra_env)
    peak = 0.0
    with tempfile.TemporaryFile() as log:
        start = time.perf_counter()
        process = subprocess.Popen(argv, env=env, stdout=log, stderr=subprocess.STDOUT)
        while True:
            high = _high_water_mib(process.pid)
            pid, status, usage = os.wait4(process.pid, os.WNOHANG)
            if pid:
                break
            peak = max(peak, high or 0.0)
            if time.perf_counter() - start > timeout:
                process.kill()
                os.wait4(process.pid, 0)
                process.returncode = -9
                return {"status": "error", "reason": f"timed out after {timeout} s"}
            time.sleep(0.002)
        wall = time.perf_counter() - start
        process.returncode = os.waitstatus_to_exitcode(status)
        if process.returncode != 0:
            log.seek(0)
            tail = log.read().decode(errors="replace").strip().splitlines()[-3:]
            return {"status": "error", "reason": f"exit code {process.returncode}: {' | '.join(tail)}"}
    return {"status": "ok", "wall_s": wall, "cpu_s": usage.ru_utime + usage.ru_stime,
            "peak_rss_mib": peak or usage.ru_maxrss / 1024}


def ratio_rows(rows):
    """The ratios the targets are stated in, per backend: (name, backend, wall ratio, CPU ratio)."""
    out = []
    for (what, system, backend), row in sorted(rows.items()):
        if system != "keras_vit" or row.get("status", "ok") != "ok":
            continue
        if what == "import":
            base, name = rows.get(("import", "keras", backend)), "import keras_vit / import keras"
        else:
            base, name = rows.get((what, "transformers", "torch")), f"keras-vit {what} / transformers pipeline"
        if base and base.get("status", "ok") == "ok":
            out.append((name, backend, round(row["wall_s"] / base["wall_s"], 2),
                        round(row["cpu_s"] / base["cpu_s"], 2)))
    return out


def table(rows):
    """The results as a Markdown table, ratios after it."""
    lines = ["| command | system | backend | wall s | CPU s | peak RSS MiB |", "|---|---|---|---:|---:|---:|"]
    for (what, system, backend), row in rows.items():
        if row["status"] == "ok":
            lines.append(f"| {what} | {system} | {backend} | {row['wall_s']:.2f} | {row['cpu_s']:.2f} "
                         f"| {row['peak_rss_mib']:.0f} |")
        else:
            lines.append(f"| {what} | {system} | {backend} | {row['status']}: {row['reason'][:80]} | | |")
    lines += ["", "| ratio | backend | wall time | CPU time |", "|---|---|---:|---:|"]
    lines += [f"| {name} | {backend} | {wall:.2f} | {cpu:.2f} |" for name, backend, wall, cpu in ratio_rows(rows)]
    return "\n".join(lines)


def report_text(report, name):
    """The report as Markdown: when, what, the machine, the table; `name` is the JSON file's name."""
    machine = report.get("machine") or {}
    versions = ", ".join(f"{k} {v}" for k, v in machine.get("versions", {}).items() if v)
    rows = {(r["command"], r["system"], r["backend"]): r for r in report["results"]}
    return "\n".join([
        "# The first result, cold", "", f"All figures as JSON: [{name}]({name}).", "",
        f"- Date: {report.get('date')}; command: `{report.get('command')}`",
        f"- CPU: {machine.get('cpu')}, {machine.get('cpu_id', '')} ({machine.get('cores_usable')} cores; "
        f"flags: {' '.join(machine.get('flags', []))})",
        f"- Versions: {versions}",
        f"- Checkpoints: {'Depth Anything V2 Small and ViT-S/16 sizes' if report.get('small') else 'tiny'}, "
        f"random; {report.get('rounds')} interleaved rounds, each command's fastest kept.",
        "", table(rows), ""])


def run(rounds=3, small=True, backends=BACKENDS, timeout=600, machine=None, output=None, command=None):
    """Measures every command `rounds` times, interleaved; prints and returns the report."""
    import datetime

    date = datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds")
    with tempfile.TemporaryDirectory() as tmp:
        folder = pathlib.Path(tmp)
        (folder / "out").mkdir()
        print("writing the checkpoints ...", flush=True)
        # In a process of its own: torch and transformers stay out of this one.
        subprocess.run([sys.executable, __file__, str(folder), "small" if small else "tiny"], check=True,
                       env=dict(os.environ, PYTHONPATH=os.pathsep.join(
                           p for p in (str(HERE), os.environ.get("PYTHONPATH")) if p)))
        paths = folder / "depth", folder / "classify", folder / "image.png"
        cases = commands(folder, *paths, backends=backends)
        rows = {}
        for round_ in range(rounds):
            for key, (argv, env) in cases.items():
                result = measure(argv, env, timeout)
                old = rows.get(key)
                if old is None or old["status"] != "ok" or (result["status"] == "ok" and
                                                            result["wall_s"] < old["wall_s"]):
                    rows[key] = result
                text = (f"{result['wall_s']:.2f} s  {result['peak_rss_mib']:.0f} MiB" if result["status"] == "ok"
                        else f"{result['status']}: {result['reason'][:100]}")
                print(f"round {round_ + 1}/{rounds}  {' '.join(key):40s} {text}", flush=True)
    report = {"date": date, "command": command, "machine": machine, "rounds": rounds, "small": small,
              "results": [dict(command=k[0], system=k[1], backend=k[2], **v) for k, v in rows.items()],
              "ratios": [dict(ratio=n, backend=b, wall=w, cpu=c) for n, b, w, c in ratio_rows(rows)]}
    text = report_text(report, f"{pathlib.Path(output or 'startup').name}.json")
    print("\n" + text)
    if output:
        pathlib.Path(f"{output}.md").write_text(text)
        pathlib.Path(f"{output}.json").write_text(json.dumps(report, indent=1) + "\n")
    return report


if __name__ == "__main__":  # the checkpoints, written by `run` in a process of their own
    write_checkpoints(pathlib.Path(sys.argv[1]), small=sys.argv[2] == "small")
