"""Deployment cases of the benchmark: exported models in ONNX Runtime and OpenVINO.

Imported by `tools/benchmark_worker.py` for the systems

- `ort-keras_vit`: keras_vit exported with `keras_vit.export` (torch backend,
  dynamo ONNX exporter) and run by ONNX Runtime; `+int8`: the one-call int8
  export, `export_model(model, path, "onnx", quantize="int8")`
  (`onnxruntime.quantization.quantize_dynamic` on the float graph: int8
  weights per channel in 7 bits, activations quantized at run time;
  `keras_vit.export.int8`).
- `openvino-keras_vit`: the same model exported to OpenVINO IR, compiled for
  the CPU in float32; `+bf16`: OpenVINO's own default on a CPU with bfloat16
  units; `+int8`: `export_model(..., "openvino", quantize="int8")`, weights
  compressed to int8 by NNCF (`nncf.compress_weights`), which OpenVINO's CPU
  plugin runs with int8 matrix products on dynamically quantized
  activations, compiled in float32 otherwise.
- `ort-hf`: HF transformers' ViT exported with `torch.onnx.export`
  (dynamo) and run by ONNX Runtime, the peer's own deployment path; `+int8`
  through the same quantizer (`keras_vit.export.int8.quantize_onnx`).

Exported files are cached in `KERAS_VIT_BENCH_CACHE` (default a folder in
the temporary directory), so every round reuses them; the export time is the
`build` time of the run that wrote them.
"""

import json
import os
import pathlib
import sys
import tempfile
import time

import numpy as np

if __name__ == "__main__":
    # Run as a script (tools/ is sys.path[0]): this checkout's tools.
    import checkout

    checkout.bind_tools()

from keras_vit_tools.benchmark import ARCHS  # noqa: E402

CLASSES = 1000


def cache_dir():
    folder = pathlib.Path(
        os.environ.get("KERAS_VIT_BENCH_CACHE", pathlib.Path(tempfile.gettempdir()) / "keras_vit_bench")
    )
    folder.mkdir(parents=True, exist_ok=True)
    return folder


def _keras_vit_model(arch, image):
    import keras_vit

    patch, hidden, layers, heads, mlp = ARCHS[arch]
    return keras_vit.ViT(
        image_size=image, patch_size=patch, hidden_size=hidden, num_layers=layers,
        num_heads=heads, mlp_dim=mlp, classes=CLASSES, classifier_activation=None,
    )


def _keras_vit_files(spec, int8=False):
    """(ONNX path, OpenVINO path, max |runtime - Keras| or the int8 top-1 report).

    With `int8`, the files of the one-call int8 export
    (`export_model(..., quantize="int8")`), checked against the float
    artifacts on the case's inputs.
    """
    from keras_vit import export

    stem = cache_dir() / f"keras_vit-{spec['arch'].replace('/', '')}-{spec['image']}"
    stem = pathlib.Path(f"{stem}.int8") if int8 else stem
    onnx_path, ov_path = f"{stem}.onnx", f"{stem}.xml"
    if not (os.path.exists(onnx_path) and os.path.exists(ov_path)):
        model = _keras_vit_model(spec["arch"], spec["image"])
        # A seeded head: the default zero head would make every output equal.
        head = model.get_layer("head")
        head.kernel.assign(np.random.default_rng(1).normal(0, 0.02, head.kernel.shape).astype("float32"))
        x = np.random.default_rng(2).standard_normal((2, spec["image"], spec["image"], 3), dtype=np.float32)
        if int8:
            checks = [export.export_model(model, path, format, quantize="int8", sample_images=x).summary()
                      for path, format in ((onnx_path, "onnx"), (ov_path, "openvino"))]
            pathlib.Path(f"{stem}.check").write_text(json.dumps(" | ".join(checks)))
        else:
            export.export_model(model, onnx_path, "onnx")
            export.export_model(model, ov_path, "openvino")
            diff = export.verify_export(onnx_path, "onnx", model, x)[0]
            pathlib.Path(f"{stem}.check").write_text(json.dumps(diff))
    return onnx_path, ov_path, json.loads(pathlib.Path(f"{stem}.check").read_text())


def _hf_file(spec, hf_model):
    import torch

    path = str(cache_dir() / f"hf-{spec['arch'].replace('/', '')}-{spec['image']}.onnx")
    if not os.path.exists(path):
        model, _ = hf_model(dict(spec, system="hf-sdpa"))
        model.eval()
        sample = torch.zeros(2, 3, spec["image"], spec["image"])
        batch = torch.export.Dim("batch", min=1, max=4096)
        program = torch.onnx.export(
            model, (sample,), dynamo=True, input_names=["pixel_values"],
            dynamic_shapes=({0: batch},), verbose=False,
        )
        program.optimize()
        program.save(path)
    return path


def _int8_onnx(path):
    from keras_vit.export.int8 import quantize_onnx

    target = path.replace(".onnx", ".int8.onnx")
    if not os.path.exists(target):
        quantize_onnx(path, target)
    return target


