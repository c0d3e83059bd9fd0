"""The cases of `tools/benchmark.py`: its systems, workloads (architecture,
image size, batch), the architectures' sizes and the presets' lists of
cases. The module docstring of `tools/benchmark.py` says what each
measures."""

SYSTEMS = (
    "keras_vit-jax",
    "keras_vit-tensorflow",
    "keras_vit-torch",
    "keras_hub-jax",
    "keras_hub-tensorflow",
    "keras_hub-torch",
    "hf-sdpa",
    "hf-eager",
    "timm",
)
# Deployment: Keras' int8 per backend, exported models in ONNX Runtime and
# OpenVINO (tools/benchmark_deploy.py), HF exported with torch.onnx.
DEPLOY_SYSTEMS = (
    "keras_vit-jax",
    "keras_vit-tensorflow",
    "keras_vit-torch",
    "keras_vit-jax+int8",
    "keras_vit-tensorflow+int8",
    "keras_vit-torch+int8",
    "ort-keras_vit",
    "ort-keras_vit+int8",
    "openvino-keras_vit",
    "openvino-keras_vit+bf16",
    "openvino-keras_vit+int8",
    "keras_hub-jax",
    "keras_hub-tensorflow",
    "keras_hub-torch",
    "hf-sdpa",
    "hf-eager",
    "ort-hf",
    "ort-hf+int8",
)
DEPLOY_WORKLOADS = ("infer-b16-bs1", "infer-b16-bs8")
# name: (kind, architecture, image size, batch)
WORKLOADS = {
    "infer-b16-bs1": ("infer", "B/16", 224, 1),
    "infer-b16-bs8": ("infer", "B/16", 224, 8),
    "train-s16-bs16": ("train", "S/16", 224, 16),
    "infer-l16-bs8": ("infer", "L/16", 224, 8),
    "infer-b16-384-bs8": ("infer", "B/16", 384, 8),
    # High resolution, batch 1: 577 tokens (B/16 at 384 px, the fine-tuning
    # size of the Google checkpoints) and 1,370 (a /14 model at 518 px, as
    # DINOv2 runs), where attention's share of the work grows.
    "infer-b16-384-bs1": ("infer", "B/16", 384, 1),
    "infer-b14-518-bs1": ("infer", "B/14", 518, 1),
    # Accelerator sizes (`--workloads gpu`).
    "infer-b16-bs64": ("infer", "B/16", 224, 64),
    "infer-l16-bs64": ("infer", "L/16", 224, 64),
    "train-b16-bs32": ("train", "B/16", 224, 32),
    "train-l16-bs32": ("train", "L/16", 224, 32),
    # DINOv3 ViT-B/16 (rotary position embedding, 4 registers, layer
    # scale) at its training size and at DINOv2's dense-task size.
    "infer-dinov3-b16-bs1": ("infer", "DINOv3-B/16", 224, 1),
    "infer-dinov3-b16-518-bs1": ("infer", "DINOv3-B/16", 518, 1),
    # Perception Encoder's large core tower (rotary positions, attention
    # pool) at its 336 px, as timm builds it from its model function and
    # keras_vit from the same arguments (`TIMM_ARCHS`); each backend against
    # timm's own model (`--preset pe`).
    "infer-pe-l14-336-bs1": ("infer", "PE-L/14", 336, 1),
    "infer-pe-l14-336-bs32": ("infer", "PE-L/14", 336, 32),
    "infer-tiny-bs2": ("infer", "tiny", 32, 2),
    "train-tiny-bs2": ("train", "tiny", 32, 2),
    "infer-pe-tiny-bs2": ("infer", "PE-tiny", 28, 2),
    # Tasks (tools/benchmark_tasks.py): OWLv2 B/16 at 960 px with one text
    # query, SAM ViT-B's image encoder at 1024 px, and SAM's prompt decoder
    # per click (prompts/s).
    "infer-owlv2-b16-960-bs1": ("infer", "OWLv2-B/16", 960, 1),
    "infer-sam-b-1024-bs1": ("infer", "SAM-B", 1024, 1),
    "infer-sam-decoder-bs1": ("infer", "SAM-decoder", 1024, 1),
    "infer-owlv2-tiny-bs1": ("infer", "OWLv2-tiny", 32, 1),
    "infer-sam-tiny-bs1": ("infer", "SAM-tiny", 32, 1),
    "infer-sam-decoder-tiny-bs1": ("infer", "SAM-decoder-tiny", 32, 1),
    # Dense tasks (tools/benchmark_tasks.py): Depth Anything V2 Small at its
    # 518 px (37 x 37 patches), EoMT-S at its 640 px (40 x 40 patches and
    # 200 queries).
    "infer-da2-s-518-bs1": ("infer", "DA2-S", 518, 1),
    "infer-eomt-s-640-bs1": ("infer", "EoMT-S", 640, 1),
    "infer-da2-tiny-bs1": ("infer", "DA2-tiny", 56, 1),
    "infer-eomt-tiny-bs1": ("infer", "EoMT-tiny", 32, 1),
}
TASK_WORKLOADS = ("infer-owlv2-b16-960-bs1", "infer-sam-b-1024-bs1", "infer-sam-decoder-bs1")
TASK_SMOKE_WORKLOADS = ("infer-owlv2-tiny-bs1", "infer-sam-tiny-bs1", "infer-sam-decoder-tiny-bs1")
DENSE_WORKLOADS = ("infer-da2-s-518-bs1", "infer-eomt-s-640-bs1")
DENSE_SMOKE_WORKLOADS = ("infer-da2-tiny-bs1", "infer-eomt-tiny-bs1")
DEFAULT_WORKLOADS = ("infer-b16-bs1", "infer-b16-bs8", "train-s16-bs16")
SMOKE_WORKLOADS = ("infer-tiny-bs2", "train-tiny-bs2")
GPU_WORKLOADS = ("infer-b16-bs64", "infer-l16-bs64", "train-b16-bs32", "train-l16-bs32")
DTYPES = ("float32", "bfloat16")
# (patch, hidden, layers, heads, mlp), as keras_vit's ARCHITECTURE_CONFIGS (a test
# keeps them equal; importing keras_vit here would load Keras into every
# worker, HF's included). "tiny" is for --smoke.
ARCHS = {
    "tiny": (8, 32, 2, 2, 64),
    "S/16": (16, 384, 12, 6, 1536),
    "B/16": (16, 768, 12, 12, 3072),
    "B/14": (14, 768, 12, 12, 3072),  # DINOv2's B/14: B/16 with 14-pixel patches
    "L/16": (16, 1024, 24, 16, 4096),
    # DINOv3's B/16: B/16's sizes, its own block and embedding (the workers
    # build it from `DINOV3_CONFIG`).
    "DINOv3-B/16": (16, 768, 12, 12, 3072),
    "PE-L/14": (14, 1024, 24, 16, 4096),
    "PE-tiny": (14, 32, 2, 2, 128),
}
# The architectures built from a timm model function: (timm name, its
# arguments changed); keras_vit reads the same arguments as it reads a timm
# Hub directory (`keras_vit.families.timm_zoo`), timm calls the function.
TIMM_ARCHS = {
    "PE-L/14": ("vit_pe_core_large_patch14_336", {}),
    "PE-tiny": ("vit_pe_core_large_patch14_336", dict(embed_dim=32, depth=2, num_heads=2)),
}
# Tokens besides the patches: the class token, and DINOv3's 4 registers.
PREFIX_TOKENS = {"DINOv3-B/16": 5}
# The DINOv3 fields of a transformers `DINOv3ViTConfig` (ViT-B/16's release:
# no key bias, layer scale 1.0, rotary base 100); each system builds this model.
DINOV3_CONFIG = dict(model_type="dinov3_vit", architectures=["DINOv3ViTModel"], num_register_tokens=4,
                     query_bias=True, key_bias=False, value_bias=True, proj_bias=True, mlp_bias=True,
                     layerscale_value=1.0, rope_theta=100.0, hidden_act="gelu", layer_norm_eps=1e-5,
                     use_gated_mlp=False, num_channels=3)
