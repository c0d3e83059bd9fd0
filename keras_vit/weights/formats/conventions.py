"""Rules for the naming conventions the checkpoint formats share.

A format's table (`keras_vit.weights.rules.RuleTable`) lists one rule per
tensor, but most tensors come in the groups their library's layers hold:

- PyTorch modules (timm, transformers): a LayerNorm or Linear `name` holds
  `name.weight` and `name.bias`; a Linear's weight is `(out, in)`, a patch
  convolution's OIHW; attention projections are Linears over
  `heads * head_dim`.
- Keras layers (keras-hub): a LayerNormalization `name` holds `name/gamma`
  and `name/beta`, a Dense `name/kernel` and `name/bias`, already in the
  canonical layouts; a `MultiHeadAttention` holds `query`, `key`, `value`
  and `attention_output`, each a `(D, heads, head_dim)`-shaped kernel and
  its bias.

Each function returns the rules of one such group as `(source, canonical,
transform)` tuples, so a table is written as the layers it reads.
"""

from keras_vit.weights import canonical as C

# The canonical query, key, value and output projections of an attention layer.
_PROJECTIONS = ("query", "key", "value")


def torch_norm(source, canonical):
    """The rules of a PyTorch norm `source` (`weight`, `bias`) under `canonical`.

    Example:

    >>> torch_norm("norm", "fc_norm/")
    (('norm.weight', 'fc_norm/scale'), ('norm.bias', 'fc_norm/bias'))
    """
    return ((f"{source}.weight", canonical + "scale"), (f"{source}.bias", canonical + "bias"))


def torch_linear(source, canonical, kernel="linear", bias=None):
    """The rules of a PyTorch Linear (or convolution) `source` under `canonical`.

    Args:
        source: the module's name.
        canonical: the canonical prefix, ending in "/".
        kernel: the weight's transform (default "linear": `(out, in)` ->
            `(in, out)`; "conv" for an OIHW convolution, ...).
        bias: the bias's transform (default None: as it is).

    Example:

    >>> torch_linear("head", "head/")
    (('head.weight', 'head/kernel', 'linear'), ('head.bias', 'head/bias', None))
    """
    return ((f"{source}.weight", canonical + "kernel", kernel), (f"{source}.bias", canonical + "bias", bias))


def torch_attention(query, key, value, out, canonical=C.ATTENTION):
    """The rules of an attention layer with separate PyTorch q, k, v and
    output Linears (heads split from their `heads * head_dim` axis).

    Example:

    >>> [rule[0] for rule in torch_attention("q", "k", "v", "o")][::2]
    ['q.weight', 'k.weight', 'v.weight', 'o.weight']
    """
    rules = ()
    for name, source in zip(_PROJECTIONS, (query, key, value)):
        rules += torch_linear(source, canonical + f"{name}/", "heads_in", "heads_bias")
    return rules + torch_linear(out, canonical + "out/", "heads_out")


def torch_block(layer, norm_1, attention, norm_2, mlp_in, mlp_out):
    """The rules of a pre-norm Transformer block of PyTorch modules.

    Args:
        layer: the block's prefix, with `{i}` for its index.
        norm_1, norm_2: the norms before attention and before the MLP.
        attention: `(query, key, value, out)` Linear names.
        mlp_in, mlp_out: the MLP's Linears.

    Example:

    >>> rules = torch_block("blocks.{i}.", "norm1", ("q", "k", "v", "proj"), "norm2", "fc1", "fc2")
    >>> len(rules), rules[0]
    (16, ('blocks.{i}.norm1.weight', 'Transformer/encoderblock_{i}/LayerNorm_0/scale'))
    """
    return (
        *torch_norm(layer + norm_1, C.NORM_1),
        *torch_attention(*(layer + name for name in attention)),
        *torch_norm(layer + norm_2, C.NORM_2),
        *torch_linear(layer + mlp_in, C.MLP_IN),
        *torch_linear(layer + mlp_out, C.MLP_OUT),
    )


