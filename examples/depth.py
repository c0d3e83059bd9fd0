"""Fine-tunes keras_vit.DepthEstimator on a folder of images with depth maps.

A folder holds `images/` and `depth/` side by side, the files paired by
name (`images/0001.jpg` with `depth/0001.png`); a depth map is a 16-bit PNG
whose values times `--depth-scale` are metres (1/1000: millimetres; KITTI's
1/256), or a `.npy` float array in metres, 0 where a pixel has no depth
(`keras_vit.tasks.dense_data.load_depth_folder` reads and checks every file
before training). The model is Depth Anything's DPT neck and head on the
encoder's blocks at a quarter, half, three quarters and the whole of its
depth, predicting metric depth (a sigmoid times `--max-depth`), trained end
to end with the scale-invariant log loss (`SiLogLoss`).

The encoder starts from DeiT-Tiny's ImageNet weights (`--weights`, in
../shared/weights: ViT-Ti/16, exact GELU, ImageNet mean and std) or from any
`--preset` that `keras_vit.from_preset` reads: an image model, or a depth
checkpoint (Depth Anything, DPT, CHMv2), fine-tuned whole.

Offline, without `--data`, it first writes such a folder itself
(`<out>/data/train` and `<out>/data/test`): scenes of a tiled ground plane
seen from a camera at a random height, a striped back wall, and boxes and
discs standing on the ground at random depths. The ground's depth grows up
the image towards the horizon, its tiles shrink with distance, and an
object's apparent size and the row where it meets the ground follow its
depth: depth is learnable from the image.

It prints and writes (`<out>/results.json`) the held-out AbsRel and δ1 of
the model and of the trivial baseline (every pixel the training pixels'
median depth), draws `<out>/depth.png` (held-out photos, their true and
predicted depth maps in one colour range, and its scale) and writes the
fine-tuned model as a keras_vit preset (`<out>/depth_estimator`) that
`keras_vit.estimate_depth` and `keras-vit depth` read.

    python examples/depth.py --smoke          # a tiny random encoder, seconds (tests)
    python examples/depth.py                  # offline: the synthetic scenes, DeiT-Tiny
    python examples/depth.py --data rooms --test-data rooms_val --max-depth 10
    python examples/depth.py --data street --depth-scale 0.00390625 --preset dinov2_small --image-size 224
"""

import os
import sys
import warnings

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from examples import dense_common as common  # noqa: E402
from tools.front_end import ArgumentParser, configure_threads, quiet_imports  # noqa: E402

# The synthetic scenes: ground tiles and wall stripes of fixed sizes (they
# carry the scale), the back wall's depth, objects' depths.
TILE, STRIPE, FAR, NEAREST, FARTHEST = 0.5, 1.0, 12.0, 1.5, 9.0


def build_parser():
    p = ArgumentParser(description=__doc__.split("\n\n")[0])
    common.add_common_arguments(p, out=os.path.join("runs", "depth"), lr=2e-4)
    a = p.add_argument
    a("--depth-scale", type=float, default=1e-3, help="metres per PNG depth value (1/1000: millimetres; KITTI 1/256)")
    a("--max-depth", type=float, default=None, help="the largest depth the model can predict, in metres; default: 1.25 times the largest training depth")
    a("--fusion-size", type=int, default=64, help="width of the DPT neck's fusion stages")
    a("--head-size", type=int, default=32, help="width of the depth head after its resize")
    a("--train-images", type=int, default=1000, help="synthetic training scenes written (offline run)")
    a("--test-images", type=int, default=200, help="synthetic held-out scenes written (offline run)")
    a("--smoke", action="store_true", help="a tiny random encoder, 32 px, 2 updates, for tests (seconds); with --data it trains on that folder")
    return p


# ----------------------------------------------------------- synthetic scenes


