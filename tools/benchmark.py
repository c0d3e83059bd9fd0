"""Benchmarks keras_vit against its peers (keras-hub, HF transformers, timm).

One invocation measures every (system, workload, dtype) case in a separate
subprocess (`tools/benchmark_worker.py`), plus the machine's own matmul peak,
and writes a Markdown table and a JSON file.

Systems: `keras_vit-{jax,tensorflow,torch}`, `keras_hub-{jax,tensorflow,torch}`
(`ViTBackbone` + Dense head, random init), `hf-sdpa`, `hf-eager` (transformers
`ViTForImageClassification`, torch), `timm` (skipped when not importable).
A Keras system may end in `+compile` (`jit_compile=True`, i.e. torch.compile
on torch) or `+eager` (`jit_compile=False`); by default Keras decides
(XLA on jax and tensorflow, eager on torch). `keras_vit-BACKEND+frozen`
runs inference on the model's `for_inference()` copy.

Figures per case: images/s (median of the timed repetitions after warm-up),
time to first result (first call: tracing/compilation plus one run), peak RSS
of the subprocess, achieved GFLOP/s and its fraction of the measured matmul
peak of the same dtype (the fastest library's, and the system's own
backend's: each library's square matmul is measured in its own process).

FLOPs (2 per multiply-add), per image, forward, for patch `p`, image `HxW`,
`C` channels, `n = HW/p^2` patches, `N = n + 1` tokens, width `D`, MLP width
`M`, `L` blocks, `K` classes:

    patch embedding   n * (p^2 C) * D
    per block         4 N D^2           (query, key, value, out projections)
                      2 N^2 D           (q k^T and probabilities x v)
                      2 N D M           (the two MLP matmuls)
    head              D * K
    FLOPs = 2 * (patch embedding + L * per block + head)

which gives 35.1 GFLOP for ViT-B/16 at 224 px. A training step (forward,
backward, update) is counted as 3x the forward FLOPs. Element-wise work
(softmax, LayerNorm, GELU, AdamW) is not counted.

Usage:
    python tools/benchmark.py                    # full default run
    python tools/benchmark.py --quick            # fewer repetitions
    python tools/benchmark.py --smoke            # tiny model, seconds
    python tools/benchmark.py --preset cpu --rounds 3 --matmul-size 4096 --name cpu-avx512
        # the CPU comparison: 224/384/518 px, bfloat16, OpenVINO, training;
        # writes docs/results/cpu-avx512.md and .json, the current result
        # of that setup (a rerun overwrites them)
    python tools/benchmark.py --preset gpu --reps 20 --warmup 3 --name gpu-h100
        # the accelerator comparison (bfloat16 B/16 and L/16, then float32)
    python tools/benchmark.py --preset tasks --rounds 2 --name cpu-tasks
        # OWLv2 B/16 at 960 px, SAM ViT-B at 1024 px and SAM's decoder per
        # click beside transformers (tools/benchmark_tasks.py)
    python tools/benchmark.py --preset dense --name dense-cpu-avx512
        # Depth Anything V2 Small at 518 px beside transformers and keras-hub,
        # EoMT-S at 640 px beside transformers (tools/benchmark_tasks.py)
    python tools/benchmark.py --preset startup --rounds 3 --name startup-cpu
        # `import keras_vit` and `keras-vit depth` / `classify` on one image,
        # cold, beside transformers' pipeline (tools/benchmark_startup.py)
    python tools/benchmark.py --systems keras_vit-jax,hf-sdpa \\
        --workloads infer-b16-bs8 --dtypes float32 --output /tmp/benchmark
"""

import argparse
import datetime
import importlib.metadata
import json
import os
import pathlib
import platform
import subprocess
import sys
import time

if __package__:
    from . import benchmark_startup
    from .benchmark_report import side_by_side, write_report
else:  # `python tools/benchmark.py`: this file's folder is on the path
    import benchmark_startup
    from benchmark_report import side_by_side, write_report

HERE = pathlib.Path(__file__).resolve().parent
WORKER = HERE / "benchmark_worker.py"
# One current result per setup (machine kind and comparison), overwritten
# by a rerun: the documentation links to these names.
RESULTS = HERE.parent / "docs" / "results"

