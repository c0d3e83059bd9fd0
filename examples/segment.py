"""Fine-tunes keras_vit.Segmenter on a folder of images with PNG masks.

A folder holds `images/` and `masks/` side by side, the files paired by
name (`images/0001.jpg` with `masks/0001.png`); a mask is a palette or
grey-level PNG of class indices, 255 where a pixel has no label
(`keras_vit.tasks.dense_data.load_segmentation_folder` reads and checks
every file before training). `--head` chooses what is trained:

- `eomt`: EoMT (Kerssies et al. 2025, arXiv:2503.19108), learned queries in
  the encoder's last `--num-blocks` blocks, trained end to end with the
  encoder, with masked attention annealed away block after block
  (`MaskAnnealing`) so that the model needs no mask at inference;
- `linear`: the linear protocol of the DINOv2 and DINOv3 papers, a batch
  norm and a 1x1 convolution on the frozen encoder's last-block patches;
- `both` (default): one run of each, on fresh copies of the encoder.

The encoder starts from DeiT-Tiny's ImageNet weights (`--weights`, in
../shared/weights: ViT-Ti/16, exact GELU, ImageNet mean and std) or from any
`--preset` that `keras_vit.from_preset` reads: an image model, or an EoMT
checkpoint, whose class predictor is then replaced for the folder's classes.

Offline, without `--data`, it first writes such a folder itself
(`<out>/data/train` and `<out>/data/test`): handwritten digits of
scikit-learn (8x8, upscaled) pasted in random colours, sizes and places on
textured backgrounds, each pixel labelled background or its digit's class,
the held-out images drawn with held-out handwriting.

It prints and writes (`<out>/results.json`) the held-out mean IoU of each
head and of the trivial baseline (every pixel the training pixels' majority
class), draws `<out>/segments.png` (held-out photos, their true masks and
each head's, with a legend of the classes) and writes each fine-tuned model
as a keras_vit preset (`<out>/eomt`, `<out>/linear`) that
`keras_vit.segment` and `keras-vit segment` read.

    python examples/segment.py --smoke            # a tiny random encoder, seconds (tests)
    python examples/segment.py                    # offline: the synthetic folder, DeiT-Tiny, both heads
    python examples/segment.py --data scenes --test-data scenes_val --head eomt \\
        --class-names background,road,car
    python examples/segment.py --data scenes --preset dinov2_small --head linear --image-size 224
"""

import argparse
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from examples import dense_common as common  # noqa: E402
from tools.front_end import ArgumentParser, configure_threads, quiet_imports  # noqa: E402

HEADS = ("eomt", "linear")
DIGITS = (0, 1, 2, 3)  # the foreground classes: 1 + DIGITS.index(d); 0 is background
SYNTHETIC_NAMES = ("background",) + tuple(f"digit {d}" for d in DIGITS)


def build_parser():
    p = ArgumentParser(description=__doc__.split("\n\n")[0])
    common.add_common_arguments(p, out=os.path.join("runs", "segment"), lr=2e-4)
    a = p.add_argument
    a("--head", default="both", choices=HEADS + ("both",), help="eomt (end to end), linear (frozen encoder) or both, one run each")
    a("--linear-lr", type=float, default=3e-3, help="AdamW peak learning rate of the linear head")
    a("--class-names", default=None, help="comma-separated class names, one per class index; default: the synthetic data's, or the indices the masks hold")
    a("--num-queries", type=int, default=16, help="EoMT's queries (at least the segments of an image)")
    a("--num-blocks", type=int, default=3, help="EoMT: the encoder's last blocks that carry the queries")
    a("--masked-attention", action=argparse.BooleanOptionalAction, default=True, help="EoMT's masked attention in training, annealed to none over the first three quarters of the updates")
    a("--train-images", type=int, default=1000, help="synthetic training images written (offline run)")
    a("--test-images", type=int, default=200, help="synthetic held-out images written (offline run)")
    a("--smoke", action="store_true", help="a tiny random encoder, 32 px, 2 updates per head, for tests (seconds); with --data it trains on that folder")
    return p


# ----------------------------------------------------------- synthetic data


