"""The Segment Anything Model (SAM): transformers' `SamModel`, keras-hub's
`SAMBackbone` presets and timm's `samvit_*` image encoders -> keras_vit.

The image encoder is a `keras_vit.ViT` without prefix tokens whose blocks
attend in windows with decomposed relative positions (a few attend
globally) and whose neck turns the tokens into the image embedding
(`window_size`, `global_attention_blocks`, `relative_position`,
`neck_channels`); the prompt decoder is
`keras_vit.layers.prompt_encoder.PromptEncoder` and
`keras_vit.layers.mask_decoder.MaskDecoder`
(`keras_vit.tasks.prompt_masks`).

Facts about transformers' files (`save_pretrained` of `SamModel`,
`model_type` "sam"):

- `config.json`: `vision_config` (`hidden_size`, `num_hidden_layers`,
  `num_attention_heads`, `mlp_dim` or `mlp_ratio`, `image_size` 1024,
  `patch_size` 16, `output_channels` 256, `window_size` 14,
  `global_attn_indexes`, `use_abs_pos`, `use_rel_pos`, `qkv_bias`,
  `hidden_act` "gelu", `layer_norm_eps`, `num_pos_feats`),
  `prompt_encoder_config` (`hidden_size`, `image_size`, `patch_size`,
  `mask_input_channels`, `layer_norm_eps`) and `mask_decoder_config`
  (`hidden_size`, `num_hidden_layers`, `num_attention_heads`, `mlp_dim`,
  `attention_downsample_rate`, `num_multimask_outputs`, `iou_head_depth`,
  `iou_head_hidden_dim`, `layer_norm_eps`); left-out fields take the config
  classes' defaults.
- tensors: `vision_encoder.` (`pos_embed` `(1, h, w, D)`,
  `patch_embed.projection`, `layers.{i}.` with a fused `attn.qkv`,
  `attn.proj`, `attn.rel_pos_h`/`rel_pos_w`, `layer_norm1`/`2`,
  `mlp.lin1`/`lin2`, and `neck.conv1`/`layer_norm1`/`conv2`/`layer_norm2`),
  `shared_image_embedding.positional_embedding` (the prompt encoder's
  random Fourier matrix, tied to `prompt_encoder.shared_embedding`),
  `prompt_encoder.` and `mask_decoder.` (`HEAD_RULES`).
- `preprocessor_config.json` (`SamImageProcessor`): the longer side
  resized to `size["longest_edge"]` (bilinear), ImageNet statistics, then
  padded with zeros (after normalising) to `pad_size`; masks come out at
  a quarter of it.
"""

from keras_vit.weights import canonical as C
from keras_vit.weights.formats import transformers_processor
from keras_vit.weights.formats.conventions import torch_linear, torch_norm
from keras_vit.weights.formats.transformers_family import ACTIVATIONS, split_ignored
from keras_vit.weights.rules import RuleTable

# The config classes' defaults (SamVisionConfig, SamPromptEncoderConfig,
# SamMaskDecoderConfig).
VISION_DEFAULTS = dict(hidden_size=768, output_channels=256, num_hidden_layers=12, num_attention_heads=12,
                       num_channels=3, image_size=1024, patch_size=16, hidden_act="gelu", layer_norm_eps=1e-6,
                       attention_dropout=0.0, qkv_bias=True, mlp_ratio=4.0, use_abs_pos=True, use_rel_pos=True,
                       window_size=14, global_attn_indexes=(2, 5, 8, 11), num_pos_feats=128, mlp_dim=None)
PROMPT_DEFAULTS = dict(hidden_size=256, image_size=1024, patch_size=16, mask_input_channels=16,
                       num_point_embeddings=4, hidden_act="gelu", layer_norm_eps=1e-6)
DECODER_DEFAULTS = dict(hidden_size=256, hidden_act="relu", mlp_dim=2048, num_hidden_layers=2, num_attention_heads=8,
                        attention_downsample_rate=2, num_multimask_outputs=3, iou_head_depth=3,
                        iou_head_hidden_dim=256, layer_norm_eps=1e-6)
