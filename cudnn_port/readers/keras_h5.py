"""Keras 2 ``CuDNNLSTM`` / ``CuDNNGRU`` layers in ``.h5`` files (``model.save`` or ``save_weights`` of tf.keras,
tf_keras or Keras 2), read as cuDNN stacks.

Each such layer (each direction of a ``Bidirectional`` wrapper) stores three arrays, gate blocks along the last
axis (LSTM i, f, c, o; GRU z, r, h)::

    kernel [I, G*H]    recurrent_kernel [H, G*H]    bias [2*G*H] = [b_W blocks, b_R blocks]

Keras 2 handed each block to cuDNN by its C-order bytes, with no transpose: ``W_g`` is
``kernel[:, g*H:(g+1)*H]`` reshaped (not transposed) to ``[H, I]``, and ``R_g`` likewise to ``[H, H]``
(docs/conventions.md, section 3; tf_keras's own loader undoes it with ``k.T.reshape(k.shape, order="F")``). A layer
is recognised by
those shapes (a bias of 2*G*H is unique to the cuDNN layers), and the model config, when the file has one, must
agree. Each layer becomes one stack named ``{layer}/opaque_kernel``, its canonical model packed into a cuDNN
buffer; every other weight is carried over as ``{weight name}`` without ``:0``.
"""
import json
import os
from typing import Any, Dict, List, Sequence, Tuple, Union

import numpy as np

from ..canonical import CanonicalRNN, LayerParams
from ..errors import CudnnPortError, reason
from ..gates import CUDNN_ORDER, KERAS_GRU, KERAS_LSTM, reorder
from ..layout import FLOAT_DTYPES, RNNSpec, pack
from ..paths import require_file
from ..source import Source, SourceType, buffer_name
from .config_sizes import check_config_sizes
from .h5_guard import check_h5

HDF5_SIGNATURE = b"\x89HDF\r\n\x1a\n"
CUDNN_CLASSES = {"CuDNNLSTM": "lstm", "CuDNNGRU": "gru"}
KERAS2_ORDER = {"lstm": KERAS_LSTM, "gru": KERAS_GRU}


def is_hdf5(path: str) -> bool:
    try:
        with open(path, "rb") as f:
            return f.read(8) == HDF5_SIGNATURE
    except OSError:
        return False


def is_keras3_model_h5(path: str) -> bool:
    """Whether ``path`` is a whole model saved by Keras 3 in the legacy HDF5 format (``model.save("m.h5")``: a root
    ``model_config`` and ``keras_version`` 3.x). Such a file is a Keras model like a ``.keras`` file and takes the
    same road; only the root attributes are read."""
    # lazy: h5py, loaded on first use (import cudnn_port stays light)
    import h5py

    try:
        with h5py.File(path, "r") as f:
            version = h5_text(f.attrs.get("keras_version", ""))
            return "model_config" in f.attrs and version.split(".")[0] == "3"
    except (OSError, KeyError, ValueError, RuntimeError, TypeError):
        return False


def h5_text(value: Union[str, bytes]) -> str:
    """An HDF5 attribute value (bytes or str) as str."""
    return value.decode("utf8") if isinstance(value, bytes) else str(value)


def layer_classes(config: Dict[str, Any]) -> Dict[str, str]:
    """{layer name: class name} from a Keras 2 model config; a Bidirectional wrapper reports its inner layer."""
    found = {}

    def visit(layer):
        if not isinstance(layer, dict):
            return
        cfg = layer.get("config", {})
        if isinstance(cfg, dict) and "name" in cfg:
            inner = cfg.get("layer")
            found[cfg["name"]] = inner.get("class_name") if isinstance(inner, dict) else layer.get("class_name")
        for child in (cfg.get("layers") or []) if isinstance(cfg, dict) else []:
            visit(child)

    visit(config)
    return found


