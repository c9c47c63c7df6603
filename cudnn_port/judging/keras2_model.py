"""The judge of the whole model a Keras 2 ``.h5`` is rebuilt into (``OUT/keras/model.keras``): the model built again
from the source file's own ``model_config`` and every array of its ``model_weights``, by this module alone.

- The config is read with h5py as JSON data (never ``keras.models.load_model`` on the user's file, never its
  ``from_config``) and translated into stock Keras 3 layers by :data:`TABLE`, keyword by keyword: ``CuDNNLSTM`` ->
  ``LSTM(activation="tanh", recurrent_activation="sigmoid")``, ``CuDNNGRU`` -> ``GRU(reset_after=True,
  recurrent_activation="sigmoid")``, plain ``LSTM`` / ``GRU`` / ``SimpleRNN``, ``Bidirectional``,
  ``TimeDistributed``, ``Dense``, ``Embedding``, ``Masking``, ``Conv1D``, normalisations, merges, reshapes, and
  the dropouts and noises as identities (what they are at inference). A class not in the table (``Lambda``, a
  custom class, a nested model), a call with arguments, an activation whose Keras 3 meaning differs from Keras 2's
  (``hard_sigmoid``, ``gelu``) or a dtype other than float32 leaves the row unjudged, the note saying which.
- Every weight comes from the file by its layer's name and its own variable name (``kernel``, ``bias``, a
  Bidirectional's ``forward_`` / ``backward_`` half): a CuDNN layer's three arrays by Keras 2's rule
  (:func:`.keras_weights.keras2_rule`), every other array as stored. An array of the file that no variable took, or a
  variable no array filled, fails the row, naming them.

It imports nothing of the reader (:mod:`cudnn_port.readers.keras_h5`) or the rebuild
(:mod:`cudnn_port.exports.keras_rebuild`); it shares only the untrusted-file checks run before anything is built
(:func:`~cudnn_port.readers.h5_guard.check_h5`, :func:`~cudnn_port.readers.config_sizes.check_config_sizes`).
"""
import json
import os
from typing import TYPE_CHECKING, Any, Callable, Dict, List, Tuple

import numpy as np

from ..deps import import_tf
from ..errors import CudnnPortError
from ..readers.config_sizes import check_config_sizes
from ..readers.h5_guard import check_h5
from ..readers.keras_model import load_model_file
from .keras_weights import keras2_rule
from .parity import compare, failed_row, model_feeds
from .stock import model_outputs

if TYPE_CHECKING:
    import keras

    from ..manifest import Manifest

LABEL = "keras/model.keras (Keras 3 rebuild of the whole model)"
JUDGE = "the model built from the source .h5's own model_config and every array of its model_weights (CuDNN layers " \
        "by Keras 2's own weight rule)"
# Keras 2 activation names whose Keras 3 function is the same (hard_sigmoid and gelu are not: 0.2x + 0.5 against
# relu6(x + 3) / 6, exact against tanh-approximated)
ACTIVATIONS = ("linear", "relu", "tanh", "sigmoid", "softmax", "elu", "selu", "softplus", "softsign", "exponential",
               "swish")
CODE = ("Lambda", "TFOpLambda", "SlicingOpLambda")  # layers that hold code: never run


class Unjudged(Exception):
    """The judge cannot be built from this file; the message says why (the row is then unjudged, not passed)."""


def _text(value: Any) -> str:
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
    "Flatten": lambda keras, cfg, name: (_channels_last(cfg, name), keras.layers.Flatten(name=name))[1],
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
    TABLE[_merge] = lambda keras, cfg, name, kind=_merge: getattr(keras.layers, kind)(name=name)
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


def file_arrays(f: Any) -> Tuple[Dict[str, List[Tuple[str, str, np.ndarray]]], List[str]]:
    """({layer name: [(its dataset's path, weight name, array)] in the order ``weight_names`` lists them}, the path
    of every dataset under ``model_weights``) of an open Keras 2 ``.h5``."""
    # lazy: h5py, loaded on first use (import cudnn_port stays light)
    import h5py

    root = f["model_weights"] if "model_weights" in f else f
    every: List[str] = []
    root.visititems(lambda path, item: every.append(path) if isinstance(item, h5py.Dataset) else None)
    owned = {}
    for layer in root:
        group = root[layer]
        if not isinstance(group, h5py.Group):
            continue
        names = [_text(n) for n in group.attrs.get("weight_names", [])]
        owned[layer] = [(f"{layer}/{n}", n, np.asarray(group[n][()])) for n in names if n in group]
    return owned, every


