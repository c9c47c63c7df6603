"""The first half of verify's Keras 2 whole-model judge (:mod:`.keras2_model`): a Keras 2 ``model_config``
(parsed JSON, never Keras' own ``from_config`` of the user's file) built into stock Keras 3 layers by this module's
own :data:`TABLE`, keyword by keyword. A class not in the table (``Lambda``, a custom class, a nested model), a call
with arguments, an activation whose Keras 3 meaning differs from Keras 2's or a dtype other than float32 raises
:class:`Unjudged`, saying which. It imports nothing of the reader or the rebuild."""
from typing import TYPE_CHECKING, Any, Callable, Dict, List, Tuple

if TYPE_CHECKING:
    import keras

# Keras 2 activation names whose Keras 3 function is the same (hard_sigmoid and gelu are not: 0.2x + 0.5 against
# relu6(x + 3) / 6, exact against tanh-approximated)
ACTIVATIONS = ("linear", "relu", "tanh", "sigmoid", "softmax", "elu", "selu", "softplus", "softsign", "exponential",
               "swish")
CODE = ("Lambda", "TFOpLambda", "SlicingOpLambda")  # layers that hold code: never run


class Unjudged(Exception):
    """The judge cannot be built from this file; the message says why (the row is then unjudged, not passed)."""


def as_text(value: Any) -> str:
    return value.decode("utf8") if isinstance(value, bytes) else str(value)


def _int(cfg: Dict[str, Any], key: str, name: str) -> int:
    value = cfg.get(key)
    if isinstance(value, bool) or not isinstance(value, int) or value <= 0:
        raise Unjudged(f"layer {name}: {key} {value!r} is not a positive whole number")
    return value


def _flag(cfg: Dict[str, Any], key: str, default: bool) -> bool:
    value = cfg.get(key, default)
    return default if value is None else bool(value)


def _activation(value: Any, name: str) -> str:
    if value is None:
        return "linear"
    if not isinstance(value, str) or value not in ACTIVATIONS:
        raise Unjudged(f"layer {name}: activation {value!r} is not in the judge's table (its Keras 3 function may "
                       "differ from Keras 2's)")
    return value


def _recurrent(keras: Any, cls: str, cfg: Dict[str, Any], name: str) -> Any:
    """CuDNNLSTM / CuDNNGRU as Keras 2 loads them into LSTM / GRU(reset_after=True) (tanh, sigmoid gates, a bias);
    plain LSTM / GRU / SimpleRNN with their own activations."""
    if cfg.get("time_major"):
        raise Unjudged(f"layer {name}: time_major (Keras 3 has no time-major recurrent layer)")
    common = dict(units=_int(cfg, "units", name), return_sequences=_flag(cfg, "return_sequences", False),
                  return_state=_flag(cfg, "return_state", False), go_backwards=_flag(cfg, "go_backwards", False),
                  stateful=_flag(cfg, "stateful", False), name=name)
    if cls == "CuDNNLSTM":
        return keras.layers.LSTM(activation="tanh", recurrent_activation="sigmoid", use_bias=True, **common)
    if cls == "CuDNNGRU":
        return keras.layers.GRU(activation="tanh", recurrent_activation="sigmoid", use_bias=True, reset_after=True,
                                **common)
    common.update(activation=_activation(cfg.get("activation", "tanh"), name), use_bias=_flag(cfg, "use_bias", True))
    if cls == "SimpleRNN":
        return keras.layers.SimpleRNN(**common)
    common["recurrent_activation"] = _activation(cfg.get("recurrent_activation", "sigmoid"), name)
    if cls == "LSTM":
        return keras.layers.LSTM(**common)
    return keras.layers.GRU(reset_after=_flag(cfg, "reset_after", False), **common)  # Keras 2.1 wrote none: False


def _channels_last(cfg: Dict[str, Any], name: str) -> None:
    if cfg.get("data_format", "channels_last") not in (None, "channels_last"):
        raise Unjudged(f"layer {name}: data_format {cfg['data_format']!r} (the judge builds channels_last only)")


def _conv1d(keras, cfg, name):
    _channels_last(cfg, name)
    return keras.layers.Conv1D(filters=_int(cfg, "filters", name), kernel_size=cfg.get("kernel_size"),
                               strides=cfg.get("strides", 1), padding=cfg.get("padding", "valid"),
                               dilation_rate=cfg.get("dilation_rate", 1), groups=cfg.get("groups", 1),
                               activation=_activation(cfg.get("activation"), name),
                               use_bias=_flag(cfg, "use_bias", True), name=name)


def _merging(kind: str) -> Callable[[Any, Dict[str, Any], str], Any]:
    return lambda keras, cfg, name: getattr(keras.layers, kind)(name=name)


def _pooling(kind):
    def make(keras, cfg, name):
        _channels_last(cfg, name)
        return getattr(keras.layers, kind)(name=name)
    return make


def _normalization(kind):
    def make(keras, cfg, name):
        return getattr(keras.layers, kind)(axis=cfg.get("axis", -1), epsilon=float(cfg.get("epsilon", 1e-3)),
                                           center=_flag(cfg, "center", True), scale=_flag(cfg, "scale", True),
                                           name=name)
    return make


