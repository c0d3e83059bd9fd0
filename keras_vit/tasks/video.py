"""One call from video clips to named probabilities: `keras_vit.classify_video`.

A clip is an array of frames `(frames, H, W, C)` (uint8, or float in
[0, 255]; [0, 1] is multiplied by 255 with a warning, as `classify` does),
a folder of frame images read in the order of their names, or a video file
(`.mp4`, `.avi`, ...: decoded by PyAV, the `video` extra). Its frames
are sampled as transformers' video processors sample them (`sample_frames`:
the checkpoint's frame count, evenly spaced; a shorter clip repeats frames
in order), each frame prepared as `classify` prepares an image
(`keras_vit.tasks.images.load_images`: resize, centre crop, scaling of the
model's `Preprocessing` record), and the model run on the clip.
"""

import os

import numpy as np

from keras_vit.tasks.classification import top_predictions, trained_classifier
from keras_vit.tasks.images import IMAGE_SUFFIXES, load_images
from keras_vit.validation import check_positive_int


def sample_frames(total, count):
    """The indices of `count` frames sampled evenly from a clip of `total`.

    Frame `i` of the sample is frame `i * total // count` of the clip:
    transformers' uniform sampling (`default_sample_indices_fn`). A clip
    shorter than `count` (which transformers refuses) gives each frame
    about `count / total` times, in order.

    Example:

    >>> sample_frames(10, 4).tolist(), sample_frames(3, 4).tolist()
    ([0, 2, 5, 7], [0, 0, 1, 2])
    """
    total = check_positive_int(total, "total")
    count = check_positive_int(count, "count")
    return np.arange(count, dtype=np.int64) * total // count


_TAKES = "an array of frames (frames, height, width, channels), a folder of frame images or a video file"


def _video_file(path, count, where):
    """`count` frames sampled from a video file, decoded by PyAV as RGB arrays."""
    try:
        import av
    except ImportError:
        raise ImportError(
            f"{where} {path!r} is a video file: reading it needs PyAV (`pip install keras_vit[video]` or "
            "`pip install av`); or give its frames as an array or a folder of images."
        ) from None
    with av.open(path) as container:
        stream = container.streams.video[0]
        # Without a frame count in its header, the file is decoded twice.
        total = stream.frames or sum(1 for _ in container.decode(stream))
    if not total:
        raise ValueError(f"{where} {path!r} holds no video frame.")
    wanted = sample_frames(total, count)
    keep, frames = set(wanted.tolist()), {}
    with av.open(path) as container:
        for index, frame in enumerate(container.decode(container.streams.video[0])):
            if index in keep:
                frames[index] = frame.to_ndarray(format="rgb24")
            if index >= wanted[-1]:
                break
    return [frames[i] for i in wanted]


def read_clip(clip, count, where="The clip"):
    """`count` frames sampled from a clip (`sample_frames`): arrays, the
    paths of a folder's frame images (sorted by name, not yet decoded), or
    a video file's frames decoded by PyAV.

    Raises:
        ValueError: for a folder without images, a path that is neither a
            folder nor a file, or an array that is not `(frames, H, W[, C])`.
        ImportError: for a video file without PyAV.
    """
    if isinstance(clip, (str, os.PathLike)):
        path = os.fspath(clip)
        if os.path.isfile(path):
            return _video_file(path, count, where)
        if not os.path.isdir(path):
            raise ValueError(f"{where} must be {_TAKES}. Received: {path!r}, which is neither a folder nor a file")
        names = sorted(n for n in os.listdir(path) if n.lower().endswith(IMAGE_SUFFIXES))
        if not names:
            raise ValueError(f"{where} {path!r} holds no frame image ({', '.join(IMAGE_SUFFIXES)}).")
        frames = [os.path.join(path, n) for n in names]
    else:
        array = np.asarray(clip)
        if array.ndim not in (3, 4) or array.shape[0] == 0:
            raise ValueError(f"{where} must be {_TAKES}. Received: an array of shape {array.shape}")
        frames = list(array)
    return [frames[i] for i in sample_frames(len(frames), count)]


def _clips(videos):
    """`videos` (one clip, a batch array or a list of clips) as a list of clips."""
    if isinstance(videos, (str, os.PathLike)):
        return [videos]
    if isinstance(videos, np.ndarray) or hasattr(videos, "shape"):
        array = np.asarray(videos)
        return list(array) if array.ndim == 5 else [array]
    videos = list(videos)
    if not videos:
        raise ValueError("`videos` is empty: give at least one clip.")
    return videos


def clip_frames(model, preprocessing=None):
    """The frames `classify_video` samples for `model`: its record's
    `num_frames`, else the clips its position table was learned for."""
    record = preprocessing if preprocessing is not None else getattr(model, "preprocessing", None)
    count = getattr(record, "num_frames", None) or getattr(model, "num_frames", None)
    if count is None:
        raise ValueError(
            f"Model {getattr(model, 'name', model)!r} takes images, not clips (num_frames=None): use "
            "`keras_vit.classify`."
        )
    return count


def classify_video(model, videos, top=5, preprocessing=None):
    """The most probable classes of each video clip, named.

    Args:
        model: a keras_vit video classifier (`num_frames` set: VideoMAE,
            ViViT), or anything `keras_vit.load_model` takes.
        videos: one clip or a list of clips; a clip is an array of frames
            `(frames, H, W, C)` in [0, 255] (uint8 or float; grey, RGBA:
            as `classify` reads images), a folder of frame images in the
            order of their names, or a video file (PyAV: `pip install
            keras_vit[video]`); a `(clips, frames, H, W, C)` array is a
            list of clips. Clips may differ in length and size.
        top: int >= 1, default 5: classes per clip (at most the model's).
        preprocessing: None (default: the model's record), a mode or a
            `Preprocessing` record, applied to each frame.

    Returns:
        A list with, per clip, a list of `min(top, classes)`
        `Prediction(index, name, probability)` tuples, most probable first,
        as `keras_vit.classify` gives them for images.

    Example:

    >>> import keras_vit
    >>> from keras_vit.preprocessing import Preprocessing
    >>> model = keras_vit.ViT(image_size=16, patch_size=8, hidden_size=16, num_layers=1, num_heads=2,
    ...     mlp_dim=32, classes=2, class_names=["no", "yes"], num_frames=4, tubelet_size=2,
    ...     preprocessing=Preprocessing.from_mode("imagenet", image_size=16))
    >>> [p.name for p in classify_video(model, np.zeros((9, 20, 24, 3), "uint8"), top=2)[0]]
    ['no', 'yes']
    """
    check_positive_int(top, "top")
    model = trained_classifier(model)
    count = clip_frames(model, preprocessing)
    outputs = []
    for index, clip in enumerate(_clips(videos)):
        frames = read_clip(clip, count, f"`videos[{index}]`")
        _, inputs = load_images(frames, model, preprocessing)
        outputs.append(np.asarray(model.predict_on_batch(inputs[None])))
    return top_predictions(model, np.concatenate(outputs), top)
