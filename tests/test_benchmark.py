"""Tests of tools/benchmark.py: FLOP formula and a `--smoke` run (no speed checks)."""

import json

import keras
import numpy as np
import pytest

from conftest import every_backend, runs_once, spread
from keras_vit_tools import benchmark, benchmark_report

pytestmark = spread("a tool's tables, formulas and rows; the benchmark's worker on each backend is the "
                    "every_backend test below; each case once")


def test_architectures_are_the_library_table():
    """The benchmark's (patch, hidden, layers, heads, mlp) rows are keras_vit's variants."""
    from keras_vit.architectures import ARCHITECTURE_CONFIGS

    # B/14 (DINOv2's high-resolution size) is B/16 with 14-pixel patches.
    assert benchmark.ARCHS["B/14"] == (14, *benchmark.ARCHS["B/16"][1:])
    assert benchmark.ARCHS["DINOv3-B/16"] == benchmark.ARCHS["B/16"]
    from keras_vit.weights.formats.timm_architectures import ARCHITECTURES

    for name, row in benchmark.ARCHS.items():
        if name in benchmark.TIMM_ARCHS:  # timm's own arguments
            timm_name, changes = benchmark.TIMM_ARCHS[name]
            args = {**ARCHITECTURES[timm_name]["args"], **changes}
            dim = args["embed_dim"]
            assert row == (args["patch_size"], dim, args["depth"], args["num_heads"], int(dim * args["mlp_ratio"]))
        elif name not in ("tiny", "B/14", "DINOv3-B/16"):
            arch = ARCHITECTURE_CONFIGS[name]
            assert row == tuple(arch[k] for k in (
                "patch_size", "hidden_size", "num_layers", "num_heads", "mlp_dim")), name


def test_flops_match_torch_flop_counter():
    """The analytic FLOP count equals torch's counter on an HF ViT (eager attention)."""
    torch = pytest.importorskip("torch")
    transformers = pytest.importorskip("transformers")
    from torch.utils.flop_counter import FlopCounterMode

    patch, hidden, layers, heads, mlp = benchmark.ARCHS["tiny"]
    config = transformers.ViTConfig(
        hidden_size=hidden, num_hidden_layers=layers, num_attention_heads=heads,
        intermediate_size=mlp, image_size=32, patch_size=patch, num_labels=1000,
    )
    config._attn_implementation = "eager"
    model = transformers.ViTForImageClassification(config).eval()
    counter = FlopCounterMode(display=False)
    with counter, torch.no_grad():
        model(pixel_values=torch.zeros(1, 3, 32, 32))
    assert benchmark.forward_flops("tiny", 32) == counter.get_total_flops()


def test_flops_of_vit_b16():
    # 17.56 G multiply-adds per image, the figure usually quoted for ViT-B/16.
    assert abs(benchmark.forward_flops("B/16", 224) / 1e9 - 35.1) < 0.1


def test_cpu_fields_tell_generations_of_one_cpu_name_apart():
    text = "\n".join([
        "processor\t: 0", "vendor_id\t: AuthenticAMD", "cpu family\t: 26", "model\t\t: 2",
        "model name\t: AMD EPYC", "stepping\t: 1",
        "flags\t\t: fpu sse2 avx2 fma avx512f avx512_bf16 avx_vnni amx_tile", "",
        "processor\t: 1", "cpu family\t: 25", "model\t\t: 17", "model name\t: other",
        "flags\t\t: fpu",
    ])
    fields = benchmark.cpu_fields(text)
    assert fields["cpu"] == "AMD EPYC"
    assert fields["cpu_id"] == "family 26 model 2 stepping 1"  # the first processor's
    assert fields["flags"] == ["amx_tile", "avx2", "avx512_bf16", "avx512f", "avx_vnni", "fma"]
    assert fields["bf16_units"] == ["avx512_bf16"]
    assert benchmark.cpu_fields("model name\t: x\nflags\t: avx2") == {
        "cpu": "x", "flags": ["avx2"], "bf16_units": []}
    report = dict(date="d", command="c", peak={}, reps=3, warmup=1, results=[], ratios=[],
                  machine=dict(cores=2, versions={}, **fields))
    assert "- CPU: AMD EPYC, family 26 model 2 stepping 1 (2 cores;" in benchmark_report.to_markdown(report)