def _wrapper(keras, cls, cfg, name):
    inner = _layer(keras, cfg.get("layer"))
    if cls == "TimeDistributed":
        return keras.layers.TimeDistributed(inner, name=name)
    if cfg.get("backward_layer") is not None:
        raise Unjudged(f"layer {name}: a Bidirectional given its own backward layer is not in the judge's table")
    merge = cfg.get("merge_mode", "concat")
    if merge not in ("concat", "sum", "mul", "ave", None):
        raise Unjudged(f"layer {name}: merge_mode {merge!r}")
    return keras.layers.Bidirectional(inner, merge_mode=merge, name=name)


# Keras 2 class name -> (keras, config, layer name) -> the stock Keras 3 layer that computes what it computed
TABLE: Dict[str, Callable[[Any, Dict[str, Any], str], Any]] = {
    "Dense": lambda keras, cfg, name: keras.layers.Dense(
        _int(cfg, "units", name), activation=_activation(cfg.get("activation"), name),
        use_bias=_flag(cfg, "use_bias", True), name=name),
    "Embedding": lambda keras, cfg, name: keras.layers.Embedding(
        _int(cfg, "input_dim", name), _int(cfg, "output_dim", name), mask_zero=_flag(cfg, "mask_zero", False),
        name=name),
    "Activation": lambda keras, cfg, name: keras.layers.Activation(_activation(cfg.get("activation"), name),
                                                                   name=name),
    "Masking": lambda keras, cfg, name: keras.layers.Masking(mask_value=float(cfg.get("mask_value", 0.0)),
                                                             name=name),
    "Flatten": _pooling("Flatten"),  # built as a pooling is: channels_last checked, no other setting
    "Reshape": lambda keras, cfg, name: keras.layers.Reshape(tuple(cfg["target_shape"]), name=name),
    "RepeatVector": lambda keras, cfg, name: keras.layers.RepeatVector(_int(cfg, "n", name), name=name),
    "Permute": lambda keras, cfg, name: keras.layers.Permute(tuple(cfg["dims"]), name=name),
    "Concatenate": lambda keras, cfg, name: keras.layers.Concatenate(axis=cfg.get("axis", -1), name=name),
    "Conv1D": _conv1d,
    "GlobalAveragePooling1D": _pooling("GlobalAveragePooling1D"),
    "GlobalMaxPooling1D": _pooling("GlobalMaxPooling1D"),
    "BatchNormalization": _normalization("BatchNormalization"),
    "LayerNormalization": _normalization("LayerNormalization"),
}
for _merge in ("Add", "Subtract", "Multiply", "Average", "Maximum", "Minimum"):
    TABLE[_merge] = _merging(_merge)
for _still in ("Dropout", "SpatialDropout1D", "GaussianDropout", "GaussianNoise", "AlphaDropout",
               "ActivityRegularization"):  # each the identity at inference
    TABLE[_still] = lambda keras, cfg, name: keras.layers.Identity(name=name)
RECURRENT_CLASSES = ("CuDNNLSTM", "CuDNNGRU", "LSTM", "GRU", "SimpleRNN")
WRAPPERS = ("Bidirectional", "TimeDistributed")


def _layer(keras: Any, node: Any) -> Any:
    """The stock Keras 3 layer of one Keras 2 layer config ``{"class_name", "config"}``, by :data:`TABLE`."""
    if not isinstance(node, dict) or not isinstance(node.get("class_name"), str) or \
            not isinstance(node.get("config"), dict):
        raise Unjudged("a layer config is not {class_name, config}")
    cls, cfg = node["class_name"], node["config"]
    name = cfg.get("name")
    if not isinstance(name, str) or not name:
        raise Unjudged(f"a {cls} layer has no name")
    if cls in CODE:
        raise Unjudged(f"layer {name}: a {cls} layer holds code, which the judge does not run")
    dtype = cfg.get("dtype", "float32")
    if dtype not in (None, "float32"):
        raise Unjudged(f"layer {name}: dtype {dtype!r} (the judge builds float32 layers only)")
    if cls in RECURRENT_CLASSES:
        return _recurrent(keras, cls, cfg, name)
    if cls in WRAPPERS:
        return _wrapper(keras, cls, cfg, name)
    if cls not in TABLE:
        raise Unjudged(f"layer {name}: class {cls} is not in the judge's table of Keras 2 layers")
    return TABLE[cls](keras, cfg, name)


def _input(keras: Any, cfg: Dict[str, Any], name: str) -> Any:
    shape = cfg.get("batch_input_shape", cfg.get("batch_shape"))
    if not isinstance(shape, list) or not shape or \
            not all(d is None or (isinstance(d, int) and not isinstance(d, bool) and d > 0) for d in shape):
        raise Unjudged(f"input {name}: batch shape {shape!r}")
    if cfg.get("sparse") or cfg.get("ragged"):
        raise Unjudged(f"input {name}: a sparse or ragged input")
    return keras.Input(batch_shape=tuple(shape), dtype=cfg.get("dtype") or "float32", name=name)


