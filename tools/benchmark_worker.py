"""Runs one benchmark case in its own process and prints its result as JSON.

`tools/benchmark.py` starts this file once per (system, workload, dtype), so
that no two systems share a process, a thread pool, a compilation cache or a
memory high-water mark. Usage:

    python tools/benchmark_worker.py '{"system": "keras_vit-jax", ...}'

The last line printed is `RESULT <json>`.
"""

import gc
import json
import os
import resource
import statistics
import sys
import time


if __name__ == "__main__":
    # Run as a script (tools/ is sys.path[0]): this checkout's tools.
    import checkout

    checkout.bind_tools()

from keras_vit_tools.benchmark import ARCHS, DINOV3_CONFIG, TIMM_ARCHS, skip_reason  # noqa: E402
from keras_vit_tools.benchmark_tasks import TASK_ARCHS  # noqa: E402

CLASSES = 1000
DINOV3_ARCHS = {arch for arch in ARCHS if arch.startswith("DINOv3")}


def rss_mib():
    """Current resident set size in MiB (Linux /proc, else the high-water mark)."""
    try:
        with open("/proc/self/statm") as f:
            return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE") / 2**20
    except OSError:
        return peak_rss_mib()


def device_peak_mib(system):
    """Peak accelerator memory of this process in MiB, None on a CPU."""
    try:
        if system.startswith(("hf", "timm")) or system.endswith("torch") or "-torch+" in system:
            import torch

            if torch.cuda.is_available():
                return torch.cuda.max_memory_allocated() / 2**20
        elif "-jax" in system:
            import jax

            device = jax.devices()[0]
            if device.platform != "cpu":
                return (device.memory_stats() or {}).get("peak_bytes_in_use", 0) / 2**20
        elif "-tensorflow" in system:
            import tensorflow as tf

            if tf.config.list_logical_devices("GPU"):
                return tf.config.experimental.get_memory_info("GPU:0")["peak"] / 2**20
    except (ImportError, RuntimeError, ValueError, KeyError):
        return None
    return None


def peak_rss_mib():
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    return peak / 1024 if sys.platform != "darwin" else peak / 2**20


def _timed(fn, warmup, reps):
    """(time of the first call, [times of `reps` calls after `warmup` more])."""
    start = time.perf_counter()
    fn()
    first = time.perf_counter() - start
    for _ in range(warmup):
        fn()
    times = []
    for _ in range(reps):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return first, times


# ----------------------------------------------------------------- Keras --
def dinov3_config(arch, image):
    """The transformers config dict of a DINOv3 `arch` at `image` pixels."""
    patch, hidden, layers, heads, mlp = ARCHS[arch]
    return dict(DINOV3_CONFIG, patch_size=patch, hidden_size=hidden, num_hidden_layers=layers,
                num_attention_heads=heads, intermediate_size=mlp, image_size=image)


def _keras_dinov3(library, arch, image):
    """DINOv3 in keras_vit (read from the transformers config, as a
    checkpoint is) or keras-hub's `DINOV3Backbone`: features, no head."""
    config = dinov3_config(arch, image)
    if library == "keras_vit":
        # keras_vit takes whole patches only: it runs on the crop that the
        # peers' stride-`patch` convolution reads (518 px: 512).
        config["image_size"] = image - image % config["patch_size"]
        import keras_vit
        from keras_vit.families.dinov3 import TransformersDinov3

        return keras_vit.ViT(**TransformersDinov3().model_arguments(config))
    from keras_hub.models import DINOV3Backbone

    return DINOV3Backbone(
        patch_size=config["patch_size"], num_layers=config["num_hidden_layers"],
        hidden_dim=config["hidden_size"], num_heads=config["num_attention_heads"],
        intermediate_dim=config["intermediate_size"], num_register_tokens=config["num_register_tokens"],
        layer_scale_init_value=config["layerscale_value"], use_key_bias=config["key_bias"],
        rope_theta=config["rope_theta"], apply_layernorm=True, image_shape=(image, image, 3),
    )


class Unavailable(Exception):
    """A system that has no model of the workload's architecture (reported as skipped)."""