# The SAM variants by image encoder (the paper's B, L, H).
VARIANTS = {
    "ViT-B": dict(hidden_size=768, num_hidden_layers=12, num_attention_heads=12, global_attn_indexes=(2, 5, 8, 11)),
    "ViT-L": dict(hidden_size=1024, num_hidden_layers=24, num_attention_heads=16, global_attn_indexes=(5, 11, 17, 23)),
    "ViT-H": dict(hidden_size=1280, num_hidden_layers=32, num_attention_heads=16, global_attn_indexes=(7, 15, 23, 31)),
}
PROMPT_ENCODER, MASK_DECODER = "prompt_encoder/", "mask_decoder/"

_V = "vision_encoder."
_BLOCK = "layers.{i}."
VISION_BODY = (
    ("pos_embed", C.POSEMB, "grid"),
    *torch_linear("patch_embed.projection", C.EMBEDDING, "conv"),
    *torch_norm(_BLOCK + "layer_norm1", C.NORM_1),
    *torch_linear(_BLOCK + "attn.qkv", C.ATTENTION + "{part}/", "qkv_kernel", "qkv_bias"),
    *torch_linear(_BLOCK + "attn.proj", C.ATTENTION + "out/", "heads_out"),
    (_BLOCK + "attn.rel_pos_h", C.RELATIVE_POSITION + "height"),
    (_BLOCK + "attn.rel_pos_w", C.RELATIVE_POSITION + "width"),
    *torch_norm(_BLOCK + "layer_norm2", C.NORM_2),
    *torch_linear(_BLOCK + "mlp.lin1", C.MLP_IN),
    *torch_linear(_BLOCK + "mlp.lin2", C.MLP_OUT),
    ("neck.conv1.weight", C.NECK + "conv_0/kernel", "conv"),
    *torch_norm("neck.layer_norm1", C.NECK + "norm_0/"),
    ("neck.conv2.weight", C.NECK + "conv_1/kernel", "conv"),
    *torch_norm("neck.layer_norm2", C.NECK + "norm_1/"),
)
_ATTENTIONS = {"self_attn": "self_attention", "cross_attn_token_to_image": "token_to_image",
               "cross_attn_image_to_token": "image_to_token"}


def _attention(source, target):
    rules = ()
    for torch_name, keras_name in (("q_proj", "query"), ("k_proj", "key"), ("v_proj", "value"), ("out_proj", "out")):
        rules += torch_linear(f"{source}.{torch_name}", f"{target}/{keras_name}/")
    return rules


def _prompt_rules():
    p, t = "prompt_encoder.", PROMPT_ENCODER
    return (
        ("shared_image_embedding.positional_embedding", t + "positional_embedding"),
        *((f"{p}point_embed.{k}.weight", t + f"point_embedding_{k}", "flatten") for k in range(4)),
        (p + "not_a_point_embed.weight", t + "not_a_point", "flatten"),
        (p + "no_mask_embed.weight", t + "no_mask", "flatten"),
        *torch_linear(p + "mask_embed.conv1", t + "mask_conv_0/", "conv"),
        *torch_norm(p + "mask_embed.layer_norm1", t + "mask_norm_0/"),
        *torch_linear(p + "mask_embed.conv2", t + "mask_conv_1/", "conv"),
        *torch_norm(p + "mask_embed.layer_norm2", t + "mask_norm_1/"),
        *torch_linear(p + "mask_embed.conv3", t + "mask_conv_2/", "conv"),
    )