def _ground_and_wall(rng, size):
    """The tiled ground and striped wall: `(image, depth)` of a scene without objects,
    and the camera `(focal, height, horizon)`."""
    import numpy as np

    focal, height, horizon = float(size), rng.uniform(1.2, 1.8), rng.uniform(0.3, 0.45) * size
    rows, cols = np.mgrid[:size, :size] + 0.5
    below = rows - horizon
    depth = np.where(below > 0, focal * height / np.maximum(below, 1e-6), np.inf)
    ground = depth < FAR
    depth = np.minimum(depth, FAR)
    across = (cols - size / 2) * depth / focal  # metres to the side, on the ground or the wall
    tiles = (np.floor(across / TILE) + np.floor(depth / TILE)) % 2
    stripes = np.floor(across / STRIPE + (rows - horizon) * FAR / focal / STRIPE) % 2
    light, dark = rng.uniform(120, 255, 3), rng.uniform(0, 110, 3)
    wall = rng.uniform(60, 200, 3)
    image = np.where(ground[..., None], np.where(tiles[..., None] > 0, light, dark),
                     wall * np.where(stripes[..., None] > 0, 1.0, 0.8))
    # Haze: far things fade towards grey, as outdoors.
    haze = (depth / FAR)[..., None] * 0.35
    return image * (1 - haze) + 150 * haze, depth, (focal, height, horizon)


def paste_object(rng, image, depth, distance, camera):
    """A box or disc standing on the ground `distance` metres away, of a random
    size in metres, painted over `image` and `depth`; returns them and its pixels."""
    import numpy as np

    focal, height, horizon = camera
    size = depth.shape[0]
    rows, cols = np.mgrid[:size, :size] + 0.5
    tall, wide, side = rng.uniform(0.5, 1.6), rng.uniform(0.4, 1.2), rng.uniform(-2.0, 2.0)
    bottom = horizon + focal * height / distance  # the row where it stands on the ground
    top = bottom - focal * tall / distance
    centre, half = size / 2 + focal * side / distance, focal * wide / distance / 2
    if rng.random() < 0.5:
        inside = (rows >= top) & (rows < bottom) & (np.abs(cols - centre) < half)
    else:
        middle, radius = (top + bottom) / 2, (bottom - top) / 2
        inside = ((rows - middle) / radius) ** 2 + ((cols - centre) / half) ** 2 < 1
    shade = 0.6 + 0.4 * np.clip((bottom - rows) / max(bottom - top, 1), 0, 1)
    image = np.where(inside[..., None], rng.uniform(30, 255, 3) * shade[..., None], image)
    return image, np.where(inside, distance, depth), inside


def make_scene(rng, size):
    """One scene: an image `(size, size, 3)` in [0, 255] and its depth `(size, size)` in metres."""
    import numpy as np

    image, depth, camera = _ground_and_wall(rng, size)
    for distance in sorted(rng.uniform(NEAREST, FARTHEST, rng.integers(1, 4)), reverse=True):  # far ones first
        image, depth, _ = paste_object(rng, image, depth, distance, camera)
    noise = rng.normal(0, 4, image.shape)
    return np.clip(image + noise, 0, 255).astype("float32"), depth.astype("float32")


def write_folder(folder, scenes):
    """`images/NNNN.png` and `depth/NNNN.png` (16-bit, millimetres) in `folder`."""
    import numpy as np
    from PIL import Image

    for kind in ("images", "depth"):
        os.makedirs(os.path.join(folder, kind), exist_ok=True)
    for i, (image, depth) in enumerate(scenes):
        Image.fromarray(np.round(image).astype("uint8")).save(os.path.join(folder, "images", f"{i:04d}.png"))
        Image.fromarray(np.round(depth * 1000).astype("uint16")).save(os.path.join(folder, "depth", f"{i:04d}.png"))


def write_synthetic(args):
    """Writes the synthetic training and held-out folders into `<out>/data`; returns their paths."""
    import numpy as np

    rng = np.random.default_rng(args.seed)
    folders = []
    for kind, count in (("train", args.train_images), ("test", args.test_images)):
        folder = common.synthetic_folder(os.path.join(args.out, "data"), kind,
                                         f"Synthetic scenes ({count}, --seed {args.seed}) written by examples/depth.py.")
        write_folder(folder, (make_scene(rng, args.image_size) for _ in range(count)))
        folders.append(folder)
    return folders


# ----------------------------------------------------------- model