@every_backend("the benchmark's worker runs keras_vit on the job's backend")
def test_timm_architecture_workload_runs_keras_vit_beside_timm():
    """The Perception Encoder workload (tiny for the test), in the worker: keras_vit
    on the current backend and timm build the same model from timm's
    arguments (the same parameter count) and both run; transformers has none."""
    from keras_vit_tools import benchmark_worker

    kind, arch, image, batch = benchmark.WORKLOADS["infer-pe-tiny-bs2"]
    spec = dict(kind=kind, arch=arch, image=image, batch=batch, dtype="float32", warmup=0, reps=1)
    ours = benchmark_worker.run(dict(spec, system=f"keras_vit-{keras.backend.backend()}"))
    assert ours["status"] == "ok" and ours["images_per_s"] > 0
    with pytest.raises(benchmark_worker.Unavailable, match="no PE-tiny"):
        benchmark_worker.run(dict(spec, system="hf-sdpa"))
    try:
        theirs = benchmark_worker.run(dict(spec, system="timm"))
    except ImportError as error:
        pytest.skip(f"timm does not import: {error}")
    assert theirs["status"] == "ok" and theirs["images_per_s"] > 0
    model, _ = benchmark_worker._timm_model(dict(spec, system="timm"))
    keras_model = benchmark_worker._keras_model("keras_vit", arch, image)
    assert keras_model.count_params() == sum(p.numel() for p in model.parameters())


def test_rejects_unknown_workload():
    with pytest.raises(SystemExit, match="unknown workloads"):
        benchmark.main(["--workloads", "nope"])


# The benchmark runs each system in a process of its own backend: one run
# from one job covers the orchestration. Each backend's worker is held
# in-process on every backend by test_timm_architecture_workload_runs_keras_vit_beside_timm.
@runs_once("torch", "its systems run in processes of their own backends")
def test_smoke_run_writes_table_and_json(tmp_path, monkeypatch):
    """The tiny inference case for keras_vit on jax and the torch
    `for_inference()` copy; the tiny training case on torch (the worker's
    training step is Keras' `train_on_batch` on every backend), as a preset
    of groups: each case is a process of its own, three in all (timm's
    worker is held in-process by the test above)."""
    systems = ["keras_vit-jax", "keras_vit-torch"]
    infer, train = benchmark.SMOKE_WORKLOADS
    groups = [((infer,), ("float32",), ("keras_vit-jax", "keras_vit-torch+frozen")),
              ((train,), ("float32",), ("keras_vit-torch", "keras_vit-torch+frozen"))]
    monkeypatch.setitem(benchmark.PRESETS, "smoke-test", groups)
    prefix = tmp_path / "bench"
    code = benchmark.main(["--smoke", "--preset", "smoke-test", "--profile", "--output", str(prefix)])
    assert code == 0
    report = json.loads((tmp_path / "bench.json").read_text())
    rows = {(r["workload"], r["system"]): r for r in report["results"]}
    # The `for_inference()` copy: inference only.
    assert rows[(infer, "keras_vit-torch+frozen")]["images_per_s"] > 0
    assert rows[(train, "keras_vit-torch+frozen")]["status"] == "skipped"
    for workload, _, group in groups:
        for system in (s for s in group if s in systems):
            row = rows[(workload[0], system)]
            assert row["status"] == "ok", row
            assert row["images_per_s"] > 0 and row["peak_rss_mib"] > 0
            assert row["gflops"] > 0
            assert row["first_s"] > 0
            assert row["info"]["backend"] == system.split("-")[1], row["info"]
    assert report["peak"]["gflops"]["numpy_float32"] > 0
    # --smoke measures only the peaks its systems are read against (timm's:
    # torch's), so not tensorflow's.
    measured = {key.split("_")[0] for key in report["peak"]["gflops"]}
    assert measured == {"numpy", "torch", "jax"}, measured
    table = (tmp_path / "bench.md").read_text()
    assert all(system in table for system in systems) and "| workload |" in table
    assert report["machine"]["versions"]["keras"] == keras.__version__
    # --profile lists the top operators of cases that run on torch only.
    for key in ((infer, "keras_vit-jax"), (infer, "keras_vit-torch+frozen"), (train, "keras_vit-torch")):
        profile = rows[key]["info"].get("profile")
        if "-torch" in key[1]:
            assert profile and all(p["self_ms"] >= 0 and p["calls"] > 0 for p in profile)
            assert 0 < sum(p["share"] for p in profile) <= 1 + 1e-6
        else:
            assert profile is None, key
    assert "Profile of one step" in table


def test_bfloat16_cases_skipped_only_where_emulated():
    """bfloat16 is skipped with the measured reason only when it is slower than float32."""
    emulated = {"gflops": {"torch_float32": 150.0, "torch_bfloat16": 1.0}}
    reason = benchmark.slow_bfloat16(emulated)
    assert "1.0 GFLOP/s" in reason and "150" in reason
    assert benchmark.slow_bfloat16({"gflops": {"torch_float32": 150.0, "torch_bfloat16": 340.0}}) is None
    assert benchmark.slow_bfloat16({"gflops": {"numpy_float32": 150.0}}) is None