def _decoder_rules(decoder):
    d, t = "mask_decoder.", MASK_DECODER
    block, target = d + "transformer.layers.{i}.", t + "two_way_{i}/"
    rules = [(d + "iou_token.weight", t + "iou_token"), (d + "mask_tokens.weight", t + "mask_tokens")]
    for source, name in _ATTENTIONS.items():
        rules += _attention(block + source, target + name)
    for n in range(1, 5):
        rules += torch_norm(block + f"layer_norm{n}", target + f"norm_{n}/")
    rules += [*torch_linear(block + "mlp.lin1", target + "mlp_0/"), *torch_linear(block + "mlp.lin2", target + "mlp_1/"),
              *_attention(d + "transformer.final_attn_token_to_image", t + "final_attention"),
              *torch_norm(d + "transformer.layer_norm_final_attn", t + "final_norm/"),
              *torch_linear(d + "upscale_conv1", t + "upscale_0/", "up2x2_kernel", "up2x2_bias"),
              *torch_norm(d + "upscale_layer_norm", t + "upscale_norm/"),
              *torch_linear(d + "upscale_conv2", t + "upscale_1/", "up2x2_kernel", "up2x2_bias")]
    for k in range(decoder["num_multimask_outputs"] + 1):
        mlp = f"{d}output_hypernetworks_mlps.{k}."
        rules += [*torch_linear(mlp + "proj_in", t + f"hyper_{k}_0/"), *torch_linear(mlp + "layers.0", t + f"hyper_{k}_1/"),
                  *torch_linear(mlp + "proj_out", t + f"hyper_{k}_2/")]
    depth, head = decoder["iou_head_depth"], d + "iou_prediction_head."
    rules += torch_linear(head + "proj_in", t + "iou_head_0/")
    rules += [rule for j in range(depth - 2) for rule in torch_linear(head + f"layers.{j}", t + f"iou_head_{j + 1}/")]
    return tuple(rules) + torch_linear(head + "proj_out", t + f"iou_head_{depth - 1}/")


IGNORED = {
    "prompt_encoder.shared_embedding.positional_embedding": "tied to shared_image_embedding.positional_embedding",
}


def unsupported(message):
    """The error of a config keras_vit cannot build."""
    return ValueError(f"Cannot build this Segment Anything model: {message}")


def configs(config):
    """`(vision, prompt, decoder)` configs of a `SamModel` `config.json` dict,
    over the config classes' defaults.

    Raises:
        ValueError: for another `model_type`.
    """
    if config.get("model_type") != "sam":
        raise unsupported(f"`model_type` must be 'sam'. Received: model_type={config.get('model_type')!r}")
    vision = {**VISION_DEFAULTS, **(config.get("vision_config") or {})}
    prompt = {**PROMPT_DEFAULTS, **(config.get("prompt_encoder_config") or {})}
    decoder = {**DECODER_DEFAULTS, **(config.get("mask_decoder_config") or {})}
    return vision, prompt, decoder


def _check_acts(vision, prompt, decoder):
    for name, config, allowed in (("vision", vision, ACTIVATIONS), ("prompt encoder", prompt, ("gelu",)),
                                  ("mask decoder", decoder, ("relu",))):
        if config["hidden_act"] not in allowed:
            raise unsupported(f"the {name}'s `hidden_act` must be one of {sorted(allowed)}. "
                              f"Received: hidden_act={config['hidden_act']!r}")


def image_arguments(config):
    """`keras_vit.ViT` arguments of the image encoder (the neck's tokens out).

    Example:

    >>> args = image_arguments({"model_type": "sam"})
    >>> args["window_size"], args["global_attention_blocks"], args["neck_channels"], args["mlp_dim"]
    (14, (2, 5, 8, 11), 256, 3072)
    """
    vision, prompt, decoder = configs(config)
    _check_acts(vision, prompt, decoder)
    mlp_dim = vision["mlp_dim"] or int(vision["hidden_size"] * vision["mlp_ratio"])
    window = vision["window_size"] or None
    return C.encoder_arguments(
        vision["image_size"], vision["patch_size"], vision["hidden_size"], vision["num_hidden_layers"],
        vision["num_attention_heads"], mlp_dim, channels=vision["num_channels"],
        mlp_activation=ACTIVATIONS[vision["hidden_act"]], layer_norm_epsilon=float(vision["layer_norm_eps"]),
        qkv_bias=bool(vision["qkv_bias"]), attention_dropout_rate=float(vision["attention_dropout"]),
        classifier="gap", include_top=False, pooling=None, classifier_activation=None,
        position_embedding="learned" if vision["use_abs_pos"] else "none",
        relative_position="decomposed" if vision["use_rel_pos"] else None,
        window_size=window, global_attention_blocks=tuple(vision["global_attn_indexes"]) if window else (),
        neck_channels=int(vision["output_channels"]),
    )