def _ort_step(path, x):
    import onnxruntime as ort

    session = ort.InferenceSession(path, providers=["CPUExecutionProvider"])
    name = session.get_inputs()[0].name
    return lambda: session.run(None, {name: x})[0], {"onnxruntime": ort.__version__}


def _openvino_step(path, x, option):
    import openvino as ov

    core = ov.Core()
    # float32 unless the case measures OpenVINO's own bfloat16 default.
    config = {} if option == "bf16" else {"INFERENCE_PRECISION_HINT": "f32"}
    compiled = core.compile_model(core.read_model(path), "CPU", config)
    info = {"openvino": ov.__version__, "precision": str(compiled.get_property("INFERENCE_PRECISION_HINT"))}
    if option == "bf16":  # what bfloat16 costs in accuracy, against float32 on the same inputs
        reference = core.compile_model(path, "CPU", {"INFERENCE_PRECISION_HINT": "f32"})(x)[0]
        out = compiled(x)[0]
        info["max_abs_diff_vs_f32"] = float(np.abs(out - reference).max())
        info["top1_agreement_vs_f32"] = float((out.argmax(-1) == reference.argmax(-1)).mean())
    return lambda: compiled(x)[0], info


def openvino_profile(path, x, precision, rows=8):
    """OpenVINO's per-node counters of one call, summed by (node type,
    kernel): which kernels run, and in which precision (`exec_type` names
    it, e.g. `brgemm_avx512_bf16`). Returns [(type, kernel, ms, share, count)]."""
    import collections

    import openvino as ov

    compiled = ov.Core().compile_model(path, "CPU", {"INFERENCE_PRECISION_HINT": precision, "PERF_COUNT": "YES"})
    request = compiled.create_infer_request()
    for _ in range(2):  # the second call is the one counted
        request.infer({0: x})
    totals = collections.defaultdict(lambda: [0.0, 0])
    for node in request.profiling_info:
        key = (node.node_type, node.exec_type)
        totals[key][0] += node.real_time.total_seconds() * 1e3
        totals[key][1] += 1
    whole = sum(ms for ms, _ in totals.values()) or 1.0
    ranked = sorted(totals.items(), key=lambda kv: -kv[1][0])[:rows]
    return [(kind, kernel, ms, ms / whole, count) for (kind, kernel), (ms, count) in ranked]


def main(argv=None):
    """`python tools/benchmark_deploy.py --profile-openvino [--arch B/16] [--image 224] [--batch 1]`:
    exports keras_vit (or reads the cache) and prints OpenVINO's per-kernel
    profile in float32 and bfloat16, side by side."""
    import argparse

    parser = argparse.ArgumentParser(description=main.__doc__)
    parser.add_argument("--profile-openvino", action="store_true", required=True)
    parser.add_argument("--arch", default="B/16", choices=sorted(ARCHS))
    parser.add_argument("--image", type=int, default=224)
    parser.add_argument("--batch", type=int, default=1)
    args = parser.parse_args(argv)
    _, ov_path, _ = _keras_vit_files(dict(arch=args.arch, image=args.image))
    x = np.random.default_rng(0).standard_normal((args.batch, args.image, args.image, 3), dtype=np.float32)
    for precision in ("f32", "bf16"):
        profile = openvino_profile(ov_path, x, precision)
        print(f"\n{args.arch} {args.image} px batch {args.batch}, INFERENCE_PRECISION_HINT={precision}:\n")
        print("| node type | kernel | ms | share | nodes |\n|---|---|---:|---:|---:|")
        for kind, kernel, ms, share, count in profile:
            print(f"| {kind} | `{kernel}` | {ms:.1f} | {100 * share:.1f}% | {count} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())


def run_deployed(spec, x, timed, hf_model):
    """Builds (exports or reads the cache) and times one deployment case.

    `timed(step, warmup, reps)` times a step, `hf_model(spec)` builds HF's
    model (both the benchmark worker's).
    """
    runtime, _, rest = spec["system"].partition("-")
    library, _, option = rest.partition("+")
    start = time.perf_counter()
    info = {}
    if library == "keras_vit":
        onnx_path, ov_path, check = _keras_vit_files(spec, int8=option == "int8")
        info["int8_vs_float32" if option == "int8" else "max_abs_diff_vs_keras"] = check
    else:
        onnx_path, ov_path = _hf_file(spec, hf_model), None
        x = np.ascontiguousarray(x.transpose(0, 3, 1, 2))  # HF takes NCHW
    if runtime == "ort":
        hf_int8 = option == "int8" and library != "keras_vit"
        step, extra = _ort_step(_int8_onnx(onnx_path) if hf_int8 else onnx_path, x)
    else:
        step, extra = _openvino_step(ov_path, x, option)
    info.update(extra)
    build = time.perf_counter() - start
    first, times = timed(step, spec["warmup"], spec["reps"])
    return build, first, times, info, step