def test_table_collapses_a_skip_shared_by_every_system():
    """Where every system skipped a workload for the same reason, the table shows it once."""
    skip = dict(status="skipped", reason="no native bfloat16 matmul")
    results = [dict(workload="w", dtype="bfloat16", system=s, **skip) for s in ("a", "b", "c")]
    results += [dict(workload="w", dtype="float32", system="a", **skip),
                dict(workload="w", dtype="float32", system="b", status="error", reason="boom")]
    rows = benchmark_report._collapse_skips(results)
    assert [(r["dtype"], r["system"]) for r in rows] == [
        ("bfloat16", "all systems"), ("float32", "a"), ("float32", "b")]
    table = benchmark_report.to_markdown(dict(
        date="d", command="c", machine=dict(cpu="cpu", cores=2, flags=[], versions={}), peak={},
        reps=5, warmup=2, results=results, ratios=[]))
    assert table.count("no native bfloat16 matmul") == 2 and "| all systems |" in table


def test_gpu_workloads_are_listed_separately():
    assert set(benchmark.GPU_WORKLOADS) <= set(benchmark.WORKLOADS)
    assert not set(benchmark.GPU_WORKLOADS) & set(benchmark.DEFAULT_WORKLOADS)


def test_gpu_preset_runs_accelerator_sizes_bfloat16_first():
    groups = benchmark.PRESETS["gpu"]
    cases = [(w, d, s) for workloads, dtypes, systems in groups
             for w in workloads for d in dtypes for s in systems]
    assert len(set(cases)) == len(cases)
    assert {w for w, _, _ in cases} == set(benchmark.GPU_WORKLOADS)
    assert all(s in benchmark.SYSTEMS for _, _, s in cases)
    # A run cut short keeps the head of the list: B/16 in bfloat16 against every peer.
    head = {s for w, d, s in cases[:12]}
    assert {w for w, _, _ in cases[:12]} == {"infer-b16-bs64", "train-b16-bs32"}
    assert {d for _, d, _ in cases[:12]} == {"bfloat16"}
    assert {"keras_vit-jax", "keras_vit-torch", "keras_hub-jax", "keras_hub-torch",
            "hf-sdpa", "timm"} <= head
    args = benchmark.parse_args(["--preset", "gpu"])
    assert args.preset == "gpu"


def test_kernel_timings_table(tmp_path):
    """tools/benchmark_kernels.py times every piece on the current backend."""
    from keras_vit_tools import benchmark_kernels

    prefix = tmp_path / "kernels"
    assert benchmark_kernels.main(["--arch", "tiny", "--batch", "2", "--reps", "1",
                                   "--output", str(prefix)]) == 0
    text = (tmp_path / "kernels.md").read_text()
    assert f"### {keras.backend.backend()}: one tiny block" in text
    rows = [line for line in text.splitlines() if line.startswith("| ") and "ms" not in line]
    torch = keras.backend.backend() == "torch"
    from keras_vit.kernels import registry

    # Each attention path of the backend and the portable form, the MLP, a
    # LayerNorm, the block; on torch the four projection shapes follow:
    # F.linear against oneDNN.
    pieces = len(registry.registered("attention", keras.backend.backend())) + 1 + 3
    assert [r.split("|")[1].strip() for r in rows[:pieces - 3]][-1] == "attention, portable"
    assert len(rows) == pieces + 4 * torch and all(float(r.split("|")[2]) > 0 for r in rows[:pieces])
    # A tiny projection can round to 0.0 ms; the speed-up column is always set.
    assert all(r.split("|")[4].strip().endswith("x") for r in rows[pieces:])
    assert ("F.linear (default, MKL) vs oneDNN" in text) == torch


def test_kernel_timings_predict_rows(tmp_path):
    """`--predict`: whole-model img/s, on torch the library's choice, both dense
    paths and the packed copy; the switches are restored."""
    from keras_vit_tools import benchmark_kernels
    from keras_vit import kernels

    prefix = tmp_path / "predict"
    assert benchmark_kernels.main(["--predict", "--arch", "tiny", "--batch", "2", "--reps", "1",
                                   "--output", str(prefix)]) == 0
    rows = [line for line in (tmp_path / "predict.md").read_text().splitlines()
            if line.startswith(f"| {keras.backend.backend()}")]
    assert len(rows) == (4 if keras.backend.backend() == "torch" else 1)
    assert all(float(r.split("|")[2]) > 0 for r in rows)
    from keras_vit.kernels import switches

    assert kernels.is_enabled("onednn") and not switches.is_forced("onednn")


def test_kernel_timings_head_tokens_rows(tmp_path):
    """`--head-tokens`: predict and training img/s, whole graph against the cut last block."""
    from keras_vit_tools import benchmark_kernels

    prefix = tmp_path / "cut"
    assert benchmark_kernels.main(["--head-tokens", "--arch", "tiny", "--batch", "2", "--reps", "1",
                                   "--output", str(prefix)]) == 0
    text = (tmp_path / "cut.md").read_text()
    rows = [line.split("|") for line in text.splitlines() if line.startswith(("| predict", "| train"))]
    assert [r[1].strip() for r in rows] == ["predict", "train_on_batch"]
    assert all(float(r[2]) > 0 and float(r[3]) > 0 and r[4].strip().endswith("x") for r in rows)


