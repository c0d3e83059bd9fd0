"""What the dense examples (`examples/segment.py`, `examples/depth.py`) share.

The flags every run takes (the data folders, the encoder, the schedule, the
output folder), the encoder they start from (DeiT-Tiny's `.npz`, any preset
`keras_vit.from_preset` reads, or a tiny random one for `--smoke`), the
training loop of exactly `--steps` updates, the synthetic folder each
writes when run offline, and the captioned grid of pictures.
"""

import argparse
import json
import os
import shutil
import time

from tools.front_end import THREADS_HELP

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
DEIT = os.path.join(ROOT, "..", "shared", "weights", "deit_tiny_patch16_224.npz")
# A ViT small enough for a seconds-long run (most of which is compiling it).
SMOKE_ENCODER = dict(image_size=32, patch_size=8, hidden_size=16, num_layers=1, num_heads=2, mlp_dim=32)
# What a synthetic folder holds beside images/ and its targets: a run only
# replaces a folder it wrote itself.
MARKER = "SYNTHETIC.txt"


def add_common_arguments(parser, out, lr):
    """The flags of both examples; `out` and `lr` are the example's defaults."""
    a = parser.add_argument
    a("--data", default=None, help="training folder: images/ with masks/ or depth/ beside it, files paired by name; default: a synthetic folder written into --out first")
    a("--test-data", default=None, help="held-out folder of the same layout; default: --validation-split of the --data images (the synthetic run writes its own)")
    a("--validation-split", type=float, default=0.2, help="share of the --data images held out when --test-data is not given (a fixed choice given --seed)")
    a("--weights", default=DEIT, help="DeiT-Tiny .npz of the encoder (ViT-Ti/16, exact GELU, ImageNet mean and std), or 'none' for a random one")
    a("--preset", default=None, help="start from any preset keras_vit.from_preset reads instead (a folder, hf://org/name, a short name): an image model, or a task model of this example's kind")
    a("--image-size", type=int, default=112, help="image side the model trains on, a multiple of the patch size (the images are resized to it)")
    a("--steps", type=int, default=300, help="parameter updates of each training run, exactly")
    a("--batch-size", type=int, default=8, help="images per update")
    a("--lr", type=float, default=lr, help="AdamW peak learning rate (linear warm-up over a tenth of the run, then cosine decay)")
    a("--out", default=out, help="folder for the pictures, results.json, the fine-tuned presets and the synthetic data")
    a("--save-presets", action=argparse.BooleanOptionalAction, default=True, help="write each fine-tuned model as a keras_vit preset in --out (keras_vit.from_preset, keras-vit segment / depth read it)")
    a("--pictures", type=int, default=4, help="held-out photos drawn in the picture")
    a("--seed", type=int, default=0, help="seed of the data, the split and the initialisation")
    a("--threads", type=int, default=None, help=THREADS_HELP)
    a("--verbose", type=int, default=2, choices=(0, 1, 2), help="model.fit verbosity: 1 progress bar, 2 one line")


def check_arguments(args):
    """Refuses values no run can use, naming the flag, before any work."""
    for flag in ("image_size", "steps", "batch_size"):
        if getattr(args, flag) < 1:
            raise SystemExit(f"--{flag.replace('_', '-')} must be at least 1. Received: {getattr(args, flag)}")
    if not 0 < args.validation_split < 1:
        raise SystemExit(f"--validation-split must be in (0, 1). Received: {args.validation_split}")
    if args.pictures < 0:
        raise SystemExit(f"--pictures must be 0 or more. Received: {args.pictures}")
    if args.test_data is not None and args.data is None:
        raise SystemExit("--test-data needs --data (the synthetic run writes its own held-out folder).")
    weights = None if args.weights in (None, "none") else args.weights
    if not args.smoke and args.preset is None and weights is not None and not os.path.isfile(weights):
        raise SystemExit(f"--weights {weights!r} does not exist: give the DeiT-Tiny .npz, a --preset, or "
                         "--weights none (a random encoder).")


def processing(encoder, size):
    """The `DenseProcessing` of a task on `encoder`: its checkpoint's mean,
    std and filter (ImageNet's for a file that records none, as DeiT's
    `.npz`), an exact resize to `size`."""
    from keras_vit import DenseProcessing

    record = getattr(encoder, "preprocessing", None)
    if record is None:
        return DenseProcessing(size=(size, size), resize="exact")
    return DenseProcessing(mean=record.mean, std=record.std, size=(size, size), resize="exact",
                           interpolation=record.interpolation)