def decoder_arguments(config):
    """`(PromptEncoder arguments, MaskDecoder arguments)`.

    Example:

    >>> prompt, decoder = decoder_arguments({"model_type": "sam"})
    >>> prompt["grid_size"], decoder["num_multimask_outputs"]
    (64, 3)
    """
    vision, prompt, decoder = configs(config)
    _check_acts(vision, prompt, decoder)
    widths = {"image embedding": vision["output_channels"], "prompt encoder": prompt["hidden_size"],
              "mask decoder": decoder["hidden_size"], "positional features": 2 * vision["num_pos_feats"]}
    if len(set(widths.values())) != 1:
        raise unsupported(f"the image embedding, the prompts and the decoder must have one width. Received: {widths}")
    grid = prompt["image_size"] // prompt["patch_size"]
    return (
        dict(hidden_size=prompt["hidden_size"], image_size=prompt["image_size"], grid_size=grid,
             mask_channels=prompt["mask_input_channels"], layer_norm_epsilon=float(prompt["layer_norm_eps"])),
        dict(num_layers=decoder["num_hidden_layers"], num_heads=decoder["num_attention_heads"],
             mlp_dim=decoder["mlp_dim"], num_multimask_outputs=decoder["num_multimask_outputs"],
             iou_head_depth=decoder["iou_head_depth"], iou_head_hidden_dim=decoder["iou_head_hidden_dim"],
             downsample_rate=decoder["attention_downsample_rate"], layer_norm_epsilon=float(decoder["layer_norm_eps"])),
    )


def preprocessing(config, file):
    """`(Preprocessing record, longest edge)` of a `preprocessor_config.json`
    dict (None: `SamImageProcessor`'s defaults): ImageNet statistics, the
    model input the padded square of the longest edge.

    Example:

    >>> record, longest = preprocessing({"model_type": "sam"}, None)
    >>> record.image_size, longest, record.interpolation
    ((1024, 1024), 1024, 'bilinear')
    """
    vision = configs(config)[0]
    file = {"image_mean": [0.485, 0.456, 0.406], "image_std": [0.229, 0.224, 0.225], "resample": 2,
            "size": {"longest_edge": vision["image_size"]}, **(file or {})}
    longest = int((file.get("size") or {}).get("longest_edge", vision["image_size"]))
    pad = file.get("pad_size") or {"height": vision["image_size"], "width": vision["image_size"]}
    if (pad["height"], pad["width"]) != (vision["image_size"],) * 2 or longest > vision["image_size"]:
        raise unsupported(
            f"the processor must pad images to the encoder's {vision['image_size']} pixels. Received: "
            f"size={file.get('size')!r}, pad_size={pad!r}"
        )
    square = dict(file, size={"height": pad["height"], "width": pad["width"]}, do_center_crop=False)
    return transformers_processor.preprocessing(square), longest


def tables(config):
    """`(image encoder, prompt decoder)` `RuleTable`s of a `SamModel` state dict."""
    decoder = configs(config)[2]
    return RuleTable(VISION_BODY).prefixed(_V), RuleTable(_prompt_rules() + _decoder_rules(decoder))