if __package__:
    from .benchmark_cases import (  # noqa: F401
        SYSTEMS, DEPLOY_SYSTEMS, DEPLOY_WORKLOADS, WORKLOADS, TASK_WORKLOADS, TASK_SMOKE_WORKLOADS,
        DENSE_WORKLOADS, DENSE_SMOKE_WORKLOADS, DEFAULT_WORKLOADS, SMOKE_WORKLOADS, GPU_WORKLOADS,
        DTYPES, ARCHS, TIMM_ARCHS, PREFIX_TOKENS, DINOV3_CONFIG, KERAS_SYSTEMS, GPU_SYSTEMS,
        PRESETS,
    )
else:
    from benchmark_cases import (  # noqa: F401
        SYSTEMS, DEPLOY_SYSTEMS, DEPLOY_WORKLOADS, WORKLOADS, TASK_WORKLOADS, TASK_SMOKE_WORKLOADS,
        DENSE_WORKLOADS, DENSE_SMOKE_WORKLOADS, DEFAULT_WORKLOADS, SMOKE_WORKLOADS, GPU_WORKLOADS,
        DTYPES, ARCHS, TIMM_ARCHS, PREFIX_TOKENS, DINOV3_CONFIG, KERAS_SYSTEMS, GPU_SYSTEMS,
        PRESETS,
    )

# Matmul peaks, one process each (`tools/benchmark_worker.py::run_peak`).
PEAK_LIBRARIES = ("torch", "tensorflow", "jax", "numpy")
PACKAGES = ("keras", "keras-hub", "jax", "jaxlib", "tensorflow", "torch",
            "transformers", "timm", "numpy")


def forward_flops(arch, image, channels=3, classes=1000):
    """FLOPs (2 per multiply-add) of one image's forward pass; see module doc."""
    patch, dim, layers, _, mlp = ARCHS[arch]
    patches = (image // patch) ** 2
    tokens = patches + PREFIX_TOKENS.get(arch, 1)
    embed = patches * patch * patch * channels * dim
    block = 4 * tokens * dim**2 + 2 * tokens**2 * dim + 2 * tokens * dim * mlp
    return 2 * (embed + layers * block + dim * classes)


def case_flops(workload):
    """A case's FLOPs, or None for a task model (not counted)."""
    kind, arch, image, _ = WORKLOADS[workload]
    if arch not in ARCHS:
        return None
    return forward_flops(arch, image) * (3 if kind == "train" else 1)


def cpu_fields(text):
    """The first processor's name, family/model/stepping, vector flags and
    bf16 units from `/proc/cpuinfo` text: CPUs of one name ("AMD EPYC" in a
    VM) differ by generation, which the family and model tell apart."""
    fields, ids = {}, {}
    for line in text.splitlines():
        key, _, value = (part.strip() for part in line.partition(":"))
        if key == "model name":
            fields["cpu"] = value
        elif key in ("cpu family", "model", "stepping"):
            ids[key.split()[-1]] = value
        elif key == "flags":
            flags = value.split()
            fields["flags"] = sorted(f for f in flags if f.startswith(("amx", "avx512", "avx2", "fma", "avx_vnni")))
            fields["bf16_units"] = [f for f in flags if f in ("avx512_bf16", "amx_bf16")]
            break
    if ids:
        fields["cpu_id"] = " ".join(f"{k} {ids[k]}" for k in ("family", "model", "stepping") if k in ids)
    return fields


def machine_info():
    info = {"platform": platform.platform(), "python": platform.python_version(),
            "cpu": platform.processor(), "cores": os.cpu_count(), "flags": []}
    try:
        info.update(cpu_fields(pathlib.Path("/proc/cpuinfo").read_text()))
    except OSError:
        pass
    if hasattr(os, "sched_getaffinity"):
        info["cores_usable"] = len(os.sched_getaffinity(0))
    info["gpus"] = gpu_names()
    versions = {}
    for name in PACKAGES:
        try:
            versions[name] = importlib.metadata.version(name)
        except importlib.metadata.PackageNotFoundError:
            versions[name] = None
    info["versions"] = versions
    return info


def gpu_names():
    """Names of the NVIDIA GPUs (nvidia-smi), [] where there are none."""
    try:
        out = subprocess.run(
            ["nvidia-smi", "--query-gpu=name,memory.total", "--format=csv,noheader"],
            capture_output=True, text=True, timeout=30,
        )
    except (OSError, subprocess.SubprocessError):
        return []
    return [line.strip() for line in out.stdout.splitlines() if line.strip()] if out.returncode == 0 else []


def skip_reason(spec):
    """Why a case does not run, read from its spec alone, or None.

    Example:

    >>> skip_reason({"system": "keras_vit-torch+frozen", "kind": "train"})
    '+frozen: keras_vit inference only'
    """
    system, kind = spec["system"], spec.get("kind")
    deployed = system.startswith(("ort-", "openvino-"))
    if kind == "train" and (deployed or system.endswith("+int8")):
        return "inference only"
    library, _, variant = system.partition("-")
    if variant.partition("+")[2] == "frozen" and (library != "keras_vit" or kind == "train"):
        return "+frozen: keras_vit inference only"  # `for_inference()` is keras_vit's, for inference
    return None


def run_case(spec, timeout):
    """Runs one case in a fresh interpreter; returns its result dict.

    A case `skip_reason` rules out is reported without starting one.
    """
    reason = skip_reason(spec)
    if reason is not None:
        return {"status": "skipped", "reason": reason, "wall_s": 0.0}
    env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="3", PYTHONUNBUFFERED="1")
    root = str(HERE.parent)
    if (HERE.parent / "keras_vit").is_dir():
        env["PYTHONPATH"] = os.pathsep.join(
            p for p in (root, env.get("PYTHONPATH")) if p
        )
    system = spec["system"]
    if system.startswith(("keras_vit", "keras_hub")):
        env["KERAS_BACKEND"] = system.split("-")[1].split("+")[0]
    elif system.endswith(("keras_vit", "keras_vit+int8", "keras_vit+bf16")):
        env["KERAS_BACKEND"] = "torch"  # the backend that exports for ONNX Runtime and OpenVINO
    start = time.perf_counter()
    try:
        proc = subprocess.run(
            [sys.executable, str(WORKER), json.dumps(spec)],
            env=env, capture_output=True, text=True, timeout=timeout,
        )
    except subprocess.TimeoutExpired:
        return {"status": "error", "reason": f"timed out after {timeout} s"}
    result = None
    for line in proc.stdout.splitlines():
        if line.startswith("RESULT "):
            result = json.loads(line[len("RESULT "):])
    if result is None:
        tail = (proc.stderr or proc.stdout).strip().splitlines()[-3:]
        result = {"status": "error",
                  "reason": f"exit code {proc.returncode}: {' | '.join(tail)}"}
    result["wall_s"] = time.perf_counter() - start
    return result