def timm_arguments(arch, image):
    """timm's model function and its arguments for a `TIMM_ARCHS` architecture."""
    name, changes = TIMM_ARCHS[arch]
    return name, dict(changes, img_size=image, num_classes=CLASSES)


def _keras_timm(library, arch, image):
    """keras_vit's model of a timm architecture, from timm's arguments as its
    Hub reader takes them (random weights)."""
    if library != "keras_vit":
        raise Unavailable(f"{library} has no {arch}")
    import keras_vit
    from keras_vit.families import timm_zoo

    name, model_args = timm_arguments(arch, image)
    args, _ = timm_zoo.model_arguments({"architecture": name, "model_args": model_args, "pretrained_cfg": {}})
    return keras_vit.ViT(**args)


def _keras_model(library, arch, image):
    import keras

    if arch in DINOV3_ARCHS:
        return _keras_dinov3(library, arch, image)
    if arch in TIMM_ARCHS:
        return _keras_timm(library, arch, image)
    patch, hidden, layers, heads, mlp = ARCHS[arch]
    if library == "keras_vit":
        import keras_vit

        return keras_vit.ViT(
            image_size=image,
            patch_size=patch,
            hidden_size=hidden,
            num_layers=layers,
            num_heads=heads,
            mlp_dim=mlp,
            classes=CLASSES,
            classifier_activation=None,
        )
    from keras_hub.models import ViTBackbone

    backbone = ViTBackbone(
        image_shape=(image, image, 3),
        patch_size=patch,
        num_layers=layers,
        num_heads=heads,
        hidden_dim=hidden,
        mlp_dim=mlp,
    )
    inputs = keras.Input((image, image, 3))
    tokens = backbone(inputs)
    logits = keras.layers.Dense(CLASSES, name="head")(tokens[:, 0])
    return keras.Model(inputs, logits)


def run_keras(spec, x, y):
    import keras

    library, _, variant = spec["system"].partition("-")
    backend, _, option = variant.partition("+")
    if keras.backend.backend() != backend:
        raise RuntimeError(f"KERAS_BACKEND={keras.backend.backend()}, wanted {backend}")
    if spec["dtype"] == "bfloat16":
        # Inference: bfloat16 weights, as HF's bfloat16 rows; training keeps
        # float32 weights (mixed precision, as HF's autocast rows).
        keras.config.set_dtype_policy("mixed_bfloat16" if spec["kind"] == "train" else "bfloat16")
    start = time.perf_counter()
    model = _keras_model(library, spec["arch"], spec["image"])
    if option == "frozen":
        # keras_vit's inference copy, per-call work done once (on torch, the
        # projection kernels in oneDNN's layout); the original is let go, as
        # a script that keeps only the copy would.
        model = model.for_inference()
        gc.collect()
    # The batch lives on the model's device before the clock starts, as
    # HF's and timm's tensors do: on a GPU a host batch of B/16 at 64 images
    # (38 MB) would add its copy to every call.
    if library == "keras_vit" and spec["arch"] in DINOV3_ARCHS:
        whole = spec["image"] - spec["image"] % ARCHS[spec["arch"]][0]
        x = x[:, :whole, :whole]
    x, y = keras.ops.convert_to_tensor(x), keras.ops.convert_to_tensor(y)
    jit = {"compile": True, "eager": False}.get(option, "auto")
    if option == "int8":
        model.quantize("int8")  # Keras' own int8: Dense and EinsumDense layers
    if spec["kind"] == "train":
        model.compile(
            optimizer=keras.optimizers.AdamW(1e-4),
            loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True),
            jit_compile=jit,
        )
        step = lambda: model.train_on_batch(x, y)  # noqa: E731
    else:
        if jit != "auto":
            model.compile(jit_compile=jit)
        step = lambda: model.predict_on_batch(x)  # noqa: E731
    build = time.perf_counter() - start
    first, times = _timed(step, spec["warmup"], spec["reps"])
    info = {"backend": keras.backend.backend(), "jit_compile": str(model.jit_compile), "keras": keras.__version__}
    return build, first, times, info, step