def texture(rng, size):
    """Smooth colour noise plus coloured stripes, values in [0, 255]."""
    import numpy as np
    import scipy.ndimage

    coarse = rng.uniform(0, 255, size=(4, 4, 3))
    image = scipy.ndimage.zoom(coarse, (size / 4, size / 4, 1), order=1)[:size, :size]
    yy, xx = np.mgrid[:size, :size] / size
    angle, freq = rng.uniform(0, np.pi), rng.uniform(4, 16)
    stripes = np.sin(2 * np.pi * freq * (np.cos(angle) * xx + np.sin(angle) * yy))
    image = image + 40 * stripes[..., None] * rng.uniform(-1, 1, size=3)
    return np.clip(image, 0, 255)


def make_data(rng, count, size, digit_images, digit_labels):
    """`count` images `(size, size, 3)` in [0, 255] and their `(size, size)` masks."""
    import numpy as np
    import scipy.ndimage

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


def write_folder(folder, images, masks):
    """`images/NNNN.png` and `masks/NNNN.png` (palette PNGs: class indices,
    each shown in its class's colour) in `folder`."""
    import numpy as np
    from PIL import Image

    from keras_vit.tasks import pictures

    colours = pictures.palette(len(SYNTHETIC_NAMES)).ravel().tolist()
    for kind in ("images", "masks"):
        os.makedirs(os.path.join(folder, kind), exist_ok=True)
    for i, (image, mask) in enumerate(zip(images, masks)):
        Image.fromarray(np.round(image).astype("uint8")).save(os.path.join(folder, "images", f"{i:04d}.png"))
        indexed = Image.fromarray(mask.astype("uint8"), "P")
        indexed.putpalette(colours)
        indexed.save(os.path.join(folder, "masks", f"{i:04d}.png"))


def write_synthetic(args):
    """Writes the synthetic training and held-out folders into `<out>/data`; returns their paths."""
    import numpy as np
    from sklearn.datasets import load_digits

    digits = load_digits()
    keep = np.isin(digits.target, DIGITS)
    images, labels = digits.images[keep], digits.target[keep]
    split = int(0.8 * len(images))  # held-out images use held-out handwriting
    rng = np.random.default_rng(args.seed)
    root = os.path.join(args.out, "data")
    folders = []
    for kind, count, part in (("train", args.train_images, slice(0, split)), ("test", args.test_images, slice(split, None))):
        folder = common.synthetic_folder(root, kind, f"Synthetic digits ({count} images, --seed {args.seed}) "
                                         "written by examples/segment.py.")
        write_folder(folder, *make_data(rng, count, args.image_size, images[part], labels[part]))
        folders.append(folder)
    return folders


# ----------------------------------------------------------- classes, model


def class_names(args, folders, synthetic):
    """The class names (a tuple, or None for unnamed indices) and the class count."""
    if args.class_names:
        names = tuple(n.strip() for n in args.class_names.split(","))
        return names, len(names)
    if synthetic:
        return SYNTHETIC_NAMES, len(SYNTHETIC_NAMES)
    from keras_vit.tasks.dense_data import IGNORE_INDEX, read_mask

    largest = -1
    for folder in folders:
        for name in os.listdir(os.path.join(folder, "masks")):
            mask = read_mask(os.path.join(folder, "masks", name))
            labelled = mask[mask != IGNORE_INDEX]
            largest = max(largest, int(labelled.max()) if labelled.size else -1)
    if largest < 0:
        raise SystemExit(f"The masks of {', '.join(folders)} label no pixel (every one is {IGNORE_INDEX}).")
    return None, largest + 1


