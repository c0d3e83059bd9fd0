"""Looking inside a ViT: attention maps, rollout, attention distance, embeddings.

These functions reproduce the analyses of the ViT paper (§4.5, Fig. 6-7,
App. D.7-D.8) for any `keras_vit.ViT`, hybrids included. They run the
model's own layers and read attention probabilities through
`TransformerBlock.attention_probs`, so ordinary inference (the fused
attention path) is untouched. Results are NumPy arrays; `keras_vit.inspection.plots`
draws them.

Reference:
    Dosovitskiy et al., arXiv:2010.11929 (§4.5, App. D.7-D.8).
    Abnar & Zuidema, "Quantifying Attention Flow in Transformers",
    arXiv:2005.00928 (attention rollout).
"""

import numpy as np
from keras import ops

from keras_vit.layers.attention_pool import AttentionPoolHead
from keras_vit.layers.map_head import MapHead
from keras_vit.models import forward
from keras_vit.validation import check_choice, check_int, check_positive_int

HEAD_FUSIONS = ("mean", "max", "min")


def effective_patch_size(model):
    """Pixels covered by one token along `(height, width)`.

    For a plain ViT this is the patch size; for a hybrid the patch size (on
    the feature map) times the stride of the convolutional stem.

    Args:
        model: a `keras_vit.ViT` (or hybrid).

    Returns:
        A tuple of two ints.

    Example:

    >>> import numpy as np
    >>> import keras_vit
    >>> model = keras_vit.ViT(image_size=32, patch_size=8, hidden_size=16,
    ...                       num_layers=1, num_heads=2, mlp_dim=32)
    >>> effective_patch_size(model)
    (8, 8)
    """
    return tuple(model.effective_patch_size)


def _as_batch(images):
    images = np.asarray(images, dtype="float32")
    if images.ndim == 3:
        images = images[None]
    if images.ndim != 4:
        raise ValueError(
            "`images` must have shape (batch, height, width, channels) or "
            f"(height, width, channels). Received: images.shape={images.shape}"
        )
    return images


def _layer_indices(model, layers):
    count = len(model.encoder_blocks)
    if layers is None:
        return list(range(count))
    single = isinstance(layers, (int, np.integer)) and not isinstance(layers, bool)
    items = [layers] if single else list(layers)
    indices = []
    for item in items:
        if isinstance(item, bool) or not isinstance(item, (int, np.integer)):
            raise ValueError(
                "`layers` must be None, an int or a list of ints. "
                f"Received: layers={layers!r}"
            )
        if not -count <= item < count:
            raise ValueError(
                f"`layers` must index the {count} encoder blocks "
                f"(-{count} to {count - 1}). Received: layers={layers!r}"
            )
        indices.append(int(item) % count)
    return sorted(set(indices))


def _walk(model, images, layers, batch_size):
    """Yields `(start, layer, probs)` per chunk of images and requested layer.

    One pass of the model's own forward functions
    (`keras_vit.models.forward`) per chunk, up to the deepest requested
    block; each requested block's attention is read on its input, the
    output of the block before it.
    """
    stages = forward.stages(model)
    inputs_of = [i - 1 for i in layers if i > 0]
    for start in range(0, len(images), batch_size):
        chunk = images[start : start + batch_size]
        x, patches = forward.embed(stages, forward.stem(stages, chunk, training=False), training=False)
        rope = forward.rope(stages, patches)
        _, taps = forward.run_blocks(stages, x, inputs_of, training=False, stop_early=True, rope=rope)
        block_inputs = {-1: x, **dict(zip(inputs_of, taps))}
        for i in layers:
            extra = {} if rope is None else {"rope": forward.block_rope(stages, rope, i)}
            probs = stages.blocks[i].attention_probs(block_inputs[i - 1], **extra)
            yield start, i, ops.convert_to_numpy(probs)


def _num_prefix(model):
    return model.get_layer("embedding").num_prefix_tokens


def _map_pool(model):
    """The model's MAP (or attention-pool) head, when its output is read through one."""
    pool = forward.stages(model).head_layers.get("pool")
    return pool if isinstance(pool, (MapHead, AttentionPoolHead)) else None