def slow_bfloat16(peak):
    """Why bfloat16 cases are not worth running here, or None.

    Without avx512_bf16 or AMX a CPU emulates bfloat16 matrix products, and
    the measured rate falls to a fraction of float32 (about 1 GFLOP/s against
    150 on a 2-core AVX2 machine).
    """
    rates = peak.get("gflops", {})
    bf16, fp32 = rates.get("torch_bfloat16"), rates.get("torch_float32")
    if bf16 is None or fp32 is None or bf16 >= 0.5 * fp32:
        return None
    return (f"no native bfloat16 matmul on this CPU ({bf16:.1f} GFLOP/s,"
            f" float32 {fp32:.0f})")


def own_peak_key(system, dtype):
    """The matmul peak a system's products run on: its backend's (`torch_bfloat16`...)."""
    if system.startswith(("keras_vit-", "keras_hub-")):
        return f"{system.split('-')[1].split('+')[0]}_{dtype}"
    if system.startswith(("hf-", "timm")):
        return f"torch_{dtype}"
    return None


# The transformers systems a dense case's outputs are compared with, in order.
REFERENCES = ("hf-sdpa", "hf-eager")
# How close two runs' output statistics must be (of the reference's mean |x|).
OUTPUT_RTOL = 1e-3


def output_check(row, reference):
    """How a dense task case's outputs (`info["outputs"]`, shapes and
    statistics) compare with a transformers case's, or None where either
    has none. Statistics are compared only for systems that compute with
    transformers' weights (keras_vit reads them; keras-hub has its own)."""
    ours, theirs = row.get("info", {}).get("outputs"), reference.get("info", {}).get("outputs")
    if not ours or not theirs:
        return None
    name = reference["system"]
    shapes = {key: value["shape"] for key, value in ours.items()}
    expected = {key: value["shape"] for key, value in theirs.items()}
    if shapes != expected:
        return f"output shapes {shapes} differ from {name}'s {expected}"
    if row["system"].startswith("keras_hub"):
        return f"output shapes as {name}'s"
    far = [key for key, value in ours.items()
           if any(abs(value[stat] - theirs[key][stat]) > OUTPUT_RTOL * theirs[key]["mean_abs"]
                  for stat in ("mean", "mean_abs"))]
    return f"output statistics differ from {name}'s: {far}" if far else f"outputs as {name}'s"