def feature_blocks(num_layers):
    """Blocks at a quarter, half, three quarters and the whole of the depth
    (Depth Anything's (2, 5, 8, 11) of 12)."""
    return tuple(max(0, (i + 1) * num_layers // 4 - 1) for i in range(4))


def build_model(args, max_depth):
    """A metric `DepthEstimator` on a fresh encoder, or the `--preset`'s own."""
    import keras_vit

    source = common.encoder_or_task(args, "DepthEstimator", smoke_layers=4)  # a block for each level
    record = common.processing(source, args.image_size)
    if isinstance(source, keras_vit.DepthEstimator):
        if source.depth != "metric":
            print(f"note: --preset {args.preset!r} predicts {source.depth} depth; fine-tuning on depths in metres "
                  "changes what its head means (a metric checkpoint keeps it)")
        source.preprocessing = record
        return source
    width = source.hidden_size
    return keras_vit.DepthEstimator(
        source, feature_blocks(source.num_layers), tuple(max(1, width // d) for d in (8, 4, 2, 1)),
        (4, 2, 1, 0.5), args.fusion_size, head_size=args.head_size, depth="metric", max_depth=max_depth,
        preprocessing=record,
    )


# ----------------------------------------------------------- measuring


def depth_errors(predicted, true):
    """AbsRel (mean `|pred - true| / true`) and δ1 (share with `max(pred / true,
    true / pred) < 1.25`) over the pixels with depth (true > 0)."""
    import numpy as np

    valid = true > 0
    pred, true = np.maximum(predicted[valid], 1e-6), true[valid]
    return dict(abs_rel=float(np.mean(np.abs(pred - true) / true)),
                delta1=float(np.mean(np.maximum(pred / true, true / pred) < 1.25)))


def predicted_depths(model, images, batch_size=1):
    """`(n, H, W)` depths (one image a call by default, as `keras_vit.estimate_depth`)."""
    import numpy as np

    return np.concatenate([np.asarray(model.predict_on_batch(images[i : i + batch_size])["predicted_depth"])
                           for i in range(0, len(images), batch_size)])


# ----------------------------------------------------------- pictures


def coloured(depth, low, high):
    """`depth` in `pictures.depth_picture`'s colours over the fixed range
    `[low, high]` (0, no depth, in white)."""
    import numpy as np

    from keras_vit.tasks import pictures

    # depth_picture spreads the range of what it is given: the range's ends lead.
    values = np.concatenate([[low, high], np.clip(depth, low, high).ravel()])
    out = pictures.depth_picture(values[None])[0, 2:].reshape(depth.shape + (3,))
    out[depth <= 0] = 255
    return out


def scale_bar(low, high, height, width=52):
    """A vertical colour bar from `high` (top) to `low` (bottom), labelled in metres."""
    import numpy as np
    from PIL import Image, ImageDraw, ImageFont

    bar = coloured(np.repeat(np.linspace(high, low, height)[:, None], 12, axis=1), low, high)
    canvas = Image.new("RGB", (width, height), (255, 255, 255))
    canvas.paste(Image.fromarray(bar), (0, 0))
    draw, font = ImageDraw.Draw(canvas), ImageFont.load_default()
    draw.text((15, 0), f"{high:.1f} m", fill=(0, 0, 0), font=font)
    draw.text((15, height - 12), f"{low:.1f} m", fill=(0, 0, 0), font=font)
    return np.asarray(canvas)


def picture(model, paths, depth_paths, depth_scale, height=160):
    """Rows of held-out photos: the photo, its true depth and the model's
    (`keras_vit.estimate_depth`, at the photo's size), in one colour range;
    the first row ends with its scale."""
    import numpy as np

    import keras_vit
    from keras_vit.tasks.dense_data import read_depth
    from keras_vit.tasks.images import read_images

    truths = [read_depth(p, depth_scale) for p in depth_paths]
    predictions = [r["predicted_depth"] for r in keras_vit.estimate_depth(model, paths)]
    low = min(min(t[t > 0].min() for t in truths), min(p.min() for p in predictions))
    high = max(max(t.max() for t in truths), max(p.max() for p in predictions))
    rows = []
    for i, (photo, truth, predicted) in enumerate(zip(read_images(paths), truths, predictions)):
        panels = [common.resize_panel(photo, height)]
        panels += [common.resize_panel(coloured(d, low, high), height, nearest=True) for d in (truth, predicted)]
        if i == 0:
            panels[-1] = np.concatenate([panels[-1], scale_bar(low, high, height)], axis=1)
        rows.append(panels)
    return common.grid_picture(rows, ["photo", "true depth", "predicted depth"])


# ----------------------------------------------------------- the run


def load_data(args, model):
    """`((x, depth), (x_test, depth_test), held-out image paths, their depth paths)`."""
    from keras_vit.tasks.dense_data import load_depth_folder

    x, y = load_depth_folder(args.data, model, depth_scale=args.depth_scale)
    paths = common.image_files(args.data)
    if args.test_data is not None:
        test = load_depth_folder(args.test_data, model, depth_scale=args.depth_scale)
        test_paths = common.image_files(args.test_data)
    else:
        train, held = common.held_out(len(x), args.validation_split, args.seed)
        (x, y), test = (x[train], y[train]), (x[held], y[held])
        test_paths = [paths[i] for i in held]
    return (x, y), test, test_paths, [_depth_file(p) for p in test_paths]


def _depth_file(image_path):
    folder, name = os.path.split(image_path)
    stem = os.path.join(os.path.dirname(folder), "depth", os.path.splitext(name)[0])
    return stem + ".png" if os.path.isfile(stem + ".png") else stem + ".npy"


def largest_depth(args):
    """The largest depth of the training folder's maps, in metres."""
    from keras_vit.tasks.dense_data import read_depth

    return max(float(read_depth(_depth_file(p), args.depth_scale).max()) for p in common.image_files(args.data))


def train(args, model, data):
    """Trains for `--steps` updates; returns the model's held-out errors and the run's figures."""
    (x, y), (x_test, y_test) = data
    model.compile(optimizer=common.optimizer(args.lr, args.steps))
    with warnings.catch_warnings():
        # Depth Anything's first fusion stage holds a residual unit that its
        # checkpoints carry and its forward pass never runs: it gets no gradient.
        warnings.filterwarnings("ignore", message=r"Gradients do not exist for variables \['neck/fusion_0_unit_1")
        loss, seconds = common.fit_steps(model, x, y, args)
    result = dict(depth_errors(predicted_depths(model, x_test), y_test), final_loss=loss, train_seconds=seconds,
                  steps=args.steps)
    if args.save_presets:
        result["preset"] = os.path.join(args.out, "depth_estimator")
        model.save_to_preset(result["preset"])
    return result


def main(argv=None):
    args = build_parser().parse_args(argv)
    common.check_arguments(args)
    if args.max_depth is not None and args.max_depth <= 0:
        raise SystemExit(f"--max-depth must be positive. Received: {args.max_depth}")
    configure_threads(args.threads)
    quiet_imports("tensorflow", "keras_vit")
    import keras
    import numpy as np

    if args.smoke:
        args.image_size, args.steps, args.batch_size, args.fusion_size, args.head_size = 32, 2, 4, 8, 8
        args.train_images, args.test_images, args.pictures, args.verbose = 8, 4, min(args.pictures, 2), 0
    synthetic = args.data is None
    if synthetic:
        args.data, args.test_data = write_synthetic(args)
    max_depth = args.max_depth if args.max_depth is not None else round(1.25 * largest_depth(args), 2)
    keras.utils.set_random_seed(args.seed)
    model = build_model(args, max_depth)
    (x, y), (x_test, y_test), test_paths, depth_paths = load_data(args, model)
    median = float(np.median(y[y > 0]))
    baseline = dict(depth_errors(np.full_like(y_test, median), y_test), median_depth=median)
    print(f"{len(x)} training and {len(x_test)} held-out images; baseline (every pixel {median:.2f} m, the training "
          f"median): AbsRel {baseline['abs_rel']:.3f}, δ1 {baseline['delta1']:.3f}")
    run = train(args, model, ((x, y), (x_test, y_test)))
    print(f"DepthEstimator: held-out AbsRel {run['abs_rel']:.3f}, δ1 {run['delta1']:.3f}, {args.steps} updates in "
          f"{run['train_seconds']:.0f} s")
    results = dict(backend=keras.backend.backend(), synthetic=synthetic, max_depth=getattr(model, "max_depth", None),
                   images=dict(train=len(x), test=len(x_test)), baseline=baseline, model=run, args=dict(vars(args)))
    if args.pictures:
        from keras_vit.tasks import pictures

        count = min(args.pictures, len(test_paths))
        path = pictures.save_png(picture(model, test_paths[:count], depth_paths[:count], args.depth_scale),
                                 os.path.join(args.out, "depth.png"))
        results["pictures"] = [path]
        print(f"wrote {path}")
    print(f"wrote {common.write_results(os.path.join(args.out, 'results.json'), results)}")
    return results


if __name__ == "__main__":
    main()