def _key(weight_name: str) -> Tuple[str, str]:
    """(direction: forward / backward / "", variable) of a Keras 2 weight name (``bi/forward_cu_dnnlstm/kernel:0``)."""
    parts = weight_name.split("/")
    owners = [p for p in parts[:-1] if p.startswith(("forward_", "backward_"))]
    return (owners[-1].split("_", 1)[0] if owners else ""), parts[-1].split(":")[0]


def _cudnn_classes(config: Any) -> Dict[str, str]:
    """{layer name (a wrapper's, for the layer it wraps): CuDNNLSTM / CuDNNGRU} of a config."""
    found = {}

    def walk(node, outer=None):
        if isinstance(node, dict):
            cfg = node.get("config")
            if node.get("class_name") in ("CuDNNLSTM", "CuDNNGRU") and isinstance(cfg, dict):
                found[outer or cfg.get("name")] = node["class_name"]
            if isinstance(cfg, dict):
                walk(cfg.get("layer"), outer or cfg.get("name"))
                for child in cfg.get("layers") or []:
                    walk(child)
    walk(config)
    return found


def load_weights(model: "keras.Model", config: Dict[str, Any], owned: Dict[str, List[Tuple[str, str, np.ndarray]]],
                 every: List[str]) -> List[str]:
    """Give every variable of ``model`` (built by :func:`build_model`) its array from ``owned``
    (:func:`file_arrays`), matched by layer name, direction and variable name; a CuDNN layer's by Keras 2's rule.
    Returns the problems: arrays of the file no variable took, variables no array filled, shapes that differ."""
    cudnn, problems, used = _cudnn_classes(config), [], set()
    for layer in model.layers:
        if not layer.weights:
            continue
        inner = layer
        while type(inner).__name__ == "TimeDistributed":
            inner = inner.layer
        halves = [("forward", inner.forward_layer), ("backward", inner.backward_layer)] \
            if hasattr(inner, "forward_layer") else [("", inner)]
        arrays: Dict[Tuple[str, str], Tuple[str, np.ndarray]] = {}
        for path, wname, array in owned.get(layer.name, []):
            key = _key(wname) if len(halves) == 2 else ("", _key(wname)[1])  # a plain layer named forward_...
            if key in arrays:
                problems.append(f"layer {layer.name}: two arrays for {'/'.join(filter(None, key))}")
            arrays[key] = (path, array)
        for direction, half in halves:
            wanted = {v.name.split(":")[0]: v for v in half.weights}
            kind = cudnn.get(layer.name)
            if kind is not None:  # Keras 2's rule: three arrays become LSTM / GRU(reset_after=True) weights
                trio = [arrays.get((direction, v)) for v in ("kernel", "recurrent_kernel", "bias")]
                if any(t is None for t in trio):
                    problems.append(f"layer {layer.name}: the file holds no {direction or 'CuDNN'} "
                                    "kernel, recurrent_kernel and bias")
                    continue
                try:
                    converted = keras2_rule("LSTM" if kind == "CuDNNLSTM" else "GRU", *(t[1] for t in trio))
                except ValueError as e:
                    problems.append(f"layer {layer.name}: {e}")
                    continue
                values = dict(zip(("kernel", "recurrent_kernel", "bias"), converted))
                paths = {v: t[0] for v, t in zip(("kernel", "recurrent_kernel", "bias"), trio)}
            else:
                values = {v: arrays[(direction, v)][1] for v in wanted if (direction, v) in arrays}
                paths = {v: arrays[(direction, v)][0] for v in values}
            for var_name, variable in wanted.items():
                if var_name not in values:
                    problems.append(f"layer {layer.name}: the file holds no {direction + ' ' if direction else ''}"
                                    f"{var_name}")
                    continue
                value = values[var_name]
                if tuple(value.shape) != tuple(variable.shape):
                    problems.append(f"layer {layer.name}: {var_name} is {list(value.shape)} in the file, the layer "
                                    f"its config builds takes {list(variable.shape)}")
                    continue
                variable.assign(value.astype(variable.dtype))
                used.add(paths[var_name])
    unread = [p for p in every if p not in used]
    if unread:
        problems.append("arrays of the source no weight of the model its config builds took: " +
                        ", ".join(unread[:6]) + (f" and {len(unread) - 6} more" if len(unread) > 6 else ""))
    return problems