def torch_map_head_tail(norm, mlp_in, mlp_out):
    """The rules of an attention-pool head's norm and MLP (PyTorch modules).

    Example:

    >>> torch_map_head_tail("head.layernorm", "head.mlp.fc1", "head.mlp.fc2")[0]
    ('head.layernorm.weight', 'pool/LayerNorm_0/scale')
    """
    return (
        *torch_norm(norm, C.MAP_NORM),
        *torch_linear(mlp_in, C.MAP_MLP_IN),
        *torch_linear(mlp_out, C.MAP_MLP_OUT),
    )


def keras_norm(source, canonical):
    """The rules of a Keras LayerNormalization `source` under `canonical`.

    Example:

    >>> keras_norm("ln", "fc_norm/")
    (('ln/gamma', 'fc_norm/scale'), ('ln/beta', 'fc_norm/bias'))
    """
    return ((f"{source}/gamma", canonical + "scale"), (f"{source}/beta", canonical + "bias"))


def keras_dense(source, canonical):
    """The rules of a Keras Dense (or Conv2D) `source` under `canonical`.

    Example:

    >>> keras_dense("predictions", "head/")
    (('predictions/kernel', 'head/kernel'), ('predictions/bias', 'head/bias'))
    """
    return ((f"{source}/kernel", canonical + "kernel"), (f"{source}/bias", canonical + "bias"))


def keras_attention(source, canonical=C.ATTENTION):
    """The rules of a Keras `MultiHeadAttention` `source` under `canonical`.

    Example:

    >>> [rule[0] for rule in keras_attention("mha")][-2:]
    ['mha/attention_output/kernel', 'mha/attention_output/bias']
    """
    rules = ()
    for name, layer in zip(_PROJECTIONS + ("out",), _PROJECTIONS + ("attention_output",)):
        rules += keras_dense(f"{source}/{layer}", canonical + f"{name}/")
    return rules


def keras_block(layer, norm_1, attention, norm_2, mlp_in, mlp_out):
    """The rules of a pre-norm Transformer block of Keras layers.

    Args:
        layer: the block's prefix, with `{i}` for its index.
        norm_1, norm_2: the norms before attention and before the MLP.
        attention: the `MultiHeadAttention`'s name.
        mlp_in, mlp_out: the MLP's Dense layers.

    Example:

    >>> rules = keras_block("block_{i}/", "ln_1", "mha", "ln_2", "mlp/dense_1", "mlp/dense_2")
    >>> len(rules), rules[-1]
    (16, ('block_{i}/mlp/dense_2/bias', 'Transformer/encoderblock_{i}/MlpBlock_3/Dense_1/bias'))
    """
    return (
        *keras_norm(layer + norm_1, C.NORM_1),
        *keras_attention(layer + attention),
        *keras_norm(layer + norm_2, C.NORM_2),
        *keras_dense(layer + mlp_in, C.MLP_IN),
        *keras_dense(layer + mlp_out, C.MLP_OUT),
    )


def keras_map_head(source, probe="probe"):
    """The rules of keras-hub's attention-pool head `source` (probe,
    `attention`, `layernorm`, `mlp/fc1`, `mlp/fc2`).

    Example:

    >>> keras_map_head("head")[0]
    ('head/probe', 'pool/probe')
    """
    return (
        (f"{source}/{probe}", C.MAP_HEAD + "probe"),
        *keras_attention(f"{source}/attention", C.MAP_ATTENTION),
        *keras_norm(f"{source}/layernorm", C.MAP_NORM),
        *keras_dense(f"{source}/mlp/fc1", C.MAP_MLP_IN),
        *keras_dense(f"{source}/mlp/fc2", C.MAP_MLP_OUT),
    )


# The token and position embeddings of keras-hub's text encoders (CLIP's,
# SigLIP's), as the text tower's canonical keys.
KERAS_HUB_TEXT_EMBEDDINGS = (
    ("embedding/token_embedding/embeddings", "embedding/token_embedding"),
    ("embedding/position_embedding/embeddings", "embedding/position_embedding"),
)