# -------------------------------------------------------------- HF / timm --
def _hf_model(spec):
    import transformers

    if spec["arch"] in TIMM_ARCHS:
        raise Unavailable(f"transformers has no {spec['arch']}")
    impl = spec["system"].split("-", 1)[1]
    if spec["arch"] in DINOV3_ARCHS:
        config = transformers.DINOv3ViTConfig(**dinov3_config(spec["arch"], spec["image"]))
        config._attn_implementation = impl
        return transformers.DINOv3ViTModel(config), {"transformers": transformers.__version__, "attn": impl}
    patch, hidden, layers, heads, mlp = ARCHS[spec["arch"]]
    config = transformers.ViTConfig(
        hidden_size=hidden,
        num_hidden_layers=layers,
        num_attention_heads=heads,
        intermediate_size=mlp,
        image_size=spec["image"],
        patch_size=patch,
        num_labels=CLASSES,
        hidden_act="gelu",
    )
    config._attn_implementation = impl
    model = transformers.ViTForImageClassification(config)
    return model, {"transformers": transformers.__version__, "attn": impl}


def _timm_model(spec):
    # timm imports torchvision, whose CUDA build does not import beside a CPU torch.
    from keras_vit_tools.torchvision_stub import import_timm

    timm = import_timm()  # raises ImportError where timm is unusable
    if spec["arch"] in TIMM_ARCHS:
        name, args = timm_arguments(spec["arch"], spec["image"])
        return timm.create_model(name, pretrained=False, **args), {"timm": timm.__version__}
    patch, hidden, layers, heads, mlp = ARCHS[spec["arch"]]
    from timm.models.vision_transformer import VisionTransformer

    model = VisionTransformer(
        img_size=spec["image"],
        patch_size=patch,
        embed_dim=hidden,
        depth=layers,
        num_heads=heads,
        mlp_ratio=mlp / hidden,
        num_classes=CLASSES,
    )
    return model, {"timm": timm.__version__}


def torch_device():
    """"cuda" where torch sees a GPU, else "cpu"."""
    import torch

    return "cuda" if torch.cuda.is_available() else "cpu"


def run_torch_module(spec, x, y):
    import torch

    device = torch_device()
    start = time.perf_counter()
    if spec["system"].startswith("hf"):
        model, info = _hf_model(spec)
        output = "pooler_output" if spec["arch"] in DINOV3_ARCHS else "logits"
        forward = lambda inp: getattr(model(pixel_values=inp), output)  # noqa: E731
    else:
        model, info = _timm_model(spec)
        forward = model
    bf16 = spec["dtype"] == "bfloat16"
    model.to(device)
    xt = torch.from_numpy(x).permute(0, 3, 1, 2).contiguous().to(device)
    if spec["kind"] == "train":
        model.train()
        yt = torch.from_numpy(y).long().to(device)
        opt = torch.optim.AdamW(model.parameters(), lr=1e-4)
        loss_fn = torch.nn.CrossEntropyLoss()

        def step():
            # Mixed precision: float32 weights, bfloat16 matmuls (autocast).
            with torch.autocast(device, dtype=torch.bfloat16, enabled=bf16):
                loss = loss_fn(forward(xt).float(), yt)
            opt.zero_grad(set_to_none=True)
            loss.backward()
            opt.step()
            return float(loss)

    else:
        model.eval()
        if bf16:  # the usual torch inference recipe: bfloat16 weights
            model.to(torch.bfloat16)
            xt = xt.to(torch.bfloat16)

        def step():
            with torch.inference_mode():
                return forward(xt).float().cpu().numpy()

    build = time.perf_counter() - start
    first, times = _timed(step, spec["warmup"], spec["reps"])
    info.update(torch=torch.__version__, threads=torch.get_num_threads(), device=device)
    return build, first, times, info, step