def keras2_to_canonical(mode: str,
                        directions: Sequence[Tuple[np.ndarray, np.ndarray, np.ndarray]]) -> List[LayerParams]:
    """LayerParams per direction from Keras 2 cuDNN arrays ``[(kernel, recurrent_kernel, bias), ...]``."""
    params = []
    for kernel, recurrent, bias in directions:
        G, H = (4 if mode == "lstm" else 3), recurrent.shape[0]
        width = kernel.shape[0]
        W = np.stack([np.ascontiguousarray(kernel[:, g * H:(g + 1) * H]).reshape(H, width) for g in range(G)])
        R = np.stack([np.ascontiguousarray(recurrent[:, g * H:(g + 1) * H]).reshape(H, H) for g in range(G)])
        b = bias.reshape(2, G, H)
        src, dst = KERAS2_ORDER[mode], CUDNN_ORDER[mode]
        params.append(LayerParams(W=reorder(W, src, dst), R=reorder(R, src, dst), b_W=reorder(b[0], src, dst),
                                  b_R=reorder(b[1], src, dst)))
    return params


class KerasH5(Source):
    """A Keras 2 ``.h5`` model or weights file as a :class:`~cudnn_port.source.Source`; ``specs`` holds the exact
    spec of each stack, read off its shapes; ``canonical`` its canonical model."""

    default_style = "keras"
    MAX_BYTES = 1 << 34  # 16 GiB: a dataset declaring more is a damaged file, not a model

    def __init__(self, path):
        # lazy: h5py, loaded on first use (import cudnn_port stays light)
        import h5py

        self.prefix = os.path.abspath(require_file(os.fspath(path), "Keras .h5 file"))
        try:
            with h5py.File(self.prefix, "r") as f:
                self._read(f)
        except (OSError, KeyError, ValueError, RuntimeError, TypeError, MemoryError) as e:
            raise CudnnPortError(f"cannot read {self.prefix} ({reason(e)}); is it a complete, undamaged Keras .h5 "
                                 "file?") from None

    def _read(self, f):
        stored = check_h5(f, self.prefix)
        _touch_everything(f)
        root = f["model_weights"] if "model_weights" in f else f
        if "layer_names" not in root.attrs:
            raise CudnnPortError(f"{self.prefix} is an HDF5 file but not a Keras model or weights file (no "
                                 "layer_names attribute); pass a file written by Keras model.save or save_weights")
        config = f.attrs.get("model_config")
        self.model_config = json.loads(h5_text(config)) if config is not None else None
        if self.model_config is not None:  # the Keras 3 rebuild (keras/model.keras) builds it from its config
            check_config_sizes(self.model_config, stored, self.prefix, "the file")
        classes = layer_classes(self.model_config) if self.model_config else {}
        self.format = f"Keras 2 HDF5 ({'full model' if self.model_config else 'weights only'}, " \
                      f"keras {h5_text(root.attrs.get('keras_version', '?'))})"
        self.layers, self.canonical, self._arrays, self.shapes, self.dtypes = [], {}, {}, {}, {}
        for layer in (h5_text(n) for n in root.attrs["layer_names"]):
            group = root[layer]
            names = [h5_text(n) for n in group.attrs.get("weight_names", [])]
            for n in names:
                if group[n].size * group[n].dtype.itemsize > self.MAX_BYTES:
                    raise CudnnPortError(f"{self.prefix}: weight {n} declares {group[n].size} elements, more than "
                                         "any model holds; the file is damaged")
            arrays = {n: np.asarray(group[n]) for n in names}
            self.layers.append(layer)
            if self._cudnn_layer(layer, arrays, classes.get(layer)) is None:  # not a stack: carried over
                for name, value in arrays.items():
                    self._add(name[:-2] if name.endswith(":0") else name, value)

    def _add(self, name, value):
        self._arrays[name] = value
        self.shapes[name], self.dtypes[name] = tuple(value.shape), value.dtype.name

    def _cudnn_layer(self, layer, arrays, class_name):
        """Add ``layer`` as a stack if its weights are a Keras 2 cuDNN layer's; return the stack's name or None."""
        owners = {}
        for name, value in arrays.items():
            owner, _, var = name.rpartition("/")
            owners.setdefault(owner, {})[var.split(":")[0]] = value
        directions, mode = [], None
        for owner in sorted(owners, key=lambda o: o.rsplit("/", 1)[-1].startswith("backward_")):
            w = owners[owner]
            fit = _cudnn_mode(w)
            if fit is None:
                directions = None
                break
            mode = mode or fit
            directions.append((w["kernel"], w["recurrent_kernel"], w["bias"]))
        expected = CUDNN_CLASSES.get(class_name)
        if not directions:
            if expected:
                raise CudnnPortError(f"layer {layer} of {self.prefix} is a {class_name}, but its weights "
                                     f"({', '.join(f'{k} {list(v.shape)}' for k, v in arrays.items())}) are not a "
                                     "cuDNN layer's; the file is damaged or was edited")
            return None
        if expected and expected != mode or len(directions) > 2:
            raise CudnnPortError(f"layer {layer} of {self.prefix}: config says {class_name} but its weights are a "
                                 f"{len(directions)}-direction {mode.upper()}; the file is damaged or was edited")
        kernel, recurrent, _ = directions[0]
        dtype = kernel.dtype.name
        if dtype not in FLOAT_DTYPES:
            raise CudnnPortError(f"layer {layer} of {self.prefix} has dtype {dtype}; expected one of "
                                 f"{', '.join(FLOAT_DTYPES)}")
        spec = RNNSpec(mode, 1, recurrent.shape[0], kernel.shape[0], bidirectional=len(directions) == 2, dtype=dtype)
        name = buffer_name(layer)
        self.canonical[name] = CanonicalRNN(spec, keras2_to_canonical(mode, directions))
        self.specs[name] = spec
        self.shapes[name], self.dtypes[name] = (spec.param_count,), dtype
        return name

    def get(self, name: str) -> np.ndarray:
        if name in self.canonical:
            return pack(self.canonical[name])
        if name not in self._arrays:
            raise CudnnPortError(f"unknown variable {name} in {self.prefix}; run cudnn-port inspect to list them")
        return self._arrays[name]

    def files(self) -> List[str]:
        return [self.prefix]

    names_note = ("Keras weight names without ':0'; each CuDNN layer is the stack {layer}/opaque_kernel; optimizer "
                  "weights are not carried over")

    def nothing_found(self) -> str:
        return (f"{self.prefix} holds no CuDNNLSTM/CuDNNGRU layer (its layers: {', '.join(self.layers) or 'none'}); "
                "it is a Keras model of another kind, so there is nothing to convert")

    def describe(self, name: str) -> str:
        """How stack ``name`` was found, for inspect and the manifest."""
        layer = name.rsplit("/", 1)[0]
        spec = self.canonical[name].spec
        kind = f"{'Bidirectional(' if spec.bidirectional else ''}CuDNN{spec.mode.upper()}" \
               f"{')' if spec.bidirectional else ''}"
        return f"Keras 2 layer {layer}: {kind}, spec exact from its weight shapes"