def build_model(args, head, classes, names):
    """A `Segmenter` with `head` on a fresh encoder (frozen for "linear")."""
    import keras_vit

    source = common.encoder_or_task(args, "Segmenter", classes=classes, class_names=names)
    if isinstance(source, keras_vit.Segmenter) and head == source.head:
        model = source  # a fine-tuned checkpoint's own head, its class predictor new
        model.preprocessing = common.processing(model, args.image_size)
        return model
    encoder = source.encoder if isinstance(source, keras_vit.Segmenter) else source
    record = common.processing(source, args.image_size)
    if head == "linear":
        encoder.trainable = False
        return keras_vit.Segmenter(encoder, classes, head="linear", class_names=names, preprocessing=record)
    blocks = min(args.num_blocks, encoder.num_layers)
    return keras_vit.Segmenter(
        encoder, classes, class_names=names, num_queries=args.num_queries, num_blocks=blocks,
        mask_probabilities=None if args.masked_attention else (0.0,) * blocks, preprocessing=record,
    )


# ----------------------------------------------------------- measuring


def confusion(predictions, masks, classes):
    """`(classes, classes)` counts of (true, predicted) over the labelled pixels (255 left out)."""
    import numpy as np

    from keras_vit.tasks.dense_data import IGNORE_INDEX

    labelled = masks != IGNORE_INDEX
    pairs = masks[labelled].astype("int64") * classes + predictions[labelled]
    return np.bincount(pairs, minlength=classes**2).reshape(classes, classes)


def mean_iou(matrix):
    """Mean over classes of intersection / union (classes with an empty union
    left out), and the per-class IoU."""
    import numpy as np

    tp = np.diag(matrix).astype("float64")
    union = matrix.sum(0) + matrix.sum(1) - tp
    return float(np.mean(tp[union > 0] / union[union > 0])), (tp / np.maximum(union, 1)).tolist()


def predicted_classes(model, images, batch_size=1):
    """The best class of each pixel `(n, H, W)`, from the model's per-pixel class scores
    (one image a call by default, as `keras_vit.segment` runs them: one program compiled)."""
    import numpy as np
    from keras import ops

    out = []
    for i in range(0, len(images), batch_size):
        outputs = model.predict_on_batch(images[i : i + batch_size])
        scores = model.class_log_probabilities(outputs, images.shape[1:3])
        out.append(np.argmax(ops.convert_to_numpy(scores), axis=-1))
    return np.concatenate(out).astype("int32")


def majority_baseline(train_masks, test_masks, classes):
    import numpy as np

    from keras_vit.tasks.dense_data import IGNORE_INDEX

    majority = int(np.argmax(np.bincount(train_masks[train_masks != IGNORE_INDEX].ravel(), minlength=classes)))
    miou, per_class = mean_iou(confusion(np.full_like(test_masks, majority), test_masks, classes))
    return dict(majority_class=majority, mean_iou=miou, per_class_iou=per_class)