def encoder_or_task(args, task, smoke_layers=1, **task_overrides):
    """A fresh encoder (include_top=False; `smoke_layers` blocks for `--smoke`)
    or, from a `--preset` of a `task` model, that model, at `--image-size`
    with its weights loaded."""
    import keras_vit
    from keras_vit.presets import tasks as task_presets

    size = args.image_size
    if args.smoke:
        return keras_vit.ViT(**dict(SMOKE_ENCODER, image_size=size, num_layers=smoke_layers), include_top=False,
                             seed=args.seed)
    if args.preset is None:
        weights = None if args.weights == "none" else args.weights
        # DeiT's exact GELU: the .npz does not say which.
        return keras_vit.ViTTi16(image_size=size, include_top=False, weights=weights, mlp_activation="gelu",
                                 seed=args.seed)
    directory = keras_vit.presets.preset_directory(args.preset)
    row = task_presets.task_preset(directory, keras_vit.presets.detect_layout(directory))
    if row is None:
        return keras_vit.from_preset(directory, include_top=False, image_size=size)
    if row.task_class != task:
        raise SystemExit(f"--preset {args.preset!r} holds a {row.task_class}: this example takes an image model "
                         f"or a {task}.")
    return keras_vit.from_preset(directory, image_size=size, **task_overrides)


def image_files(folder):
    """The image paths of `folder/images`, in the order the folder readers load them."""
    from keras_vit.tasks.dense_data import IMAGE_SUFFIXES

    directory = os.path.join(folder, "images")
    return [os.path.join(directory, n) for n in sorted(os.listdir(directory)) if n.lower().endswith(IMAGE_SUFFIXES)]


def held_out(count, share, seed):
    """`(train, test)` index arrays: a fixed random `share` of `count` held out."""
    import numpy as np

    order = np.random.default_rng(seed).permutation(count)
    test = max(1, int(round(share * count)))
    if test >= count:
        raise SystemExit(f"--data holds {count} images: too few to hold out {share} of them.")
    return np.sort(order[test:]), np.sort(order[:test])


def synthetic_folder(root, kind, description):
    """A fresh `root/kind` for synthetic data: created, or replaced when an
    earlier run wrote it (its marker file); any other existing folder is refused."""
    folder = os.path.join(root, kind)
    if os.path.exists(folder):
        if not os.path.isfile(os.path.join(folder, MARKER)):
            raise SystemExit(f"{folder!r} exists and was not written by this example: choose another --out.")
        shutil.rmtree(folder)
    os.makedirs(folder)
    with open(os.path.join(folder, MARKER), "w") as handle:
        handle.write(description + "\nRewritten by each run of the example with this --out.\n")
    return folder


def optimizer(lr, steps):
    """AdamW with a linear warm-up over a tenth of `steps`, then cosine decay to 0."""
    import keras

    warmup = max(1, steps // 10)
    schedule = keras.optimizers.schedules.CosineDecay(0.0, max(1, steps - warmup), warmup_target=lr,
                                                      warmup_steps=warmup)
    return keras.optimizers.AdamW(schedule, weight_decay=0.05, clipnorm=1.0)


def fit_steps(model, x, y, args, callbacks=()):
    """`args.steps` updates of `args.batch_size` over shuffled passes of `(x, y)`;
    returns `(last loss, seconds)`."""
    import numpy as np

    rng = np.random.default_rng(args.seed)
    batch = min(args.batch_size, len(x))

    def batches():
        while True:
            order = rng.permutation(len(x))
            for i in range(0, len(x) - batch + 1, batch):
                yield x[order[i : i + batch]], y[order[i : i + batch]]

    start = time.perf_counter()
    history = model.fit(batches(), steps_per_epoch=args.steps, epochs=1, shuffle=False,
                        verbose=args.verbose, callbacks=list(callbacks))
    return float(history.history["loss"][-1]), time.perf_counter() - start


def resize_panel(array, height, nearest=False):
    """`array` (H, W[, 3]) resized to `height` rows, its aspect ratio kept."""
    import numpy as np
    from PIL import Image

    width = max(1, round(array.shape[1] * height / array.shape[0]))
    image = Image.fromarray(array)
    filter = Image.Resampling.NEAREST if nearest else Image.Resampling.BILINEAR
    return np.asarray(image.resize((width, height), filter))


def grid_picture(rows, titles, gap=4):
    """Rows of panels (uint8 `(H, W, 3)`, one height per row) under a header
    of `titles` (one per column, the widths of the first row's panels)."""
    import numpy as np
    from PIL import Image, ImageDraw, ImageFont

    header = 16
    widths = [max(row[c].shape[1] for row in rows) for c in range(len(rows[0]))]
    height = header + sum(row[0].shape[0] + gap for row in rows)
    width = sum(widths) + gap * (len(widths) - 1)
    canvas = Image.new("RGB", (width, height), (255, 255, 255))
    draw, font = ImageDraw.Draw(canvas), ImageFont.load_default()
    lefts = np.cumsum([0] + [w + gap for w in widths[:-1]])
    for left, title in zip(lefts, titles):
        draw.text((int(left) + 2, 2), title, fill=(0, 0, 0), font=font)
    top = header
    for row in rows:
        for left, panel in zip(lefts, row):
            canvas.paste(Image.fromarray(panel), (int(left), top))
        top += row[0].shape[0] + gap
    return np.asarray(canvas)


def write_results(path, results):
    os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
    with open(path, "w") as handle:
        json.dump(results, handle, indent=1)
    return path