# `--preset cpu`: the cases of the CPU comparison, (workloads, dtypes, systems)
# groups. float32 everywhere; bfloat16 inference per backend and for the
# peers at 224 px; the training step in float32.
KERAS_SYSTEMS = ("keras_vit-jax", "keras_vit-tensorflow", "keras_vit-torch",
                 "keras_hub-jax", "keras_hub-tensorflow", "keras_hub-torch")
GPU_SYSTEMS = ("keras_vit-jax", "keras_vit-torch", "keras_hub-jax", "keras_hub-torch")
PRESETS = {
    "cpu": (
        (("infer-b16-bs1", "infer-b16-bs8", "infer-b16-384-bs1", "infer-b14-518-bs1"),
         ("float32",), (*KERAS_SYSTEMS, "hf-sdpa")),
        (("infer-b16-bs1", "infer-b16-bs8"), ("bfloat16",), (*KERAS_SYSTEMS, "hf-sdpa")),
        # torch's `for_inference()` copy keeps its kernels in oneDNN's layout.
        (("infer-b16-bs1", "infer-b16-bs8", "infer-b16-384-bs1", "infer-b14-518-bs1"),
         ("float32",), ("keras_vit-torch+frozen",)),
        (("infer-b16-bs1", "infer-b16-bs8"), ("bfloat16",), ("keras_vit-torch+frozen",)),
        (("infer-b16-bs1", "infer-b16-bs8"), ("float32",),
         ("openvino-keras_vit", "openvino-keras_vit+bf16")),
        (("train-s16-bs16",), ("float32",), (*KERAS_SYSTEMS, "hf-sdpa", "hf-eager")),
    ),
    # `--preset gpu`: the accelerator comparison, most wanted first (a run
    # cut short keeps the cases it finished): bfloat16 inference and mixed
    # precision training of B/16 against keras-hub, HF and timm, then L/16,
    # then float32 inference. tensorflow's systems run where it is installed.
    "gpu": (
        (("infer-b16-bs64",), ("bfloat16",), (*GPU_SYSTEMS, "hf-sdpa", "timm")),
        (("train-b16-bs32",), ("bfloat16",), (*GPU_SYSTEMS, "hf-sdpa", "timm")),
        (("infer-l16-bs64", "train-l16-bs32"), ("bfloat16",),
         ("keras_vit-jax", "keras_vit-torch", "timm")),
        (("infer-b16-bs64",), ("float32",), ("keras_vit-jax", "keras_vit-torch", "hf-sdpa", "timm")),
        (("infer-b16-bs64", "train-b16-bs32"), ("bfloat16",),
         ("keras_vit-tensorflow", "keras_hub-tensorflow")),
    ),
    # `--preset pe`: Perception Encoder L/14 at 336 px on each backend
    # against timm's own model (keras-hub and transformers have none).
    "pe": (
        (("infer-pe-l14-336-bs1",), ("float32", "bfloat16"), ("keras_vit-jax", "keras_vit-tensorflow",
                                                              "keras_vit-torch", "timm")),
    ),
    # `--preset pe-gpu`: the same at batch 32 on an accelerator.
    "pe-gpu": (
        (("infer-pe-l14-336-bs32",), ("bfloat16", "float32"), ("keras_vit-jax", "keras_vit-torch", "timm")),
    ),
    # `--preset dinov3`: DINOv3 B/16 against keras-hub's and transformers'
    # DINOv3 on each backend, at 224 and 518 px.
    "dinov3": (
        (("infer-dinov3-b16-bs1", "infer-dinov3-b16-518-bs1"), ("float32",), (*KERAS_SYSTEMS, "hf-sdpa")),
    ),
    # `--preset tasks`: OWLv2 and SAM against transformers' models of the
    # same config, batch 1, float32 (keras-hub has no OWLv2).
    "tasks": (
        (TASK_WORKLOADS, ("float32",), ("keras_vit-jax", "keras_vit-tensorflow", "keras_vit-torch", "hf-sdpa",
                                        "hf-eager")),
    ),
    # `--preset dense`: Depth Anything V2 Small at 518 px against
    # transformers' and keras-hub's on each backend, and EoMT-S at 640 px
    # against transformers' (keras-hub has no EoMT), batch 1, float32.
    "dense": (
        (DENSE_WORKLOADS[:1], ("float32",), (*KERAS_SYSTEMS, "hf-sdpa")),
        (DENSE_WORKLOADS[1:], ("float32",), (*KERAS_SYSTEMS[:3], "hf-sdpa")),
    ),
}
