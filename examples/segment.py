"""Semantic segmentation with a ViT backbone and ViTDet's simple feature pyramid.

Offline: the data are made here. Handwritten digits of scikit-learn (8x8,
upscaled) are pasted in random colours, sizes and places on textured
backgrounds (smooth colour noise plus stripes); every pixel is labelled
background or the digit's class. The model is a keras_vit backbone's
last-block map (`keras_vit.feature_model`, stride 16), `keras_vit.layers.SimpleFeaturePyramid`
(strides 4, 8, 16, 32) and a light head (the levels upsampled to stride 4
and summed, a 3x3 convolution, a 1x1 convolution to the classes, a
bilinear upsampling to the image), trained with `model.fit` on per-pixel
cross-entropy. It reports the held-out mean IoU of the model and of the
trivial baseline that labels every pixel background (the majority class of
the training pixels).

    python examples/segment.py --smoke                       # seconds, for tests
    python examples/segment.py                                # DeiT-Tiny weights and from scratch
    python examples/segment.py --init pretrained --steps 600  # one of the two

`--weights` is the DeiT-Tiny `.npz` in ../shared/weights by default (ViT-Ti/16,
exact GELU, ImageNet mean/std input); the backbone is built at
`--image-size` (112 by default) and its position embedding resized when
loading.
"""

import json
import os
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from tools.front_end import THREADS_HELP, ArgumentParser, configure_threads, quiet_imports  # noqa: E402

# TensorFlow's C++ start-up notices (oneDNN, CUDA) kept out of the terminal.
quiet_imports("tensorflow", "keras_vit")

import keras  # noqa: E402
import numpy as np  # noqa: E402
import scipy.ndimage  # noqa: E402

import keras_vit  # noqa: E402
from keras_vit.layers import SimpleFeaturePyramid  # noqa: E402

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
DEIT = os.path.join(ROOT, "..", "shared", "weights", "deit_tiny_patch16_224.npz")
DIGITS = (0, 1, 2, 3)  # the foreground classes: 1 + DIGITS.index(d); 0 is background
# A ViT small enough for a seconds-long run.
SMOKE_MODEL = dict(patch_size=8, hidden_size=16, num_layers=2, num_heads=2, mlp_dim=32)


def build_parser():
    p = ArgumentParser(description=__doc__.split("\n\n")[0])
    a = p.add_argument
    a("--init", default="both", choices=("both", "pretrained", "scratch"), help="backbone initialisation: the DeiT-Tiny weights, random, or one run of each")
    a("--weights", default=DEIT, help="checkpoint of the pretrained backbone (ViT-Ti/16 layout)")
    a("--image-size", type=int, default=112, help="image side in pixels (a multiple of the patch size)")
    a("--train-images", type=int, default=2000, help="training images made")
    a("--test-images", type=int, default=300, help="held-out images made (from held-out digits)")
    a("--steps", type=int, default=400, help="training updates per run")
    a("--batch-size", type=int, default=16, help="images per update")
    a("--lr", type=float, default=3e-4, help="AdamW peak learning rate (cosine decay)")
    a("--channels", type=int, default=64, help="channels of the pyramid levels")
    a("--seed", type=int, default=0, help="seed of the data and of the initialisation")
    a("--threads", type=int, default=None, help=THREADS_HELP)
    a("--output", default=None, help="JSON file to write the results to")
    a("--verbose", type=int, default=2, help="model.fit verbosity")
    a("--smoke", action="store_true", help="a tiny random backbone, 32 px, 2 updates, for tests (seconds)")
    return p


def texture(rng, size):
    """Smooth colour noise plus coloured stripes, values in [0, 255]."""
    coarse = rng.uniform(0, 255, size=(4, 4, 3))
    image = scipy.ndimage.zoom(coarse, (size / 4, size / 4, 1), order=1)[:size, :size]
    yy, xx = np.mgrid[:size, :size] / size
    angle, freq = rng.uniform(0, np.pi), rng.uniform(4, 16)
    stripes = np.sin(2 * np.pi * freq * (np.cos(angle) * xx + np.sin(angle) * yy))
    image = image + 40 * stripes[..., None] * rng.uniform(-1, 1, size=3)
    return np.clip(image, 0, 255)


def make_data(rng, count, size, digit_images, digit_labels):
    """`count` images `(size, size, 3)` in [0, 255] and their `(size, size)` masks."""
    images = np.zeros((count, size, size, 3), "float32")
    masks = np.zeros((count, size, size), "int32")
    for n in range(count):
        image, mask = texture(rng, size), np.zeros((size, size), "int32")
        for _ in range(rng.integers(1, 4)):
            pick = rng.integers(len(digit_images))
            side = int(rng.uniform(0.3, 0.5) * size)
            glyph = scipy.ndimage.zoom(digit_images[pick] / 16.0, side / 8, order=1)[:side, :side]
            y, x = rng.integers(0, size - side + 1, size=2)
            alpha = np.clip(glyph, 0, 1)[..., None]
            window = image[y : y + side, x : x + side]
            image[y : y + side, x : x + side] = window * (1 - alpha) + rng.uniform(0, 255, 3) * alpha
            mask[y : y + side, x : x + side][glyph > 0.5] = 1 + DIGITS.index(digit_labels[pick])
        images[n], masks[n] = image, mask
    return images, masks