def _touch_everything(f):
    """Read every attribute and every dataset's header of ``f``, so that a damaged part of the file fails here, in
    the reader, and not later in Keras or h5py calls that do not say the file is at fault."""
    def visit(_, obj):
        for key in obj.attrs:
            obj.attrs[key]
        if hasattr(obj, "shape"):
            obj.shape, obj.dtype

    for key in f.attrs:
        f.attrs[key]
    f.visititems(visit)


def _cudnn_mode(weights):
    """'lstm' or 'gru' if ``weights`` (kernel, recurrent_kernel, bias) have a Keras 2 cuDNN layer's shapes."""
    if set(weights) != {"kernel", "recurrent_kernel", "bias"}:
        return None
    k, r, b = (weights[n].shape for n in ("kernel", "recurrent_kernel", "bias"))
    if len(k) != 2 or len(r) != 2 or len(b) != 1:
        return None
    H = r[0]
    for G, mode in ((4, "lstm"), (3, "gru")):
        if H and r[1] == G * H and k[1] == G * H and b[0] == 2 * G * H:
            return mode
    return None


SOURCE = SourceType("keras_h5", "Keras 2 .h5 file", "stack", lambda path: os.path.isfile(path) and is_hdf5(path),
                    lambda path, mode: KerasH5(path), spec_flags=True, order=30,
                    judge="cudnn_port.judging.keras_weights:judge_stack")