def _probe_weights(model, images, batch_size, fuse):
    """`(batch, tokens)`: the MAP head's probe attention on the final tokens, heads fused."""
    stages = forward.stages(model)
    pool = stages.head_layers["pool"]
    # The MAP head projects its probe; the attention-pool head uses its query as it is.
    attention = pool if isinstance(pool, AttentionPoolHead) else pool.attention
    rows = []
    for start in range(0, len(images), batch_size):
        chunk = images[start : start + batch_size]
        x, patches = forward.embed(stages, forward.stem(stages, chunk, training=False), training=False)
        x, _ = forward.run_blocks(stages, x, training=False, rope=forward.rope(stages, patches))
        tokens = ops.convert_to_numpy(forward.final_norm(stages, x)).astype("float64")
        if attention is pool:
            q = ops.convert_to_numpy(pool.query_heads()).astype("float64")[0]  # (1, heads, head_dim)
        else:
            probe = ops.convert_to_numpy(pool.probe).astype("float64")
            q = _einsum_dense(attention.query, probe)[:, 0]  # (1, heads, head_dim)
        k = _einsum_dense(attention.key, tokens)  # (batch, tokens, heads, head_dim)
        logits = np.einsum("qhk,bthk->bht", q, k) / np.sqrt(q.shape[-1])
        probs = np.exp(logits - logits.max(axis=-1, keepdims=True))
        rows.append(fuse(probs / probs.sum(axis=-1, keepdims=True), axis=1))
    return np.concatenate(rows)


def _einsum_dense(layer, x):
    kernel = ops.convert_to_numpy(layer.kernel).astype("float64")
    y = np.einsum("btd,dhk->bthk", x, kernel)
    return y if layer.bias is None else y + ops.convert_to_numpy(layer.bias).astype("float64")


def _readout(model, joint, prefix, probe=None):
    """The rolled-out rows of the tokens the output is read from."""
    if probe is not None:
        return np.einsum("bt,btu->bu", probe, joint)  # the MAP probe's mixture of the tokens
    if getattr(model, "distillation_head", False):
        return joint[:, :2].mean(axis=1)  # the class and distillation heads, averaged
    if model.classifier == "token":
        return joint[:, 0]
    if model.classifier == "token_avg":
        # The output reads the class token and the patch mean side by side:
        # both rows, weighted equally.
        return 0.5 * (joint[:, 0] + joint[:, prefix:].mean(axis=1))
    return joint[:, prefix:].mean(axis=1)  # the mean of the patch tokens


def _grid(model, images):
    eh, ew = effective_patch_size(model)
    return images.shape[1] // eh, images.shape[2] // ew


def attention_maps(model, images, layers=None, batch_size=8):
    """Per-head attention probabilities of the requested encoder blocks.

    Args:
        model: a `keras_vit.ViT`.
        images: `(batch, H, W, C)` or `(H, W, C)` preprocessed images.
        layers: None (default, every block), an int or a list of ints
            (negative values count from the end).
        batch_size: int, images per forward pass, default 8.

    Returns:
        A dict `{block index: array (batch, heads, tokens, tokens)}` of
        float32 probabilities; row `q` is the distribution of query token
        `q` over the keys (token 0 is the class token when there is one).

    Example:

    >>> import numpy as np
    >>> import keras_vit
    >>> model = keras_vit.ViT(image_size=32, patch_size=8, hidden_size=16,
    ...                       num_layers=2, num_heads=2, mlp_dim=32)
    >>> maps = attention_maps(model, np.zeros((1, 32, 32, 3)), layers=[-1])
    >>> {i: m.shape for i, m in maps.items()}
    {1: (1, 2, 17, 17)}
    """
    images = _as_batch(images)
    check_positive_int(batch_size, "batch_size")
    layers = _layer_indices(model, layers)
    parts = {i: [] for i in layers}
    for _, i, probs in _walk(model, images, layers, batch_size):
        parts[i].append(probs)
    return {i: np.concatenate(parts[i]) for i in layers}


def _upsample(grid_maps, size):
    resized = ops.image.resize(
        ops.convert_to_tensor(grid_maps[..., None].astype("float32")),
        size,
        interpolation="bilinear",
        data_format="channels_last",  # whatever `keras.config.image_data_format()` says
    )
    return ops.convert_to_numpy(resized)[..., 0]