def datasets(args):
    from sklearn.datasets import load_digits

    digits = load_digits()
    keep = np.isin(digits.target, DIGITS)
    images, labels = digits.images[keep], digits.target[keep]
    split = int(0.8 * len(images))  # held-out images use held-out handwriting
    rng = np.random.default_rng(args.seed)
    train = make_data(rng, args.train_images, args.image_size, images[:split], labels[:split])
    test = make_data(rng, args.test_images, args.image_size, images[split:], labels[split:])
    return train, test


def backbone_map(backbone, images):
    """The backbone's last-block map, `(batch, rows, cols, D)` at stride = patch size
    (prefix tokens dropped, before the final norm)."""
    return keras_vit.feature_model(backbone, feature_blocks=-1)(images)


def build_backbone(args, pretrained):
    if args.smoke:
        return keras_vit.ViT(image_size=args.image_size, include_top=False, seed=args.seed, **SMOKE_MODEL)
    return keras_vit.ViTTi16(
        image_size=args.image_size,
        include_top=False,
        weights=args.weights if pretrained else None,
        mlp_activation="gelu",  # DeiT's exact GELU; the .npz does not say
        seed=args.seed,
    )


def build_model(args, pretrained, classes):
    """Backbone map -> pyramid -> levels upsampled to stride 4 and summed -> classes."""
    backbone = build_backbone(args, pretrained)
    stride = backbone.effective_patch_size[0]
    images = keras.Input(tuple(backbone.image_size) + (3,), name="image")
    levels = SimpleFeaturePyramid(stride, out_channels=args.channels, name="pyramid")(
        backbone_map(backbone, images)
    )
    # Sizes are ceil(image / stride): resize to the finest level's exactly.
    finest = tuple(levels[0].shape[1:3])
    x = levels[0]
    for level in levels[1:]:
        x = x + keras.layers.Resizing(*finest, interpolation="bilinear")(level)
    x = keras.layers.Conv2D(args.channels, 3, padding="same", activation="relu", name="head_conv")(x)
    x = keras.layers.Conv2D(classes, 1, name="head_classes")(x)
    x = keras.layers.Resizing(args.image_size, args.image_size, interpolation="bilinear", name="to_image")(x)
    return keras.Model(images, x, name="segmenter")


def confusion(predictions, masks, classes):
    return np.bincount(masks.ravel() * classes + predictions.ravel(), minlength=classes**2).reshape(
        classes, classes
    )


def mean_iou(matrix):
    """Mean over classes of intersection / union (classes with an empty union left out)."""
    tp = np.diag(matrix).astype("float64")
    union = matrix.sum(0) + matrix.sum(1) - tp
    return float(np.mean(tp[union > 0] / union[union > 0])), (tp / np.maximum(union, 1)).tolist()


def train_and_evaluate(args, pretrained, train, test, classes):
    keras.utils.set_random_seed(args.seed)
    model = build_model(args, pretrained, classes)
    schedule = keras.optimizers.schedules.CosineDecay(args.lr, args.steps)
    model.compile(
        optimizer=keras.optimizers.AdamW(schedule, weight_decay=0.05),
        loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True),
    )
    x = keras_vit.preprocess_input(train[0], mode="imagenet")
    start = time.perf_counter()
    history = _fit_steps(model, x, train[1], args)
    seconds = time.perf_counter() - start
    logits = model.predict(keras_vit.preprocess_input(test[0], mode="imagenet"), batch_size=32, verbose=0)
    miou, per_class = mean_iou(confusion(np.argmax(logits, -1), test[1], classes))
    loss = float(history.history["loss"][-1])
    return dict(mean_iou=miou, per_class_iou=per_class, train_seconds=seconds, final_loss=loss)


def _fit_steps(model, x, y, args):
    """`args.steps` updates over a repeated, shuffled dataset."""
    rng = np.random.default_rng(args.seed)

    def batches():
        while True:
            order = rng.permutation(len(x))
            for i in range(0, len(x) - args.batch_size + 1, args.batch_size):
                pick = order[i : i + args.batch_size]
                yield x[pick], y[pick][..., None]

    return model.fit(batches(), steps_per_epoch=args.steps, epochs=1, shuffle=False, verbose=args.verbose)


def main(argv=None):
    args = build_parser().parse_args(argv)
    configure_threads(args.threads)
    if args.smoke:
        args.image_size, args.train_images, args.test_images = 32, 8, 4
        args.steps, args.batch_size, args.channels, args.verbose = 2, 4, 8, 0
        args.init = "scratch"
    classes = 1 + len(DIGITS)
    train, test = datasets(args)
    # The trivial baseline: every pixel the training pixels' majority class.
    majority = int(np.argmax(np.bincount(train[1].ravel(), minlength=classes)))
    baseline, _ = mean_iou(confusion(np.full_like(test[1], majority), test[1], classes))
    results = dict(
        backend=keras.backend.backend(), baseline_mean_iou=baseline, majority_class=majority,
        args={k: v for k, v in vars(args).items() if k != "output"}, runs={},
    )
    print(f"baseline (every pixel class {majority}): mean IoU {baseline:.3f}")
    inits = ("pretrained", "scratch") if args.init == "both" else (args.init,)
    for init in inits:
        run = train_and_evaluate(args, init == "pretrained", train, test, classes)
        results["runs"][init] = run
        print(
            f"{init}: held-out mean IoU {run['mean_iou']:.3f} (per class "
            f"{', '.join(f'{v:.2f}' for v in run['per_class_iou'])}), "
            f"{args.steps} updates in {run['train_seconds']:.0f} s"
        )
    if args.output:
        with open(args.output, "w") as f:
            json.dump(results, f, indent=1)
    return results


if __name__ == "__main__":
    main()