def train_head(args, model, data, classes):
    """Trains `model` for `--steps` updates and measures it on the held-out
    images; returns its results (and writes its preset)."""
    from keras_vit.tasks.dense_training import MaskAnnealing

    (x, y), (x_test, y_test) = data
    model.compile(optimizer=common.optimizer(args.lr if model.head == "eomt" else args.linear_lr, args.steps))
    callbacks = []
    if model.head == "eomt" and model.eomt_head.mask_probability is not None:
        callbacks.append(MaskAnnealing(steps=max(1, 3 * args.steps // 4)))
    loss, seconds = common.fit_steps(model, x, y, args, callbacks)
    miou, per_class = mean_iou(confusion(predicted_classes(model, x_test), y_test, classes))
    result = dict(mean_iou=miou, per_class_iou=per_class, final_loss=loss, train_seconds=seconds, steps=args.steps)
    if args.save_presets:
        result["preset"] = os.path.join(args.out, model.head)
        model.save_to_preset(result["preset"])
    return result


# ----------------------------------------------------------- pictures


def picture(models, paths, mask_paths, classes, names, height=160):
    """Rows of held-out photos: the photo, then its true mask and each
    model's (`keras_vit.segment`, at the photo's size) over the photo in
    grey; the first row ends with the legend of the classes."""
    import numpy as np

    import keras_vit
    from keras_vit.tasks import pictures
    from keras_vit.tasks.dense_data import read_mask
    from keras_vit.tasks.images import read_images

    segments = [dict(id=c, label=names[c] if names else f"class {c}", label_id=c, score=None) for c in range(classes)]
    predicted = {head: keras_vit.segment(model, paths) for head, model in models.items()}
    rows = []
    for i, (photo, mask_path) in enumerate(zip(read_images(paths), mask_paths)):
        photo = common.resize_panel(photo, height)
        grey = np.repeat(photo.mean(axis=-1, keepdims=True), 3, axis=-1).astype("uint8")
        maps = [read_mask(mask_path)] + [predicted[head][i]["segmentation"] for head in models]
        panels = [photo]
        for j, labels in enumerate(maps):
            labels = common.resize_panel(labels.astype("int32"), height, nearest=True)
            overlay = pictures.segments_picture(grey, labels, segments)
            panels.append(overlay if i == 0 and j == len(maps) - 1 else overlay[:, : photo.shape[1]])
        rows.append(panels)
    titles = ["photo", "true mask"] + [{"eomt": "EoMT", "linear": "linear (frozen encoder)"}[h] for h in models]
    return common.grid_picture(rows, titles)


# ----------------------------------------------------------- the run


def load_data(args, model):
    """`((x, y), (x_test, y_test), held-out image paths, their mask paths)`."""
    from keras_vit.tasks.dense_data import load_segmentation_folder

    x, y = load_segmentation_folder(args.data, model)
    paths = common.image_files(args.data)
    if args.test_data is not None:
        test = load_segmentation_folder(args.test_data, model)
        test_paths = common.image_files(args.test_data)
    else:
        train, held = common.held_out(len(x), args.validation_split, args.seed)
        (x, y), test = (x[train], y[train]), (x[held], y[held])
        test_paths = [paths[i] for i in held]
    masks = [os.path.join(os.path.dirname(os.path.dirname(p)), "masks", os.path.splitext(os.path.basename(p))[0] + ".png")
             for p in test_paths]
    return (x, y), test, test_paths, masks


def main(argv=None):
    args = build_parser().parse_args(argv)
    common.check_arguments(args)
    configure_threads(args.threads)
    quiet_imports("tensorflow", "keras_vit")
    import keras

    if args.smoke:
        args.image_size, args.steps, args.batch_size = 32, 2, 4
        args.train_images, args.test_images, args.num_queries, args.num_blocks = 8, 4, 4, 1
        args.pictures, args.verbose = min(args.pictures, 2), 0
    synthetic = args.data is None
    if synthetic:
        args.data, args.test_data = write_synthetic(args)
    names, classes = class_names(args, [f for f in (args.data, args.test_data) if f], synthetic)
    results = dict(backend=keras.backend.backend(), synthetic=synthetic, classes=classes,
                   class_names=None if names is None else list(names), heads={}, args=dict(vars(args)))
    models = {}
    for head in HEADS if args.head == "both" else (args.head,):
        keras.utils.set_random_seed(args.seed)
        models[head] = build_model(args, head, classes, names)
        if len(models) == 1:  # the folders, read at the first model's size and scaling (every head's)
            train, test, test_paths, mask_paths = load_data(args, models[head])
            results.update(images=dict(train=len(train[0]), test=len(test[0])),
                           baseline=majority_baseline(train[1], test[1], classes))
            print(f"{len(train[0])} training and {len(test[0])} held-out images, {classes} classes; baseline "
                  f"(every pixel class {results['baseline']['majority_class']}): held-out mean IoU "
                  f"{results['baseline']['mean_iou']:.3f}")
        run = results["heads"][head] = train_head(args, models[head], (train, test), classes)
        print(f"{head}: held-out mean IoU {run['mean_iou']:.3f} (per class "
              f"{', '.join(f'{v:.2f}' for v in run['per_class_iou'])}), {args.steps} updates in "
              f"{run['train_seconds']:.0f} s")
    if args.pictures:
        from keras_vit.tasks import pictures

        count = min(args.pictures, len(test_paths))
        path = pictures.save_png(picture(models, test_paths[:count], mask_paths[:count], classes, names),
                                 os.path.join(args.out, "segments.png"))
        results["pictures"] = [path]
        print(f"wrote {path}")
    print(f"wrote {common.write_results(os.path.join(args.out, 'results.json'), results)}")
    return results


if __name__ == "__main__":
    main()