def judge_from_file(source: str) -> "keras.Model":
    """The judging model of Keras 2 ``.h5`` ``source``: built from its ``model_config`` (:func:`build_model`), every
    weight from its ``model_weights`` (:func:`load_weights`). Raises :class:`Unjudged` where the file's model is not
    one the judge builds, :class:`~cudnn_port.errors.CudnnPortError` where its arrays do not fit it."""
    # lazy: h5py, loaded on first use (import cudnn_port stays light)
    import h5py

    with h5py.File(source, "r") as f:
        stored = check_h5(f, source)
        raw = f.attrs.get("model_config")
        if raw is None:
            raise Unjudged("the source .h5 holds no model_config")
        try:
            config = json.loads(_text(raw))
        except (ValueError, RecursionError):
            raise Unjudged("the source's model_config is not JSON") from None
        check_config_sizes(config, stored, source, "the file")
        owned, every = file_arrays(f)
    model = build_model(config)
    problems = load_weights(model, config, owned, every)
    if problems:
        raise CudnnPortError("; ".join(problems))
    return model


def rebuilt_model_row(manifest: "Manifest", out: str, source_unchanged: bool, seed: int, atol: float,
                      rtol: float) -> Dict[str, Any]:
    """The verify row of ``OUT/keras/model.keras`` for a Keras 2 ``.h5`` source: its outputs against
    :func:`judge_from_file`'s on the judge's own inputs (seeded, padded as its masks define: a row of only padding
    where the judge runs one to finite outputs). Unjudged when the source is gone or changed, or its model is not
    one the judge builds (the note says why)."""
    source = manifest["source"].get("checkpoint", "")
    unjudged = {"artifact": LABEL, "passed": None, "max_abs": None, "max_rel": None, "unjudged": True}
    if not source_unchanged or not os.path.isfile(source):
        return dict(unjudged, note="not judged: the source .h5 is gone or changed, and this row's judge reads it")
    try:
        judge = judge_from_file(source)
    except Unjudged as e:
        return dict(unjudged, note=f"not judged: {e}")
    except CudnnPortError as e:  # arrays that do not fit the config, a refused file: the row fails, saying which
        return {"artifact": LABEL, "passed": False, "max_abs": None, "max_rel": None, "note": f"no judge: {e}"}
    except Exception as e:  # noqa: BLE001 (Keras refusing a size of the config, say)
        return failed_row(LABEL, e)
    try:
        rebuilt = load_model_file(os.path.join(out, manifest.model_artifacts["keras"]))
        names = [t.name.split(":")[0] for t in judge.inputs]
        tf = import_tf()
        specs = [tf.TensorSpec(t.shape, t.dtype) for t in judge.inputs]
        for empty_row in (True, False):
            feeds = model_feeds(judge, names, specs, seed, empty_row)
            values = [feeds[n] for n in names]
            x = values if len(values) > 1 else values[0]
            try:
                want = model_outputs(judge(x, training=False))
            except Exception:  # noqa: BLE001 (without that row, a judge that raises is the row's failure)
                if not empty_row:
                    raise
                continue
            if not empty_row or all(np.all(np.isfinite(w)) for w in want):
                break
        got = model_outputs(rebuilt(x, training=False))
    except Exception as e:  # noqa: BLE001 (a model that does not load or run is a failed check)
        return failed_row(LABEL, e)
    if len(got) != len(want):
        return dict(failed_row(LABEL, ValueError(f"{len(got)} outputs, the judge has {len(want)}")))
    return compare(LABEL, got, want, atol, rtol, note="against the model built from the source .h5's own config and "
                                                      "every array it stores")