def build_model(config: Dict[str, Any]) -> "keras.Model":
    """The stock Keras 3 model of a Keras 2 ``model_config`` (parsed JSON): a ``Sequential`` as a chain from its
    input, a ``Functional`` / ``Model`` node by node from ``inbound_nodes``."""
    # lazy: Keras, loaded on first use (import cudnn_port stays light)
    import keras

    if isinstance(config, dict) and config.get("class_name") == "Sequential" and \
            isinstance(config.get("config"), list):  # Keras 2.0 to 2.2.2 wrote a Sequential's layers alone
        config = dict(config, config={"layers": config["config"]})
    if not isinstance(config, dict) or not isinstance(config.get("config"), dict):
        raise Unjudged("model_config is not {class_name, config}")
    cls, cfg = config.get("class_name"), config["config"]
    layers = cfg.get("layers")
    if not isinstance(layers, list) or not layers:
        raise Unjudged("model_config lists no layers")
    if cls == "Sequential":
        return _sequential(keras, layers, cfg.get("name"))
    if cls in ("Functional", "Model"):
        return _functional(keras, cfg)
    raise Unjudged(f"model class {cls!r} is not Sequential or Functional")


def _sequential(keras, layers, name):
    first = layers[0] if isinstance(layers[0], dict) else {}
    if first.get("class_name") == "InputLayer":
        x = _input(keras, first.get("config") or {}, (first.get("config") or {}).get("name", "input"))
        layers = layers[1:]
    else:  # Keras 2 put the input's shape on the first layer
        cfg = first.get("config") or {}
        x = _input(keras, dict(cfg, dtype=cfg.get("dtype")), f"{cfg.get('name', 'input')}_input")
    inputs = x
    for node in layers:
        x = _layer(keras, node)(x)
    return keras.Model(inputs, x, name=name if isinstance(name, str) else None)


def _refs(value: Any, what: str) -> List[Tuple[str, int, int]]:
    """``[[layer, node, tensor], ...]`` (or one such triple) of a Functional's ``input_layers`` / ``output_layers``."""
    if isinstance(value, list) and len(value) == 3 and isinstance(value[0], str):
        value = [value]
    if not isinstance(value, list) or not all(isinstance(r, list) and len(r) >= 3 and isinstance(r[0], str)
                                              for r in value):
        raise Unjudged(f"model_config's {what} are not [layer, node, tensor] triples")
    return [(r[0], int(r[1]), int(r[2])) for r in value]


def _functional(keras, cfg):
    made, nodes, done = {}, {}, {}  # layer name -> Keras 3 layer; -> its inbound nodes; (name, node) -> outputs
    for entry in cfg["layers"]:
        if not isinstance(entry, dict) or not isinstance(entry.get("config"), dict):
            raise Unjudged("a layer config is not {class_name, config}")
        name = entry.get("name") or entry["config"].get("name")
        if not isinstance(name, str) or name in made:
            raise Unjudged(f"layer name {name!r} missing or repeated")
        if entry.get("class_name") == "InputLayer":
            done[(name, 0)] = [_input(keras, entry["config"], name)]
            made[name], nodes[name] = None, []
            continue
        made[name], nodes[name] = _layer(keras, entry), entry.get("inbound_nodes") or []
        if not isinstance(nodes[name], list):
            raise Unjudged(f"layer {name}: inbound_nodes in a form the judge does not read")
    pending = [(name, k, node) for name in made for k, node in enumerate(nodes[name])]
    while pending:
        left = []
        for name, k, node in pending:
            if not isinstance(node, list) or not all(isinstance(t, list) and len(t) >= 3 for t in node):
                raise Unjudged(f"layer {name}: inbound_nodes in a form the judge does not read")
            if any(len(t) > 3 and t[3] for t in node):
                raise Unjudged(f"layer {name}: called with arguments {[t[3] for t in node if len(t) > 3]}")
            if not all((t[0], int(t[1])) in done for t in node):
                left.append((name, k, node))
                continue
            args = [done[(t[0], int(t[1]))][int(t[2])] for t in node]
            result = made[name](args if len(args) > 1 else args[0])
            done[(name, k)] = list(result) if isinstance(result, (list, tuple)) else [result]
        if len(left) == len(pending):
            raise Unjudged(f"layers {', '.join(sorted({n for n, _, _ in left}))}: their inputs never come")
        pending = left
    try:
        inputs = [done[(n, k)][t] for n, k, t in _refs(cfg.get("input_layers"), "input_layers")]
        outputs = [done[(n, k)][t] for n, k, t in _refs(cfg.get("output_layers"), "output_layers")]
    except (KeyError, IndexError) as e:
        raise Unjudged(f"model_config names an input or output no layer gives ({e})") from None
    return keras.Model(inputs if len(inputs) > 1 else inputs[0], outputs if len(outputs) > 1 else outputs[0],
                       name=cfg.get("name") if isinstance(cfg.get("name"), str) else None)