def read(state, config, path):
    """`(image encoder Checkpoint, prompt decoder Checkpoint)` of a
    `SamModel` state dict (keys no table knows kept, for the loader to
    report as unexpected)."""
    kept, ignored = split_ignored(state, IGNORED)
    vision_table, decoder_table = tables(config)
    vision = {k: v for k, v in kept.items() if k.startswith(_V)}
    rest = {k: v for k, v in kept.items() if k not in vision}
    image_params, unknown = vision_table.to_canonical(vision, configs(config)[0]["num_attention_heads"])
    image_params.update({k: vision[k] for k in unknown})
    decoder_params, unknown = decoder_table.to_canonical(rest)
    decoder_params.update({k: rest[k] for k in unknown})
    return C.Checkpoint(path, "transformers", image_params, ignored), C.Checkpoint(path, "transformers", decoder_params)


# --- keras-hub --------------------------------------------------------------------
# keras-hub's `SAMBackbone` holds a `ViTDetBackbone`, a `SAMPromptEncoder` and
# a `SAMMaskDecoder` whose sublayers are reached by attribute (their variable
# paths carry Keras' counters); each is read as the tensor of `SamModel` it
# is, then through the tables above.

KERAS_HUB_REGISTERED = "keras_hub>SAMBackbone"


def keras_hub_config(backbone):
    """A `SamModel`-shaped config dict of a keras-hub `SAMBackbone` config.

    Example:

    >>> config = keras_hub_config({"config": {"image_encoder": {"config": {"image_shape": [64, 64, 3],
    ...     "patch_size": 8, "hidden_size": 16, "num_layers": 2, "intermediate_dim": 32, "num_heads": 2,
    ...     "num_output_channels": 16, "window_size": 4, "global_attention_layer_indices": [1]}},
    ...     "prompt_encoder": {"config": {"hidden_size": 16, "image_embedding_size": [8, 8],
    ...     "input_image_size": [64, 64]}}, "mask_decoder": {"config": {"hidden_size": 16, "num_layers": 2,
    ...     "intermediate_dim": 32, "num_heads": 2}}}})
    >>> config["vision_config"]["global_attn_indexes"], config["prompt_encoder_config"]["patch_size"]
    ([1], 8)
    """
    parts = backbone["config"]
    image, prompt, decoder = (parts[k]["config"] for k in ("image_encoder", "prompt_encoder", "mask_decoder"))
    if image.get("image_shape", [None])[0] is None or prompt.get("activation", "gelu") != "gelu":
        raise unsupported(f"the keras-hub preset must have a fixed square image size and GELU prompts. "
                          f"Received: image_shape={image.get('image_shape')!r}")
    size, patch = int(image["image_shape"][0]), int(image.get("patch_size", 16))
    grid = prompt.get("image_embedding_size", [64, 64])
    hidden = int(prompt.get("hidden_size", 256))
    return {
        "model_type": "sam",
        "vision_config": dict(
            hidden_size=image["hidden_size"], num_hidden_layers=image["num_layers"], num_attention_heads=image["num_heads"],
            mlp_dim=image["intermediate_dim"], image_size=size, patch_size=patch,
            output_channels=image.get("num_output_channels", 256), qkv_bias=image.get("use_bias", True),
            use_abs_pos=image.get("use_abs_pos", True), use_rel_pos=image.get("use_rel_pos", True),
            window_size=image.get("window_size", 14), global_attn_indexes=list(image["global_attention_layer_indices"]),
            layer_norm_eps=image.get("layer_norm_epsilon", 1e-6), num_pos_feats=hidden // 2),
        "prompt_encoder_config": dict(
            hidden_size=hidden, image_size=int(prompt.get("input_image_size", [size])[0]),
            patch_size=int(prompt.get("input_image_size", [size])[0]) // int(grid[0]),
            mask_input_channels=prompt.get("mask_in_channels", 16)),
        "mask_decoder_config": dict(
            hidden_size=decoder["hidden_size"], mlp_dim=decoder["intermediate_dim"],
            num_hidden_layers=decoder["num_layers"], num_attention_heads=decoder["num_heads"],
            num_multimask_outputs=decoder.get("num_multimask_outputs", 3),
            iou_head_depth=decoder.get("iou_head_depth", 3), iou_head_hidden_dim=decoder.get("iou_head_hidden_dim", 256)),
    }


class _Reader:
    """Collects the variables of keras-hub layers under `SamModel` names and
    the variables it has read, for the strict check."""

    def __init__(self):
        self.state, self.read = {}, set()

    def take(self, name, variable, transform=None):
        import keras

        value = keras.ops.convert_to_numpy(variable)
        self.state[name] = value if transform is None else transform(value)
        self.read.add(id(variable))

    def dense(self, name, layer):
        self.take(name + ".weight", layer.kernel, lambda a: a.T)
        if layer.bias is not None:
            self.take(name + ".bias", layer.bias)

    def conv(self, name, layer, transposed=False):
        # Keras (kh, kw, in, out) -> OIHW; transposed (kh, kw, out, in) -> (in, out, kh, kw).
        self.take(name + ".weight", layer.kernel, lambda a: a.transpose(3, 2, 0, 1))
        if layer.bias is not None:
            self.take(name + ".bias", layer.bias)

    def norm(self, name, layer):
        self.take(name + ".weight", layer.gamma)
        self.take(name + ".bias", layer.beta)

    def attention(self, name, layer):
        for torch_name, keras_name in (("q_proj", "query_proj"), ("k_proj", "key_proj"), ("v_proj", "value_proj"),
                                       ("out_proj", "out_proj")):
            self.dense(f"{name}.{torch_name}", getattr(layer, keras_name))

    def mlp(self, names, sequential):
        dense = [layer for layer in sequential.layers if type(layer).__name__ == "Dense"]
        for name, layer in zip(names, dense, strict=True):
            self.dense(name, layer)


def _read_image_encoder(reader, encoder):
    kinds = {}
    for layer in encoder.layers:
        kinds.setdefault(type(layer).__name__, []).append(layer)
    v = _V
    reader.conv(v + "patch_embed.projection", kinds["ViTDetPatchingAndEmbedding"][0].projection)
    for layer in kinds.get("AddPositionalEmbedding", []):
        reader.take(v + "pos_embed", layer.pos_embed)
    for i, block in enumerate(kinds["WindowedTransformerEncoder"]):
        name = f"{v}layers.{i}."
        reader.norm(name + "layer_norm1", block.layer_norm1)
        reader.norm(name + "layer_norm2", block.layer_norm2)
        reader.dense(name + "attn.qkv", block.attention.qkv)
        reader.dense(name + "attn.proj", block.attention.projection)
        relative = getattr(block.attention, "add_decomposed_relative_pe", None)
        if relative is not None:
            reader.take(name + "attn.rel_pos_h", relative.rel_pos_h)
            reader.take(name + "attn.rel_pos_w", relative.rel_pos_w)
        reader.mlp((name + "mlp.lin1", name + "mlp.lin2"), block.mlp_block.dense_net)
    conv_1, norm_1, conv_2, norm_2 = encoder.neck.layers
    reader.conv(v + "neck.conv1", conv_1)
    reader.norm(v + "neck.layer_norm1", norm_1)
    reader.conv(v + "neck.conv2", conv_2)
    reader.norm(v + "neck.layer_norm2", norm_2)


def _read_prompt_encoder(reader, prompt):
    p = "prompt_encoder."
    reader.take("shared_image_embedding.positional_embedding",
                prompt.positional_embedding_layer.positional_encoding_gaussian_matrix)
    for k, name in enumerate(("background_point_embed", "foreground_point_embed", "top_left_corner_embed",
                              "bottom_right_corner_embed")):
        reader.take(f"{p}point_embed.{k}.weight", getattr(prompt, name).embeddings)
    reader.take(p + "not_a_point_embed.weight", prompt.not_a_point_embed.embeddings)
    reader.take(p + "no_mask_embed.weight", prompt.no_mask_embed.embeddings)
    layers = [layer for layer in prompt.mask_downscaler.layers if type(layer).__name__ != "Activation"]
    names = ("conv1", "layer_norm1", "conv2", "layer_norm2", "conv3")
    for name, layer in zip(names, layers, strict=True):
        (reader.conv if name.startswith("conv") else reader.norm)(p + "mask_embed." + name, layer)


def _read_mask_decoder(reader, decoder, depth):
    d = "mask_decoder."
    for i, block in enumerate(decoder.transformer.layers):
        name = f"{d}transformer.layers.{i}."
        reader.attention(name + "self_attn", block.self_attention)
        reader.attention(name + "cross_attn_token_to_image", block.cross_attention_token_to_image)
        reader.attention(name + "cross_attn_image_to_token", block.cross_attention_image_to_token)
        for n in range(1, 5):
            reader.norm(name + f"layer_norm{n}", getattr(block, f"layer_norm{n}"))
        reader.mlp((name + "mlp.lin1", name + "mlp.lin2"), block.mlp_block.mlp_block)
    reader.attention(d + "transformer.final_attn_token_to_image", decoder.transformer.final_attention_token_to_image)
    reader.norm(d + "transformer.layer_norm_final_attn", decoder.transformer.final_layer_norm)
    reader.take(d + "iou_token.weight", decoder.iou_token.embeddings)
    reader.take(d + "mask_tokens.weight", decoder.mask_tokens.embeddings)
    layers = [layer for layer in decoder.output_upscaling.layers if type(layer).__name__ != "Activation"]
    for name, layer in zip(("upscale_conv1", "upscale_layer_norm", "upscale_conv2"), layers, strict=True):
        if name.startswith("upscale_conv"):
            reader.conv(d + name, layer, transposed=True)
        else:
            reader.norm(d + name, layer)
    feed_forward = lambda prefix, count: (  # noqa: E731
        (prefix + "proj_in",) + tuple(f"{prefix}layers.{j}" for j in range(count - 2)) + (prefix + "proj_out",))
    for k, mlp in enumerate(decoder.output_hypernetworks_mlps):
        reader.mlp(feed_forward(f"{d}output_hypernetworks_mlps.{k}.", 3), mlp.mlp_block)
    reader.mlp(feed_forward(d + "iou_prediction_head.", depth), decoder.iou_prediction_head.mlp_block)


def keras_hub_state(backbone, config):
    """A keras-hub `SAMBackbone`'s variables as a `SamModel` state dict.

    Raises:
        ValueError: naming the variables no rule reads (nothing is loaded).
    """
    reader = _Reader()
    _read_image_encoder(reader, backbone.image_encoder)
    _read_prompt_encoder(reader, backbone.prompt_encoder)
    _read_mask_decoder(reader, backbone.mask_decoder, configs(config)[2]["iou_head_depth"])
    unread = [v.path for v in backbone.weights if id(v) not in reader.read]
    if unread:
        raise unsupported(f"the keras-hub preset has variables keras_vit does not read: {unread[:10]}")
    return reader.state


# --- timm ----------------------------------------------------------------------------
# timm's `VisionTransformerSAM` (`samvit_*`): the same image encoder under
# timm's names (`patch_embed.proj`, `pos_embed`, `blocks.{i}.` with `norm1`,
# `attn.qkv`, `attn.proj`, `attn.rel_pos_h`/`w`, `norm2`, `mlp.fc1`/`fc2`;
# `neck.0` to `neck.3`: convolution, LayerNorm2d, convolution, LayerNorm2d),
# then timm's classifier head: the neck's map averaged (`global_pool="avg"`)
# and, with `num_classes`, a Linear `head.fc`.

# The `samvit_*` model functions' arguments are timm's table's
# (`keras_vit.weights.formats.timm_architectures`); `keras_vit.families.timm_zoo`
# hands this module the Hub directories of timm's `VisionTransformerSAM`.
TIMM_DEFAULTS = dict(img_size=1024, patch_size=16, in_chans=3, num_classes=768, mlp_ratio=4.0, qkv_bias=True,
                     use_abs_pos=True, use_rel_pos=True, window_size=14, global_attn_indexes=(), neck_chans=256,
                     global_pool="avg", qk_norm=False, init_values=None, pre_norm=False)
_T = "blocks.{i}."
TIMM_TABLE = RuleTable((
    ("pos_embed", C.POSEMB, "grid"),
    *torch_linear("patch_embed.proj", C.EMBEDDING, "conv"),
    *torch_norm(_T + "norm1", C.NORM_1),
    *torch_linear(_T + "attn.qkv", C.ATTENTION + "{part}/", "qkv_kernel", "qkv_bias"),
    *torch_linear(_T + "attn.proj", C.ATTENTION + "out/", "heads_out"),
    (_T + "attn.rel_pos_h", C.RELATIVE_POSITION + "height"),
    (_T + "attn.rel_pos_w", C.RELATIVE_POSITION + "width"),
    *torch_norm(_T + "norm2", C.NORM_2),
    *torch_linear(_T + "mlp.fc1", C.MLP_IN),
    *torch_linear(_T + "mlp.fc2", C.MLP_OUT),
    ("neck.0.weight", C.NECK + "conv_0/kernel", "conv"),
    *torch_norm("neck.1", C.NECK + "norm_0/"),
    ("neck.2.weight", C.NECK + "conv_1/kernel", "conv"),
    *torch_norm("neck.3", C.NECK + "norm_1/"),
    *torch_linear("head.fc", C.HEAD),
))


def timm_arguments(config):
    """`(keras_vit.ViT arguments, None)` of a timm `samvit_*` Hub config dict.

    Raises:
        ValueError: naming the timm arguments keras_vit has no equivalent of.
    """
    from keras_vit.weights.formats import timm

    name, overrides, pretrained, top = timm.split_config(config)
    args = {**TIMM_DEFAULTS, **timm.architecture_entry(name.split(".")[0])["args"], **overrides}
    args.update({k: top[k] for k in ("num_classes", "global_pool") if top.get(k) is not None})
    bad = {k: args[k] for k in sorted(set(args) - set(TIMM_DEFAULTS) - {"embed_dim", "depth", "num_heads"})}
    bad.update({k: args[k] for k in ("qk_norm", "init_values", "pre_norm") if args[k]})
    if args["global_pool"] not in ("avg", "") or not args["neck_chans"]:
        bad.update(global_pool=args["global_pool"], neck_chans=args["neck_chans"])
    if bad:
        raise unsupported(f"timm model {name!r} has arguments keras_vit has no equivalent of: {bad}")
    window = args["window_size"] or None
    classes = int(args["num_classes"])
    out = C.encoder_arguments(
        args["img_size"], args["patch_size"], args["embed_dim"], args["depth"], args["num_heads"],
        int(args["embed_dim"] * args["mlp_ratio"]), channels=args["in_chans"], mlp_activation="gelu",
        qkv_bias=bool(args["qkv_bias"]), classifier="gap", classifier_activation=None,
        position_embedding="learned" if args["use_abs_pos"] else "none",
        relative_position="decomposed" if args["use_rel_pos"] else None, window_size=window,
        global_attention_blocks=tuple(args["global_attn_indexes"]) if window else (),
        neck_channels=int(args["neck_chans"]), include_top=bool(classes) and args["global_pool"] == "avg",
    )
    if out["include_top"]:
        out["classes"] = classes
        out["class_names"] = timm.class_names(top, pretrained, classes)
    else:
        out["pooling"] = "avg" if args["global_pool"] == "avg" else None
    return out, None


def read_timm(state, path, config, args, _layout=None):
    """A timm `samvit_*` state dict as a `Checkpoint` (keys no rule knows
    kept, for the loader to report as unexpected)."""
    params, unknown = TIMM_TABLE.to_canonical(state, args["num_heads"])
    params.update({k: state[k] for k in unknown})
    return C.Checkpoint(str(path), "timm", params)


def timm_preset_source(directory, config=None):
    """A `PresetSource` for a timm Hub directory of a `samvit_*` model
    (`config`: its `config.json` dict, None: read here)."""
    from keras_vit.weights.formats import timm

    return timm.hub_source(directory, timm_arguments, read_timm, config=config)