def test_kernel_timings_attention_rows(tmp_path):
    """`--attention`: XLA's attention (jax, tensorflow), logits or queries scaled and
    groups of heads; torch says why not."""
    from keras_vit_tools import benchmark_kernels
    from keras_vit.kernels import xla

    prefix = tmp_path / "attention"
    assert benchmark_kernels.main(["--attention", "--arch", "tiny", "--batch", "2", "--reps", "1",
                                   "--tokens", "5,9", "--output", str(prefix)]) == 0
    text = (tmp_path / "attention.md").read_text()
    assert xla.GROUPED_ATTENTION_BYTES == 32 * 2**20  # restored
    assert xla.fold_scale(np.ones((1, 1, 1, 1), "float32"), 0.3)  # restored
    if keras.backend.backend() not in ("jax", "tensorflow"):
        assert "only XLA's CPU path (jax, tensorflow) groups heads" in text
        return
    rows = [line.split("|")[1:-1] for line in text.splitlines() if line.startswith("| ") and "tokens" not in line]
    assert [r[0].strip() for r in rows] == ["5", "9"]
    assert benchmark_kernels.ARCHS["tiny"][3] == 2
    # Such small logits all fit the group budget: a group is the largest proper
    # divisor of batch x heads = 4 (all heads at once are the columns before).
    assert all(int(r[2]) == 2 for r in rows)
    assert all(len(r) == 11 and r[6].strip().endswith("x") and r[10].strip().endswith("x") for r in rows)
    assert all(float(r[i]) > 0 for r in rows for i in (3, 4, 5, 7, 8, 9))
    with pytest.raises(SystemExit):
        benchmark_kernels.main(["--attention", "--tokens", "many"])


def test_deployment_ratios():
    """int8 and runtime rows are compared with HF float32; keras_vit rows with keras-hub."""
    rows = [("hf-sdpa", 2.0), ("hf-eager", 1.8), ("ort-hf", 2.5), ("keras_hub-torch", 2.0),
            ("keras_vit-torch", 2.2), ("ort-keras_vit+int8", 5.0), ("openvino-keras_vit", 3.0),
            ("timm", 2.75)]
    results = [dict(workload="w", dtype="float32", system=s, status="ok", images_per_s=v)
               for s, v in rows]
    got = {r["ratio"]: r["value"] for r in benchmark.ratios(results)}
    assert got["keras_vit-torch / keras_hub-torch"] == pytest.approx(1.1)
    assert got["keras_vit-torch / hf-sdpa"] == pytest.approx(1.1)
    assert got["keras_vit-torch / timm"] == pytest.approx(0.8)
    assert got["ort-keras_vit+int8 / fastest HF float32"] == pytest.approx(2.0)
    assert got["openvino-keras_vit / fastest float peer"] == pytest.approx(3.0 / 2.75)
    assert not any(name.startswith(("hf", "ort-hf", "keras_hub")) for name in got)


@runs_once("torch", "the deployment cases export under the torch backend")
def test_smoke_run_of_deployment_systems(tmp_path, monkeypatch):
    """keras_vit and HF exported to ONNX Runtime and OpenVINO (int8 keras_vit: the
    one-call `export_model(..., quantize="int8")`; HF int8: the same quantizer), tiny model."""
    monkeypatch.setenv("KERAS_VIT_BENCH_CACHE", str(tmp_path / "cache"))
    # Each runtime and library once (the int8 export writes and checks both
    # runtimes' files; HF's int8 case exports its float file first).
    systems = ("ort-keras_vit+int8", "openvino-keras_vit+bf16", "ort-hf+int8")
    prefix = tmp_path / "deploy"
    assert benchmark.main(["--smoke", "--systems", ",".join(systems), "--dtypes", "float32",
                           "--workloads", "infer-tiny-bs2", "--output", str(prefix)]) == 0
    report = json.loads((tmp_path / "deploy.json").read_text())
    rows = {r["system"]: r for r in report["results"]}
    for system in systems:
        assert rows[system]["status"] == "ok", rows[system]
        assert rows[system]["images_per_s"] > 0
    # The one-call int8 export's own check against the float32 artifacts.
    check = rows["ort-keras_vit+int8"]["info"].get("int8_vs_float32", str(rows["ort-keras_vit+int8"]["info"]))
    assert "int8 onnx: top-1 agrees with float32 on" in check, check
    assert "int8 openvino: top-1 agrees with float32 on" in check, check
    # bfloat16 in OpenVINO reports its distance to float32 on the same inputs.
    info = rows["openvino-keras_vit+bf16"]["info"]
    assert 0 <= info["max_abs_diff_vs_f32"] < 0.5 and 0 <= info["top1_agreement_vs_f32"] <= 1
    from keras_vit_tools import benchmark_deploy

    x = np.random.default_rng(0).standard_normal((2, 32, 32, 3)).astype("float32")
    path = benchmark_deploy._keras_vit_files(dict(arch="tiny", image=32))[1]
    for precision in ("f32", "bf16"):
        profile = benchmark_deploy.openvino_profile(path, x, precision)
        kernels = [kernel for _, kernel, _, _, _ in profile]
        assert profile and all(ms >= 0 and count > 0 for _, _, ms, _, count in profile)
        if precision == "f32":
            assert not any(k.endswith("bf16") for k in kernels), kernels
        elif "avx512_bf16" in benchmark.machine_info()["flags"]:
            # Every matrix product of the bf16 model runs a bf16 kernel.
            products = [k for kind, k, *_ in profile if kind in ("FullyConnected", "MatMul")]
            assert products and all(k.endswith("bf16") for k in products), profile


