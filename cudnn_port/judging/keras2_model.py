"""The judge of the whole model a Keras 2 ``.h5`` is rebuilt into (``OUT/keras/model.keras``): the model built again
from the source file's own ``model_config`` and every array of its ``model_weights``, by this module and
:mod:`.keras2_config` alone.

- The config is read with h5py as JSON data (never ``keras.models.load_model`` on the user's file, never its
  ``from_config``) and translated into stock Keras 3 layers by :data:`.keras2_config.TABLE`, keyword by keyword:
  ``CuDNNLSTM`` -> ``LSTM(activation="tanh", recurrent_activation="sigmoid")``, ``CuDNNGRU`` -> ``GRU(reset_after=True,
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
from typing import TYPE_CHECKING, Any, Dict, List, Tuple

import numpy as np

from ..deps import import_tf
from ..errors import CudnnPortError
from ..readers.config_sizes import check_config_sizes
from ..readers.h5_guard import check_h5
from ..readers.keras_model import load_model_file
from .keras2_config import Unjudged, as_text, build_model
from .keras_weights import keras2_rule
from .parity import compare, failed_row, model_feeds
from .stock import model_outputs

if TYPE_CHECKING:
    import keras

    from ..manifest import Manifest

LABEL = "keras/model.keras (Keras 3 rebuild of the whole model)"
JUDGE = "the model built from the source .h5's own model_config and every array of its model_weights (CuDNN layers " \
        "by Keras 2's own weight rule)"


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
        names = [as_text(n) for n in group.attrs.get("weight_names", [])]
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
                trio = [t for t in (arrays.get((direction, v)) for v in ("kernel", "recurrent_kernel", "bias"))
                        if t is not None]
                if len(trio) != 3:
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
            config = json.loads(as_text(raw))
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
    source = manifest.source.checkpoint
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