def check_outputs(rows):
    """Sets `outputs_check` on every dense task row that has a transformers row of its case to compare with."""
    for (workload, dtype, system), row in rows.items():
        references = [rows.get((workload, dtype, name)) for name in REFERENCES if name != system]
        reference = next((r for r in references if r and r["status"] == "ok"), None)
        if row["status"] == "ok" and reference is not None:
            check = output_check(row, reference)
            if check:
                row["outputs_check"] = check


def finish(report, rows, started, prefix):
    """Adds FLOP rates, output checks and ratios to the rows and writes the report."""
    peaks = report["peak"].get("gflops", {})
    check_outputs(rows)
    for row in rows.values():
        if row["status"] == "ok":
            peak = max((v for k, v in peaks.items() if k.endswith(row["dtype"])), default=None)
            flops = case_flops(row["workload"])
            row["gflops"] = None if flops is None else flops * row["images_per_s"] / 1e9
            row["peak_fraction"] = row["gflops"] / peak if peak and flops else None
            own = peaks.get(own_peak_key(row["system"], row["dtype"]))
            row["own_peak_fraction"] = row["gflops"] / own if own and flops else None
    report["results"] = list(rows.values())
    report["ratios"] = ratios(report["results"])
    report["total_s"] = time.perf_counter() - started
    write_report(report, prefix)


def _hf_float32(speed, workload):
    """The fastest HF float32 system of a workload (eager, sdpa or ONNX Runtime)."""
    rates = [speed.get((workload, "float32", s)) for s in ("hf-sdpa", "hf-eager", "ort-hf")]
    return max((r for r in rates if r), default=None)


def ratios(results):
    """Speed ratios that the targets are stated in, for each workload and dtype."""
    speed = {(r["workload"], r["dtype"], r["system"]): r["images_per_s"]
             for r in results if r["status"] == "ok"}
    out = []
    for (workload, dtype, system), value in sorted(speed.items()):
        if "keras_vit" not in system:
            continue
        library, _, backend = system.partition("-")
        if library == "keras_vit":
            hub = speed.get((workload, dtype, f"keras_hub-{backend.split('+')[0]}"))
            if hub:
                out.append((workload, dtype, f"{system} / keras_hub-{backend.split('+')[0]}", value / hub))
        peers = [v for (w, d, s), v in speed.items()
                 if w == workload and d == dtype and "keras_vit" not in s and "+" not in s]
        if peers:
            out.append((workload, dtype, f"{system} / fastest float peer", value / max(peers)))
        for peer in ("hf-sdpa", "timm"):
            if speed.get((workload, dtype, peer)):
                out.append((workload, dtype, f"{system} / {peer}", value / speed[(workload, dtype, peer)]))
        hf32 = _hf_float32(speed, workload)
        if ("int8" in system or "bf16" in system) and hf32:
            out.append((workload, dtype, f"{system} / fastest HF float32", value / hf32))
        fp32 = speed.get((workload, "float32", system))
        if dtype == "bfloat16" and fp32:
            out.append((workload, dtype, f"{system} bf16 / fp32", value / fp32))
        twin = speed.get((workload, dtype, system.removesuffix("+bf16")))
        if system.endswith("+bf16") and twin:
            out.append((workload, dtype, f"{system} / float32", value / twin))
    return [dict(workload=w, dtype=d, ratio=n, value=v) for w, d, n, v in out]