def torch_profile(step, rows=10):
    """The operators of one more `step`, by self CPU time (torch.profiler)."""
    from torch.profiler import ProfilerActivity, profile

    with profile(activities=[ProfilerActivity.CPU]) as prof:
        step()
    events = sorted(prof.key_averages(), key=lambda e: e.self_cpu_time_total, reverse=True)
    total = sum(e.self_cpu_time_total for e in events) or 1
    return [
        {
            "op": e.key,
            "self_ms": e.self_cpu_time_total / 1e3,
            "share": e.self_cpu_time_total / total,
            "calls": e.count,
        }
        for e in events[:rows]
    ]


# ------------------------------------------------------------- matmul peak --
def _matmul_rate(matmul, make, largest, reps, budget_s=2.0):
    """(GFLOP/s, n) of `matmul` on square operands of side n <= `largest`.

    n doubles from 256 while one product takes less than `budget_s` / 8, so a
    dtype that the CPU only emulates (bfloat16 without avx512_bf16 or AMX
    runs hundreds of times slower) is measured on a smaller matrix instead of
    taking minutes.
    """
    n = min(256, largest)
    while True:
        a, b = make(n), make(n)
        matmul(a, b)  # jax compiles for each shape; libraries load their kernels
        start = time.perf_counter()
        matmul(a, b)
        elapsed = time.perf_counter() - start
        if n >= largest or elapsed * 8 > budget_s:
            break
        n *= 2
    _, times = _timed(lambda: matmul(a, b), 1, reps)
    return 2 * n**3 / statistics.median(times) / 1e9, n


def _peak_products(library, device):
    """{dtype: (matmul(a, b) -> synced result, make(n) -> operand)} of one library.

    bfloat16 products are each library's fastest form on a CPU with bf16
    units: torch `mm` and tensorflow's oneDNN `MatMul` on bfloat16 tensors,
    jax with a float32 result (`preferred_element_type`, the only form
    that XLA's CPU backend runs faster than float32).
    """
    import numpy as np

    if library == "torch":
        import torch

        # On a GPU: IEEE float32 (no TF32), and the products are waited for.
        torch.backends.cuda.matmul.allow_tf32 = False

        def matmul(a, b):
            out = torch.mm(a, b)
            if device == "cuda":
                torch.cuda.synchronize()
            return out

        return {d: (matmul, lambda n, d=getattr(torch, d): torch.randn(n, n, device=device).to(d))
                for d in ("float32", "bfloat16")}
    if library == "tensorflow":
        import tensorflow as tf

        return {d: (lambda a, b: tf.matmul(a, b).numpy(),
                    lambda n, d=d: tf.cast(tf.random.normal((n, n)), d))
                for d in ("float32", "bfloat16")}
    rand = lambda n: np.random.default_rng(0).random((n, n), dtype=np.float32)  # noqa: E731
    if library == "jax":
        import jax
        import jax.numpy as jnp

        f32 = jax.jit(jnp.matmul)
        wide = jax.jit(lambda a, b: jnp.matmul(a, b, preferred_element_type=jnp.float32))
        return {
            "float32": (lambda a, b: f32(a, b).block_until_ready(),
                        lambda n: jnp.asarray(rand(n), jnp.float32)),
            "bfloat16": (lambda a, b: wide(a, b).block_until_ready(),
                         lambda n: jnp.asarray(rand(n), jnp.bfloat16)),
        }
    return {"float32": (np.matmul, rand)}


def _peak_device(library):
    """"cuda" where the library computes on a GPU, else "cpu"."""
    if library == "torch":
        return torch_device()
    if library == "jax":
        import jax

        return "cpu" if jax.default_backend() == "cpu" else "cuda"
    return "cpu"


def run_peak(spec):
    """GFLOP/s of a large square matmul per library and dtype.

    `spec["library"]` is one of torch, tensorflow, jax, numpy (default: torch
    and numpy, in one process); each library's case runs in its own process.
    """
    largest = spec["matmul_size"]
    out, sizes = {}, {}
    for library in spec.get("libraries", ("torch", "numpy")):
        try:
            device = _peak_device(library)
            products = _peak_products(library, device)
        except ImportError:
            continue
        size = max(largest, 16384) if device == "cuda" else largest  # GPUs need larger products
        for dtype, (matmul, make) in products.items():
            key = f"{library}_{dtype}"
            out[key], sizes[key] = _matmul_rate(matmul, make, size, spec["reps"])
    return {"status": "ok", "matmul_size": largest, "sizes": sizes, "gflops": out}


