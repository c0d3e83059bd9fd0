"""PNG plots of the `keras_vit.inspection` analyses (paper Fig. 6-7).

Figures are drawn with Matplotlib's Agg canvas directly (no `pyplot`), so
plotting never touches a GUI or the global pyplot state. Matplotlib is an
optional dependency (`pip install keras-vit[plots]`), imported on use.
"""

import numpy as np


def _figure(width, height):
    try:
        from matplotlib.backends.backend_agg import FigureCanvasAgg
        from matplotlib.figure import Figure
    except ImportError as error:
        raise ImportError(
            "Plotting needs matplotlib: pip install keras-vit[plots]"
        ) from error
    figure = Figure(figsize=(width, height), dpi=100)
    FigureCanvasAgg(figure)
    return figure


def _save(figure, path, dpi=100):
    path = str(path)
    figure.savefig(path, dpi=dpi, format="png")
    return path


def _display_image(image):
    image = np.asarray(image, dtype="float32")
    low, high = float(image.min()), float(image.max())
    if low < 0.0 or high > 1.0:
        image = (image - low) / max(high - low, 1e-12)
    return image.clip(0.0, 1.0)


def plot_attention_rollout(image, rollout, path, title=None):
    """Image, rollout map and the image masked by the map (paper Fig. 6).

    Args:
        image: `(H, W, 3)` image for display: uint8, or floats (rescaled to
            [0, 1] when outside that range).
        rollout: `(H, W)` map from `keras_vit.inspection.attention_rollout`.
        path: output PNG path.
        title: optional figure title.

    Returns:
        The path written, as a string.

    Example:

    >>> import numpy as np, tempfile, os
    >>> out = os.path.join(tempfile.mkdtemp(), "rollout.png")
    >>> plot_attention_rollout(np.zeros((32, 32, 3)), np.ones((32, 32)), out)
    ... # doctest: +ELLIPSIS
    '...rollout.png'
    """
    image = np.asarray(image)
    image = image / 255.0 if image.dtype == np.uint8 else _display_image(image)
    rollout = np.asarray(rollout, dtype="float32")
    mask = rollout / max(float(rollout.max()), 1e-12)
    figure = _figure(8.1, 3.0)
    panels = (
        (image, "input", {}),
        # Stretched from its minimum: the map's contrast, not its scale.
        (mask, "attention rollout", {"cmap": "inferno", "vmin": mask.min(), "vmax": 1}),
        (image * mask[..., None], "input x rollout", {}),
    )
    for k, (data, label, style) in enumerate(panels):
        axis = figure.add_subplot(1, 3, k + 1)
        axis.imshow(data, **style)
        axis.set_title(label)
        axis.axis("off")
    if title:
        figure.suptitle(title)
    figure.tight_layout()
    return _save(figure, path)


def plot_mean_attention_distance(distances, path, title=None):
    """Mean attention distance of every head against depth (paper Fig. 7).

    Args:
        distances: `(layers, heads)` pixels, from
            `keras_vit.inspection.mean_attention_distance`.
        path: output PNG path.
        title: optional title.

    Returns:
        The path written, as a string.
    """
    distances = np.asarray(distances, dtype="float32")
    layers, heads = distances.shape
    figure = _figure(5.0, 4.0)
    axis = figure.add_subplot(1, 1, 1)
    depth = np.arange(1, layers + 1)
    for head in range(heads):
        axis.scatter(depth, distances[:, head], s=14, label=f"head {head + 1}")
    axis.plot(depth, distances.mean(axis=1), color="black", lw=1, label="mean")
    axis.set_xlabel("network depth (layer)")
    axis.set_ylabel("mean attention distance (pixels)")
    axis.set_ylim(0, None)
    axis.set_xticks(depth)
    if heads <= 16:
        axis.legend(fontsize=6, ncol=2, loc="lower right")
    axis.set_title(title or "attention distance by head and depth")
    figure.tight_layout()
    return _save(figure, path)


def plot_position_embedding_similarity(similarity, path, title=None):
    """Cosine similarity of each position embedding to all (paper Fig. 7).

    Draws one small map per patch position, laid out on the patch grid.

    Args:
        similarity: `(gh, gw, gh, gw)` array from
            `keras_vit.inspection.position_embedding_similarity`.
        path, title: the PNG to write, and an optional title.

    Returns:
        The path written, as a string.
    """
    similarity = np.asarray(similarity, dtype="float32")
    gh, gw = similarity.shape[:2]
    figure = _figure(0.45 * gw + 1.2, 0.45 * gh + 0.6)
    grid = figure.add_gridspec(
        gh, gw + 1, width_ratios=[1] * gw + [0.4], wspace=0.08, hspace=0.08
    )
    image = None
    for i in range(gh):
        for j in range(gw):
            axis = figure.add_subplot(grid[i, j])
            image = axis.imshow(
                similarity[i, j], cmap="viridis", vmin=-1, vmax=1, interpolation="nearest"
            )
            axis.set_xticks([])
            axis.set_yticks([])
            if j == 0:
                axis.set_ylabel(str(i + 1), fontsize=6, rotation=0, labelpad=6)
            if i == gh - 1:
                axis.set_xlabel(str(j + 1), fontsize=6)
    colorbar = figure.add_subplot(grid[:, gw])
    figure.colorbar(image, cax=colorbar, label="cosine similarity")
    figure.suptitle(title or "position embedding similarity (row, column)")
    return _save(figure, path)


def plot_embedding_filters(filters, path, columns=7, title=None):
    """Principal components of the patch-embedding filters (paper Fig. 7).

    Args:
        filters: `(n, ph, pw, 3)` array in [0, 1], from
            `keras_vit.inspection.embedding_filters`.
        path: output PNG path.
        columns: int, components per row, default 7.
        title: optional title.

    Returns:
        The path written, as a string.
    """
    filters = np.asarray(filters, dtype="float32")
    rows = -(-len(filters) // columns)
    figure = _figure(1.0 * columns, 1.0 * rows + 0.5)
    for k, image in enumerate(filters):
        axis = figure.add_subplot(rows, columns, k + 1)
        axis.imshow(image.clip(0, 1), interpolation="nearest")
        axis.axis("off")
    figure.suptitle(title or "RGB embedding filters (first principal components)")
    figure.tight_layout()
    return _save(figure, path)