def parse_args(argv):
    parser = argparse.ArgumentParser(
        prog="keras-vit-benchmark",
        description="Benchmark keras_vit against keras-hub, HF transformers and timm.",
    )
    parser.add_argument("--systems", default=",".join(SYSTEMS),
                        help="comma-separated systems, or 'deploy' for the deployment"
                        f" comparison ({','.join(DEPLOY_SYSTEMS)}; float32, B/16 batch 1 and 8"
                        " unless --workloads/--dtypes say otherwise) (default: %(default)s)")
    parser.add_argument("--workloads", default=None,
                        help="comma-separated workloads, 'all' (CPU sizes) or 'gpu' (default: "
                        f"{','.join(DEFAULT_WORKLOADS)}; choices: {','.join(WORKLOADS)})")
    parser.add_argument("--dtypes", default=",".join(DTYPES),
                        help="comma-separated: float32,bfloat16 (default: both)")
    parser.add_argument("--reps", type=int, default=None,
                        help="timed repetitions per case (default 5; --quick 3; --smoke 1)")
    parser.add_argument("--warmup", type=int, default=None,
                        help="untimed calls after the first (default 2; --quick 1; --smoke 0)")
    parser.add_argument("--quick", action="store_true",
                        help="fewer repetitions and a smaller peak matmul")
    parser.add_argument("--matmul-size", type=int, default=None,
                        help="side of the square peak matmul (default 4096; --quick 2048;"
                        " --smoke 256)")
    parser.add_argument("--smoke", action="store_true",
                        help="tiny model, one repetition, and only the matmul peaks of the"
                        " run's systems and NumPy: checks that everything runs")
    parser.add_argument("--timeout", type=float, default=900,
                        help="seconds allowed per case (default %(default)s)")
    parser.add_argument("--rounds", type=int, default=1,
                        help="run every case this many times, interleaved, and keep"
                        " each case's fastest round (steadier on a busy machine)")
    parser.add_argument("--profile", action="store_true",
                        help="also profile one more step of every case that runs on torch"
                        " (keras *-torch, hf, timm) and list its top operators")
    parser.add_argument("--force-bfloat16", action="store_true",
                        help="run the bfloat16 cases even where the measured bfloat16 matmul"
                        " is slower than float32 (a CPU without avx512_bf16 or AMX emulates"
                        " it: such cases take hours)")
    parser.add_argument("--preset", choices=sorted([*PRESETS, "startup"]), default=None,
                        help="a fixed list of cases instead of --systems x --workloads x"
                        " --dtypes; 'cpu': float32 at 224, 384 and 518 px, bfloat16 inference"
                        " per backend, OpenVINO float32 and bf16, the S/16 training step;"
                        " 'gpu': bfloat16 B/16 and L/16 inference (batch 64) and training"
                        " (batch 32) against keras-hub, HF and timm, then float32; 'tasks': OWLv2"
                        " and SAM, 'dense': Depth Anything V2 Small and EoMT-S, beside transformers'"
                        " (and keras-hub's Depth Anything); 'startup': `import keras_vit` and the"
                        " depth and classify commands cold, one image, beside transformers' pipeline"
                        " (tools/benchmark_startup.py; --smoke: tiny checkpoints, torch only)")
    parser.add_argument("--output", default="benchmark",
                        help="output path prefix: writes PREFIX.md and PREFIX.json")
    parser.add_argument("--name", default=None,
                        help="a setup name such as cpu-avx512 or gpu-h100: writes"
                        " docs/results/NAME.md and .json, the setup's current result,"
                        " instead of --output")
    args = parser.parse_args(argv)
    if args.name:
        args.output = str(results_prefix(args.name))
    return args


def results_prefix(name):
    """The output prefix of a setup's current result, `docs/results/NAME`.

    Example:

    >>> results_prefix("cpu-avx512").relative_to(RESULTS.parent.parent).as_posix()
    'docs/results/cpu-avx512'
    """
    if not name or "/" in name or name.startswith("."):
        raise SystemExit(f"--name must be a plain setup name such as cpu-avx512. Received: {name!r}")
    return RESULTS / name


def _selection(args, workloads):
    """(systems, workloads, dtypes); `--systems deploy` picks the deployment comparison."""
    if args.systems != "deploy":
        return tuple(args.systems.split(",")), workloads, tuple(args.dtypes.split(","))
    return DEPLOY_SYSTEMS, workloads if args.workloads or args.smoke else DEPLOY_WORKLOADS, ("float32",)


def peak_libraries(cases):
    """NumPy and the libraries whose peaks the cases' systems are read against."""
    own = {own_peak_key(system, "float32") for _, _, system in cases} - {None}
    return tuple(lib for lib in PEAK_LIBRARIES if lib == "numpy" or f"{lib}_float32" in own)


def measure_peaks(peak, size, reps, timeout, libraries=PEAK_LIBRARIES):
    """Each library's square matmul rate, one process each; keeps the best per key in `peak`."""
    for library in libraries:
        result = run_case({"system": "peak", "matmul_size": size, "reps": reps,
                           "libraries": [library]}, timeout)
        if result["status"] == "ok":
            best = peak["gflops"]
            for key, value in result["gflops"].items():
                best[key] = max(best.get(key, 0.0), value)
            peak.update(status="ok", matmul_size=size)
            peak.setdefault("sizes", {}).update(result.get("sizes", {}))
    print("  " + ", ".join(f"{k} {v:.0f}" for k, v in peak["gflops"].items()) + " GFLOP/s",
          flush=True)