def attention_rollout(
    model, images, head_fusion="mean", return_grid=False, batch_size=8
):
    """Attention rollout from the output token to the input patches (Fig. 6).

    Follows Abnar & Zuidema (2020) as used in the paper (App. D.8): in every
    block the heads are fused (averaged by default), the identity is added
    for the residual connection and rows are renormalised to sum to 1; the
    resulting matrices are multiplied from the first block to the last. The
    class token's row, restricted to the patch tokens, is the map. A model
    without class token (`classifier="gap"`) is read out through the mean
    of the patch tokens' rows, as its output is their mean; a DeiT model with
    a distillation head through the mean of the class and distillation rows;
    a `"token_avg"` model through the mean of the class row and the patch
    rows' mean;
    a model pooled by a MAP head (`classifier="map"`, SigLIP) or AIMv2's
    attention-pool head (`"attention_pool"`) through its probe's attention on
    the final tokens (heads fused the same way), which weights their rows.
    Register tokens are left out of the map.

    Args:
        model: a `keras_vit.ViT`.
        images: `(batch, H, W, C)` or `(H, W, C)` preprocessed images.
        head_fusion: "mean" (default, as in the paper), "max" or "min".
        return_grid: bool, default False: also return the map on the token
            grid.
        batch_size: int, images per forward pass, default 8.

    Returns:
        `(batch, H, W)` maps bilinearly upsampled to the image resolution
        (values on the scale of the grid map: the rolled-out attention of the
        output token on each patch; divide by the maximum for display), and,
        when `return_grid`, also the `(batch, gh, gw)` grid map.

    Example:

    >>> import numpy as np
    >>> import keras_vit
    >>> model = keras_vit.ViT(image_size=32, patch_size=8, hidden_size=16,
    ...                       num_layers=2, num_heads=2, mlp_dim=32)
    >>> maps, grid = attention_rollout(model, np.zeros((1, 32, 32, 3)),
    ...                                return_grid=True)
    >>> maps.shape, grid.shape
    ((1, 32, 32), (1, 4, 4))
    """
    check_choice(head_fusion, HEAD_FUSIONS, "head_fusion")
    images = _as_batch(images)
    check_positive_int(batch_size, "batch_size")
    layers = list(range(len(model.encoder_blocks)))
    prefix = _num_prefix(model)
    gh, gw = _grid(model, images)
    tokens = prefix + gh * gw
    fuse = getattr(np, head_fusion)
    probe = None
    if _map_pool(model) is not None:
        probe = _probe_weights(model, images, batch_size, fuse)
    rows = []
    joint = None
    for start, i, probs in _walk(model, images, layers, batch_size) if layers else ():
        if i == 0:
            joint = np.broadcast_to(np.eye(tokens), (len(probs), tokens, tokens))
        step = fuse(probs.astype("float64"), axis=1) + np.eye(tokens)
        step /= step.sum(axis=-1, keepdims=True)
        # Later blocks act on the mixture produced by earlier ones.
        joint = step @ joint
        if i == layers[-1]:
            weights = None if probe is None else probe[start : start + len(probs)]
            rows.append(_readout(model, joint, prefix, weights)[:, prefix:])
    if not layers:
        rows = [np.full((len(images), gh * gw), 1.0 / (gh * gw))]
    grid = np.concatenate(rows).reshape(-1, gh, gw).astype("float32")
    maps = _upsample(grid, images.shape[1:3])
    return (maps, grid) if return_grid else maps


def patch_distances(model, grid_size=None):
    """Pixel distances between the centres of all pairs of patches.

    Args:
        model: a `keras_vit.ViT`.
        grid_size: `(gh, gw)`, default `model.grid_size`.

    Returns:
        A `(gh * gw, gh * gw)` float array, patches in row-major order.

    Example:

    >>> import keras_vit
    >>> model = keras_vit.ViT(image_size=32, patch_size=8, hidden_size=16,
    ...                       num_layers=1, num_heads=2, mlp_dim=32)
    >>> float(patch_distances(model)[0, 5])  # one row down, one column right
    11.313708498984761
    """
    gh, gw = grid_size or model.grid_size
    eh, ew = effective_patch_size(model)
    rows, cols = np.meshgrid(np.arange(gh), np.arange(gw), indexing="ij")
    y = rows.reshape(-1) * eh
    x = cols.reshape(-1) * ew
    return np.sqrt((y[:, None] - y[None]) ** 2 + (x[:, None] - x[None]) ** 2)