def test_cases_that_cannot_run_are_skipped_without_a_process(monkeypatch):
    def no_process(*args, **kwargs):
        raise AssertionError("a process was started")

    monkeypatch.setattr(benchmark.subprocess, "run", no_process)
    for system, kind, reason in (("keras_vit-torch+frozen", "train", "+frozen"),
                                 ("keras_hub-jax+frozen", "infer", "+frozen"),
                                 ("ort-keras_vit+int8", "train", "inference only"),
                                 ("keras_vit-jax+int8", "train", "inference only")):
        result = benchmark.run_case({"system": system, "kind": kind}, timeout=1)
        assert result["status"] == "skipped" and reason in result["reason"], (system, result)
    for system, kind in (("keras_vit-torch+frozen", "infer"), ("keras_vit-torch", "train"),
                         ("ort-keras_vit+int8", "infer"), ("peak", None)):
        assert benchmark.skip_reason({"system": system, "kind": kind}) is None, system


def test_cpu_preset_names_known_cases_and_the_table_sets_them_side_by_side():
    for workloads, dtypes, systems in benchmark.PRESETS["cpu"]:
        assert set(workloads) <= set(benchmark.WORKLOADS)
        assert set(dtypes) <= set(benchmark.DTYPES)
        assert all(s in benchmark.SYSTEMS or s in benchmark.DEPLOY_SYSTEMS
                   or s.removesuffix("+frozen") in benchmark.KERAS_SYSTEMS[:3] for s in systems)
    covered = {w for group in benchmark.PRESETS["cpu"] for w in group[0]}
    assert {"infer-b16-384-bs1", "infer-b14-518-bs1", "train-s16-bs16"} <= covered
    # 577 and 1370 tokens: the high-resolution rows.
    tokens = {w: (benchmark.WORKLOADS[w][2] // benchmark.ARCHS[benchmark.WORKLOADS[w][1]][0]) ** 2 + 1
              for w in ("infer-b16-384-bs1", "infer-b14-518-bs1")}
    assert tokens == {"infer-b16-384-bs1": 577, "infer-b14-518-bs1": 1370}
    assert benchmark.own_peak_key("keras_vit-jax+int8", "float32") == "jax_float32"
    assert benchmark.own_peak_key("hf-sdpa", "bfloat16") == "torch_bfloat16"
    assert benchmark.own_peak_key("openvino-keras_vit", "float32") is None
    results = [dict(workload=w, dtype="float32", system=s, status="ok", images_per_s=v,
                    peak_rss_mib=100.0)
               for w, s, v in (("a", "x", 1.0), ("b", "x", 2.0), ("a", "y", 3.0))]
    table = benchmark_report.side_by_side(dict(results=results)).splitlines()
    assert table[0] == "| system | a float32 | b float32 |"
    assert table[2] == "| x | 1.00 (100) | 2.00 (100) |" and table[3] == "| y | 3.00 (100) |  |"


def test_kernel_timings_bf16_rows(tmp_path):
    """`--bf16`: whole model and its projections, float32 against bfloat16."""
    from keras_vit_tools import benchmark_kernels, benchmark_kernels_model

    shapes = benchmark_kernels_model._projection_shapes("tiny", 2)
    patch, hidden, layers, _, mlp = benchmark_kernels.ARCHS["tiny"]
    rows = 2 * ((32 // patch) ** 2 + 1)
    assert len(shapes) == 6 * layers
    assert shapes[:6] == [(rows, hidden, hidden)] * 4 + [(rows, hidden, mlp), (rows, mlp, hidden)]
    # The last block computes keys and values on every token, the rest on the class tokens.
    assert shapes[-6:] == [(2, hidden, hidden), (rows, hidden, hidden), (rows, hidden, hidden),
                           (2, hidden, hidden), (2, hidden, mlp), (2, mlp, hidden)]
    prefix = tmp_path / "bf16"
    assert benchmark_kernels.main(["--bf16", "--arch", "tiny", "--batch", "2", "--reps", "1",
                                   "--output", str(prefix)]) == 0
    text = (tmp_path / "bf16.md").read_text()
    table = {line.split("|")[1].strip(): line.split("|")[2:-1] for line in text.splitlines()
             if line.startswith(("| float32", "| bfloat16", "| bf16 speed-up"))}
    assert set(table) == {"float32", "bfloat16", "bf16 speed-up"}
    assert all(float(table[d][0]) > 0 and float(table[d][1]) > 0 for d in ("float32", "bfloat16"))
    assert all(cell.strip().endswith("x") for cell in table["bf16 speed-up"][:3])
    assert "Bound on the whole model's bf16 speed-up" in text


def test_kernel_timings_versus_keras_hub(tmp_path):
    """`--versus-keras-hub`: both models, keras_vit's products and a square matmul, one process."""
    pytest.importorskip("keras_hub", reason="keras-hub is a test extra")
    from keras_vit_tools import benchmark_kernels

    prefix = tmp_path / "versus"
    assert benchmark_kernels.main(["--versus-keras-hub", "--arch", "tiny", "--batch", "2",
                                   "--reps", "2", "--matmul-size", "128",
                                   "--output", str(prefix)]) == 0
    text = (tmp_path / "versus.md").read_text()
    rows = {line.split("|")[1].strip(): [c.strip() for c in line.split("|")[2:-1]]
            for line in text.splitlines() if line.startswith("| ") and "---" not in line}
    assert set(rows) == {"call", "keras_vit", "keras_vit projections", "keras_hub",
                         "square 128 matmul"}
    ms = {name: float(cells[0]) for name, cells in rows.items() if name != "call"}
    assert all(value > 0 for value in ms.values())
    # Each ratio is keras-hub's median over the row's own.
    for name in ("keras_vit", "keras_vit projections"):
        assert float(rows[name][3]) == pytest.approx(ms["keras_hub"] / ms[name], rel=0.1)
    assert rows["square 128 matmul"][2] == "100"
    assert f"keras_vit over keras_hub: {float(rows['keras_vit'][3]):.3f}x measured" in text


def test_dinov3_rows_build_one_model_in_every_system():
    """The DINOv3 rows time the same network in keras_vit, keras-hub and
    transformers: equal parameter counts (the peers also hold a mask token
    for masked pre-training, one row of the width), and the `dinov3`
    preset names known cases at 224 and 518 px."""
    transformers = pytest.importorskip("transformers")
    pytest.importorskip("keras_hub")
    from keras_vit_tools import benchmark_worker

    hidden = benchmark.ARCHS["tiny"][1]
    arch = "tiny"
    ours = benchmark_worker._keras_dinov3("keras_vit", arch, 36).count_params()
    hub = benchmark_worker._keras_dinov3("keras_hub", arch, 36).count_params()
    config = transformers.DINOv3ViTConfig(**benchmark_worker.dinov3_config(arch, 36))
    reference = sum(p.numel() for p in transformers.DINOv3ViTModel(config).parameters())
    assert ours + hidden == hub == reference
    (workloads, dtypes, systems), = benchmark.PRESETS["dinov3"]
    assert {benchmark.WORKLOADS[w][2] for w in workloads} == {224, 518}
    assert set(systems) == {*benchmark.KERAS_SYSTEMS, "hf-sdpa"}


@pytest.mark.parametrize("arch", ["OWLv2-tiny", "SAM-tiny", "SAM-decoder-tiny"])
def test_task_workloads_run_on_both_sides(arch):
    """Each task workload builds and runs keras_vit's model and transformers'
    of the same config (in this process: no timing is checked)."""
    pytest.importorskip("transformers")
    from keras_vit_tools import benchmark_tasks, benchmark_worker

    assert arch in benchmark_tasks.TASK_ARCHS
    workload = next(w for w, (_, a, _, _) in benchmark.WORKLOADS.items() if a == arch)
    _, _, image, batch = benchmark.WORKLOADS[workload]
    assert workload in benchmark.TASK_SMOKE_WORKLOADS and benchmark.case_flops(workload) is None
    x = np.random.default_rng(0).normal(size=(batch, image, image, 3)).astype("float32")
    spec = dict(system="hf-sdpa", arch=arch, image=image, warmup=0, reps=1)
    _, first, times, info, hf_step = benchmark_tasks.run_hf(spec, x, lambda step, warmup, reps: (0.0, [step() is not None]))
    assert times == [True] and info["attn"] == "sdpa"
    # `--profile` repeats the returned step on its own: it must run as timed, without autograd.
    profile = benchmark_worker.torch_profile(hf_step)
    assert profile and all(p["calls"] > 0 for p in profile)
    _, step, info = benchmark_tasks.run_keras_task(spec, x)
    out = step()
    assert info["backend"] == keras.backend.backend() and out is not None


@pytest.mark.parametrize("system", ["hf-sdpa", "keras_vit-jax", "keras_vit-torch+frozen"])
def test_task_cases_in_another_dtype_are_skipped_on_every_side(system):
    """The task workloads run in float32: a bfloat16 case is a skip, not
    transformers' float32 model reported under a bfloat16 label."""
    from keras_vit_tools import benchmark_worker

    spec = dict(system=system, arch="SAM-tiny", image=32, dtype="bfloat16", warmup=0, reps=1)
    assert benchmark_worker.run_task(spec, np.zeros((1, 32, 32, 3), "float32")) is None


def test_kernel_timings_compiled_rows(tmp_path, monkeypatch):
    """`--compiled`: torch's training step compiled with the library's paths and
    portable, and eager with oneDNN forced; the other backends say why not.

    The table is the tool's: `torch.compile` is passed through here (it takes
    minutes on a 2-core CPU), and tests/test_mode_matrix.py holds Keras'
    compiled training with each path against the portable reference."""
    from keras_vit_tools import benchmark_kernels
    from keras_vit.kernels import switches

    if keras.backend.backend() == "torch":
        import torch

        compiled = []
        monkeypatch.setattr(torch, "compile", lambda fn, *args, **kwargs: compiled.append(fn) or fn)
    prefix = tmp_path / "compiled"
    assert benchmark_kernels.main(["--compiled", "--arch", "tiny", "--layers", "1", "--batch", "2",
                                   "--reps", "1", "--output", str(prefix)]) == 0
    text = (tmp_path / "compiled.md").read_text()
    if keras.backend.backend() != "torch":
        assert "--compiled times torch.compile's training step" in text
        return
    rows = [line.split("|")[1:-1] for line in text.splitlines() if line.startswith(("| compiled", "| eager"))]
    assert [r[0].strip() for r in rows] == ["compiled, library's paths (F.linear)", "compiled, portable",
                                            "eager, oneDNN forced"]
    assert all(float(r[1]) > 0 and float(r[3]) > 0 for r in rows)
    assert len(compiled) == 2  # the two compiled rows' train functions
    assert not switches.is_forced("onednn")


def _task_spec(workload, system):
    kind, arch, image, batch = benchmark.WORKLOADS[workload]
    return dict(system=system, workload=workload, kind=kind, arch=arch, image=image, batch=batch, dtype="float32",
                warmup=0, reps=1)


def _one_call(step, warmup, reps):
    return 0.0, [step() is not None]


@pytest.mark.parametrize("workload", ["infer-da2-tiny-bs1", "infer-eomt-tiny-bs1"])
def test_dense_task_workloads_compute_transformers_outputs(workload):
    """keras_vit's dense task model, read from the directory of transformers'
    model of the workload's config, computes transformers' outputs: the
    benchmark's check of the two runs' output shapes and statistics passes."""
    pytest.importorskip("transformers")
    from keras_vit_tools import benchmark_tasks

    assert workload in benchmark.DENSE_SMOKE_WORKLOADS and benchmark.case_flops(workload) is None
    spec = _task_spec(workload, "hf-sdpa")
    x = np.random.default_rng(0).normal(size=(1, spec["image"], spec["image"], 3)).astype("float32")
    _, _, _, info, _ = benchmark_tasks.run_hf(spec, x, _one_call)
    theirs = dict(spec, status="ok", info=info)
    system = f"keras_vit-{keras.backend.backend()}"
    _, step, info = benchmark_tasks.run_keras_task(dict(spec, system=system), x)
    step()
    ours = dict(spec, system=system, status="ok", info=info)
    assert info["backend"] == keras.backend.backend()
    assert set(info["outputs"]) == set(benchmark_tasks.DENSE_OUTPUTS[benchmark_tasks.CONFIGS[spec["arch"]][0]])
    assert benchmark.output_check(ours, theirs) == "outputs as hf-sdpa's", (info["outputs"], theirs["info"])
    # The check can fail: a statistic off by more than its tolerance, a shape.
    name = next(iter(info["outputs"]))
    off = {**info["outputs"][name], "mean": info["outputs"][name]["mean"] + info["outputs"][name]["mean_abs"]}
    assert "differ" in benchmark.output_check(dict(ours, info=dict(outputs={**info["outputs"], name: off})), theirs)
    short = {**info["outputs"][name], "shape": info["outputs"][name]["shape"][:-1]}
    assert "shapes" in benchmark.output_check(dict(ours, info=dict(outputs={**info["outputs"], name: short})), theirs)


def test_keras_hub_depth_task_has_transformers_sizes():
    """keras-hub's Depth Anything of a dense workload's config holds
    transformers' trainable parameters (keras-hub keeps a second, frozen copy
    of the position embeddings) and its depth map's shape; keras-hub has no EoMT."""
    pytest.importorskip("transformers")
    pytest.importorskip("keras_hub")
    from keras_vit_tools import benchmark_tasks, benchmark_worker

    arch, image = benchmark.WORKLOADS["infer-da2-tiny-bs1"][1:3]
    reference = sum(p.numel() for p in benchmark_tasks._transformers_model(arch, image).parameters())
    model = benchmark_tasks.keras_hub_depth_anything(benchmark_tasks.CONFIGS[arch][1], image)
    assert sum(int(np.prod(v.shape)) for v in model.trainable_weights) == reference
    system = f"keras_hub-{keras.backend.backend()}"
    spec = _task_spec("infer-da2-tiny-bs1", system)
    x = np.random.default_rng(0).normal(size=(1, image, image, 3)).astype("float32")
    _, step, info = benchmark_tasks.run_keras_hub_task(spec, x)
    step()
    theirs = dict(system="hf-sdpa", info=dict(outputs={"predicted_depth": dict(shape=[1, image, image])}))
    assert benchmark.output_check(dict(spec, info=info), theirs) == "output shapes as hf-sdpa's"
    with pytest.raises(benchmark_worker.Unavailable, match="keras_hub has no EoMT-tiny"):
        benchmark_worker.run_task(_task_spec("infer-eomt-tiny-bs1", system), x)


def test_task_presets_name_known_cases():
    """`--preset tasks` and `--preset dense` name task workloads and known
    systems, keras-hub only where it has the model; the dense rows run at
    the published sizes (Depth Anything V2 Small: 37 x 37 patches of 14 px,
    EoMT-S: 40 x 40 of 16 px and 200 queries)."""
    from keras_vit_tools import benchmark_tasks

    for preset in ("tasks", "dense"):
        cases = [(w, d, s) for workloads, dtypes, systems in benchmark.PRESETS[preset]
                 for w in workloads for d in dtypes for s in systems]
        assert len(set(cases)) == len(cases) and {d for _, d, _ in cases} == {"float32"}
        for workload, _, system in cases:
            arch = benchmark.WORKLOADS[workload][1]
            assert arch in benchmark_tasks.TASK_ARCHS and "tiny" not in arch and system in benchmark.SYSTEMS
            if system.startswith("keras_hub"):
                assert benchmark_tasks.CONFIGS[arch][0] in benchmark_tasks.KERAS_HUB_TASKS, (workload, system)
    dense = {}
    for workloads, _, systems in benchmark.PRESETS["dense"]:
        for workload in workloads:
            dense.setdefault(workload, set()).update(systems)
    assert dense["infer-da2-s-518-bs1"] == {*benchmark.KERAS_SYSTEMS, "hf-sdpa"}
    assert dense["infer-eomt-s-640-bs1"] == {*benchmark.KERAS_SYSTEMS[:3], "hf-sdpa"}
    da2, eomt = (benchmark_tasks.CONFIGS[benchmark.WORKLOADS[w][1]][1] for w in benchmark.DENSE_WORKLOADS)
    encoder = da2["backbone_config"]
    assert (encoder["hidden_size"], encoder["num_hidden_layers"], encoder["num_attention_heads"]) == (384, 12, 6)
    assert benchmark.WORKLOADS["infer-da2-s-518-bs1"][2] // encoder["patch_size"] == 37
    assert benchmark.WORKLOADS["infer-eomt-s-640-bs1"][2] // eomt["patch_size"] == 40
    assert (eomt["hidden_size"], eomt["num_queries"], eomt["num_blocks"]) == (384, 200, 3)


def test_startup_preset_measures_each_command_in_a_process_of_its_own(tmp_path):
    """`--preset startup`'s measurement: a child's own peak memory (one that
    allocates 300 MB reads at least that, one that does not reads far less,
    whatever the parent holds), a failure with its exit code and last words,
    and the ratios the targets name, per backend."""
    import sys

    from keras_vit_tools import benchmark_startup

    held = bytearray(300 * 2**20)  # the parent's memory is not the child's
    small = benchmark_startup.measure([sys.executable, "-c", "pass"], {}, 60)
    large = benchmark_startup.measure([sys.executable, "-c", "x = bytearray(300 * 2**20); x[::4096] = b'1' * len(x[::4096])"],
                                      {}, 60)
    del held
    assert small["status"] == large["status"] == "ok"
    assert large["peak_rss_mib"] > 300 > 100 > small["peak_rss_mib"]
    assert large["wall_s"] >= large["cpu_s"] * 0.5 > 0
    failed = benchmark_startup.measure([sys.executable, "-c", "raise SystemExit('no such model')"], {}, 60)
    assert failed == {"status": "error", "reason": "exit code 1: no such model"}
    cases = benchmark_startup.commands(tmp_path, "d", "c", "i.png", backends=("torch", "jax"))
    assert sorted({key[0] for key in cases}) == ["classify", "depth", "import"]
    assert cases[("import", "keras_vit", "jax")] == ([sys.executable, "-c", "import keras_vit"], {"KERAS_BACKEND": "jax"})
    rows = {key: {"status": "ok", "wall_s": 2.0, "cpu_s": 1.0, "peak_rss_mib": 1.0} for key in cases}
    rows[("depth", "transformers", "torch")].update(wall_s=4.0, cpu_s=4.0)
    ratios = benchmark_startup.ratio_rows(rows)
    assert ("keras-vit depth / transformers pipeline", "jax", 0.5, 0.25) in ratios
    assert ("import keras_vit / import keras", "torch", 1.0, 1.0) in ratios and len(ratios) == 6
    assert "| keras-vit depth / transformers pipeline | torch | 0.50 | 0.25 |" in benchmark_startup.table(rows)