def run_task(spec, x):
    """A task case (`tools/benchmark_tasks.py`), or None for a system without one."""
    from keras_vit_tools import benchmark_tasks

    system = spec["system"]
    if "+" in system or spec["dtype"] != "float32":
        return None  # transformers' task models too: they would run in float32 under another label
    if system.startswith("hf-"):
        return benchmark_tasks.run_hf(spec, x, _timed)
    if system.startswith("keras_vit-"):
        build, step, info = benchmark_tasks.run_keras_task(spec, x, apart=True)
    elif system.startswith("keras_hub-"):
        if benchmark_tasks.CONFIGS[spec["arch"]][0] not in benchmark_tasks.KERAS_HUB_TASKS:
            raise Unavailable(f"keras_hub has no {spec['arch']}")
        build, step, info = benchmark_tasks.run_keras_hub_task(spec, x)
    else:
        return None
    first, times = _timed(step, spec["warmup"], spec["reps"])
    return build, first, times, info, step


def run(spec):
    import numpy as np

    if spec["system"] == "peak":
        return run_peak(spec)
    deployed = spec["system"].startswith(("ort-", "openvino-"))
    reason = skip_reason(spec)
    if reason is not None:
        return {"status": "skipped", "reason": reason}
    rng = np.random.default_rng(0)
    batch, image = spec["batch"], spec["image"]
    x = rng.standard_normal((batch, image, image, 3), dtype=np.float32)
    y = rng.integers(0, CLASSES, size=(batch,)).astype("int32")
    keras_system = spec["system"].startswith(("keras_vit", "keras_hub"))
    # Import the framework first so that the memory baseline includes it.
    if deployed:
        import keras  # noqa: F401

        import keras_vit  # noqa: F401
    elif keras_system:
        import keras  # noqa: F401

        __import__(spec["system"].split("-")[0])
    else:
        import torch  # noqa: F401

        if spec["system"].startswith("hf"):
            import transformers  # noqa: F401
    rss_before = rss_mib()
    if spec["arch"] in TASK_ARCHS:
        case = run_task(spec, x)
        if case is None:
            return {"status": "skipped", "reason": "tasks: float32 on keras_vit, keras-hub and transformers only"}
        build, first, times, info, step = case
        torch_engine = spec["system"].startswith("hf") or "-torch" in spec["system"]
    elif deployed:
        from keras_vit_tools.benchmark_deploy import run_deployed

        build, first, times, info, step = run_deployed(spec, x, _timed, _hf_model)
        torch_engine = False
    elif keras_system:
        build, first, times, info, step = run_keras(spec, x, y)
        torch_engine = "-torch" in spec["system"]
    else:
        build, first, times, info, step = run_torch_module(spec, x, y)
        torch_engine = True
    median = statistics.median(times)
    if spec.get("profile") and torch_engine:
        info["profile"] = torch_profile(step)
    return {
        "status": "ok",
        "images_per_s": batch / median,
        "median_s": median,
        "times_s": times,
        "build_s": build,
        "first_s": first,
        "peak_rss_mib": peak_rss_mib(),
        "device_peak_mib": device_peak_mib(spec["system"]),
        "rss_after_import_mib": rss_before,
        "info": info,
    }


def main(argv=None):
    argv = sys.argv[1:] if argv is None else argv
    spec = json.loads(argv[0])
    try:
        result = run(spec)
    except (ImportError, Unavailable) as err:
        result = {"status": "skipped", "reason": f"{type(err).__name__}: {err}"}
    except Exception as err:  # reported in the table, not fatal to the run
        import traceback

        traceback.print_exc()
        result = {"status": "error", "reason": f"{type(err).__name__}: {err}"}
    print("RESULT " + json.dumps(result), flush=True)


if __name__ == "__main__":
    main()