def mean_attention_distance(model, images, per_image=False, batch_size=8):
    """Attention-weighted mean distance in pixels, per block and head (Fig. 7).

    For every query patch the distance to each key patch (between patch
    centres, in input pixels, so hybrids count the stem's stride) is weighted
    by the attention probability; the result is averaged over query patches
    and, unless `per_image`, over images. This is the paper's "attention
    distance" (App. D.7), the analogue of a CNN's receptive field size.

    The class token is not a place in the image: it is left out as a query,
    and its key column is dropped with the remaining weights renormalised to
    sum to 1, so the value is the mean distance of the attention that lands
    on patches.

    Args:
        model: a `keras_vit.ViT`.
        images: `(batch, H, W, C)` or `(H, W, C)` preprocessed images.
        per_image: bool, default False: return one value per image too.
        batch_size: int, images per forward pass, default 8.

    Returns:
        `(layers, heads)` distances in pixels, or `(batch, layers, heads)`
        when `per_image`.

    Example:

    >>> import numpy as np
    >>> import keras_vit
    >>> model = keras_vit.ViT(image_size=32, patch_size=8, hidden_size=16,
    ...                       num_layers=2, num_heads=2, mlp_dim=32)
    >>> mean_attention_distance(model, np.zeros((1, 32, 32, 3))).shape
    (2, 2)
    """
    images = _as_batch(images)
    check_positive_int(batch_size, "batch_size")
    layers = list(range(len(model.encoder_blocks)))
    prefix = _num_prefix(model)
    distances = patch_distances(model, _grid(model, images))
    result = np.zeros(
        (len(images), len(layers), model.num_heads), dtype="float64"
    )
    for start, i, probs in _walk(model, images, layers, batch_size):
        weights = probs[:, :, prefix:, prefix:].astype("float64")
        weights /= weights.sum(axis=-1, keepdims=True)
        per_query = (weights * distances).sum(axis=-1)
        result[start : start + len(probs), i] = per_query.mean(axis=-1)
    result = result.astype("float32")
    return result if per_image else result.mean(axis=0)


def position_embedding_similarity(model):
    """Cosine similarity between the patches' position embeddings (Fig. 7).

    Args:
        model: a `keras_vit.ViT`.

    Returns:
        A `(gh, gw, gh, gw)` array: entry `[i, j, k, l]` is the cosine
        similarity between the embeddings of the patches at row `i`, column
        `j` and at row `k`, column `l` of the grid: the learned table, or the
        fixed sin-cos one (`position_embedding="sincos*"`). The prefix
        tokens' rows are left out.

    Example:

    >>> import numpy as np
    >>> import keras_vit
    >>> model = keras_vit.ViT(image_size=32, patch_size=8, hidden_size=16,
    ...                       num_layers=1, num_heads=2, mlp_dim=32)
    >>> position_embedding_similarity(model).shape
    (4, 4, 4, 4)
    """
    embedding = model.get_layer("embedding")
    pos = embedding.position_embedding_for(embedding.grid_size)
    if pos is None:
        raise ValueError(
            f"Model {model.name!r} has no absolute position embedding to compare "
            "(position_embedding='none': its positions come from a rotary embedding)."
        )
    pos = ops.convert_to_numpy(pos)[0].astype("float64")
    pos = pos[embedding.num_prefix_rows :]
    pos /= np.maximum(np.linalg.norm(pos, axis=-1, keepdims=True), 1e-12)
    gh, gw = embedding.grid_size
    return (pos @ pos.T).reshape(gh, gw, gh, gw).astype("float32")


def embedding_filters(model, n=28):
    """Principal components of the patch-embedding filters, as images (Fig. 7).

    The `D` columns of the embedding kernel are filters over a
    `(ph, pw, C)` patch. They are centred and the leading right-singular
    vectors (principal components) are returned, each rescaled to [0, 1]
    for display; the sign of each component is chosen so that its largest
    entry is positive.

    Args:
        model: a `keras_vit.ViT` embedding pixels (not a hybrid, whose
            embedding acts on feature maps).
        n: int, number of components, default 28 (as in the paper).

    Returns:
        An `(n, ph, pw, C)` float32 array with values in [0, 1].

    Example:

    >>> import numpy as np
    >>> import keras_vit
    >>> model = keras_vit.ViT(image_size=32, patch_size=8, hidden_size=16,
    ...                       num_layers=1, num_heads=2, mlp_dim=32)
    >>> embedding_filters(model, n=4).shape
    (4, 8, 8, 3)
    """
    kernel = ops.convert_to_numpy(model.get_layer("embedding").kernel)
    ph, pw, channels, dim = kernel.shape
    if effective_patch_size(model) != (ph, pw):
        raise ValueError(
            "`embedding_filters` needs a model whose embedding sees pixels; "
            "this model embeds the feature map of a convolutional stem. "
            f"Received: model={model.name!r}"
        )
    limit = min(dim, ph * pw * channels)
    check_int(n, "n", minimum=1, maximum=limit)
    filters = kernel.reshape(-1, dim).T.astype("float64")
    filters -= filters.mean(axis=0, keepdims=True)
    _, _, components = np.linalg.svd(filters, full_matrices=False)
    components = components[:n]
    peak = np.take_along_axis(
        components, np.abs(components).argmax(axis=1)[:, None], axis=1
    )
    components *= np.sign(peak)
    low = components.min(axis=1, keepdims=True)
    high = components.max(axis=1, keepdims=True)
    components = (components - low) / np.maximum(high - low, 1e-12)
    return components.reshape(n, ph, pw, channels).astype("float32")