def startup(args, argv=None):
    """`--preset startup` (`tools/benchmark_startup.py`): each command cold, in a fresh process."""
    prefix = args.output
    backends = ("torch",) if args.smoke else benchmark_startup.BACKENDS
    benchmark_startup.run(rounds=args.rounds, small=not args.smoke, backends=backends, timeout=args.timeout,
                          machine=machine_info(), output=prefix,
                          command=" ".join(["keras-vit-benchmark", *(sys.argv[1:] if argv is None else argv)]))
    print(f"\nwrote {prefix}.md and {prefix}.json")
    return 0


def main(argv=None):
    args = parse_args(argv)
    if args.smoke:
        reps, warmup, size = 1, 0, 256
        workloads = SMOKE_WORKLOADS
    elif args.quick:
        reps, warmup, size = 3, 1, 2048
        workloads = DEFAULT_WORKLOADS
    else:
        reps, warmup, size = 5, 2, 4096
        workloads = DEFAULT_WORKLOADS
    reps = args.reps or reps
    size = args.matmul_size or size
    warmup = warmup if args.warmup is None else args.warmup
    if args.workloads == "all":
        workloads = tuple(w for w in WORKLOADS if "tiny" not in w and w not in GPU_WORKLOADS
                          and WORKLOADS[w][1] in ARCHS)
    elif args.workloads == "gpu":
        workloads = GPU_WORKLOADS
    elif args.workloads:
        workloads = tuple(args.workloads.split(","))
    systems, workloads, dtypes = _selection(args, workloads)
    for value, allowed, name in ((workloads, WORKLOADS, "workloads"), (dtypes, DTYPES, "dtypes")):
        bad = [v for v in value if v not in allowed]
        if bad:
            raise SystemExit(f"unknown {name}: {bad}; choices: {list(allowed)}")

    if args.preset == "startup":
        return startup(args, argv)
    started = time.perf_counter()
    report = {
        "date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
        "command": " ".join(["keras-vit-benchmark", *(sys.argv[1:] if argv is None else argv)]),
        "machine": machine_info(), "reps": reps, "warmup": warmup,
        "flops_formula": "see tools/benchmark.py module docstring", "results": [],
    }
    cases = [(w, d, s) for w in workloads for d in dtypes for s in systems]
    if args.preset:
        cases = [(w, d, s) for group in PRESETS[args.preset]
                 for w in group[0] for d in group[1] for s in group[2]]
    rows = {}
    report["peak"] = {"status": "error", "gflops": {}}
    for round_ in range(args.rounds):
        # The peak is measured in every round; the best of the rounds is kept.
        print(f"round {round_ + 1}/{args.rounds}: matmul peak (n={size}) ...", flush=True)
        measure_peaks(report["peak"], size, reps, args.timeout,
                      peak_libraries(cases) if args.smoke else PEAK_LIBRARIES)
        for workload, dtype, system in cases:
            kind, arch, image, batch = WORKLOADS[workload]
            slow = slow_bfloat16(report["peak"])
            if dtype == "bfloat16" and slow and not args.force_bfloat16:
                rows[(workload, dtype, system)] = dict(
                    workload=workload, dtype=dtype, system=system, status="skipped",
                    reason=slow + "; --force-bfloat16 runs it")
                continue
            spec = dict(system=system, workload=workload, kind=kind, arch=arch,
                        image=image, batch=batch, dtype=dtype, reps=reps, warmup=warmup,
                        profile=args.profile)
            result = run_case(spec, args.timeout)
            key = (workload, dtype, system)
            old = rows.get(key)
            speeds = (old or {}).get("rounds_images_per_s", []) + [result.get("images_per_s")]
            if old is None or old["status"] != "ok" or (
                result["status"] == "ok" and result["images_per_s"] > old["images_per_s"]
            ):
                rows[key] = dict(workload=workload, dtype=dtype, system=system, **result)
            rows[key]["rounds_images_per_s"] = speeds
            print(f"{workload:18s} {dtype:9s} {system:22s} "
                  + (f"{result['images_per_s']:8.2f} img/s  first {result['first_s']:.1f} s"
                     f"  rss {result['peak_rss_mib']:.0f} MiB"
                     if result["status"] == "ok"
                     else f"{result['status']}: {result.get('reason', '')[:100]}"),
                  flush=True)
            finish(report, rows, started, args.output)  # a cut run keeps its rows
    finish(report, rows, started, args.output)
    print("\n" + side_by_side(report))
    output = pathlib.Path(args.output)
    print(f"\nwrote {output}.md and {output}.json"
          f" in {report['total_s']:.0f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
