"""Each recurrent module of a PyTorch file as one cuDNN stack: its tensors grouped by module path
(:func:`group_params`), its spec read off their shapes and the module's attributes and checked against both
(:func:`module_spec`), and its canonical model (:func:`canonical`), in the layout :mod:`.pytorch` states."""
import re
from typing import Any, Dict, Optional, Tuple

import numpy as np

from ..canonical import CanonicalRNN, LayerParams
from ..errors import CudnnPortError
from ..layout import RNNSpec
from .torch_state import PARAM

GATES = {4: "lstm", 3: "gru", 1: "rnn"}
CLASSES = {"lstm": "nn.LSTM", "gru": "nn.GRU", "rnn_tanh": "nn.RNN", "rnn_relu": "nn.RNN", "rnn": "nn.RNN"}
_CELL = re.compile(r"^(?:(.*)\.)?(weight_ih|weight_hh)$")


Params = Dict[Tuple[str, int, int], np.ndarray]  # one module's tensors: {(kind, layer, direction): array}


def group_params(tensors: Dict[str, np.ndarray]) -> Tuple[Dict[str, Params], Dict[str, bool], Dict[str, np.ndarray]]:
    """({module path: {(kind, layer, direction): array}}, {module path of a cell}, {other name: array})."""
    grouped: Dict[str, Params] = {}
    cells: Dict[str, bool] = {}
    others: Dict[str, np.ndarray] = {}
    raw = {k: v for k, v in tensors.items() if k.endswith("_raw") and PARAM.match(k)}
    for key, value in tensors.items():
        m = PARAM.match(key)
        if m and not key.endswith("_raw"):
            module, kind, layer, reverse = m.group(1) or "", m.group(2), int(m.group(3)), bool(m.group(4))
            grouped.setdefault(module, {})[kind, layer, int(reverse)] = value
        elif m:
            continue
        elif (cell := _CELL.match(key)) and (key.rsplit(".", 1)[0] + ".bias_ih" in tensors or
                                             key.rsplit(".", 1)[0] + ".weight_hh" in tensors):
            cells[cell.group(1) or ""] = True
        else:
            others[key] = value
    for key, value in raw.items():  # AWD-LSTM's weight drop: the _raw tensor is the trained weight
        m = PARAM.match(key)
        assert m is not None  # raw holds only the keys PARAM matches
        module, kind, layer, direction = m.group(1) or "", m.group(2), int(m.group(3)), int(bool(m.group(4)))
        for owner in (f"{module}.module" if module else "module", module):
            if owner in grouped:
                grouped[owner][kind, layer, direction] = value
                break
        else:
            grouped.setdefault(module, {})[kind, layer, direction] = value
    return grouped, cells, others


def module_spec(path: str, module: str, params: Params, attrs: Dict[str, Any],
                mode_flag: Optional[str]) -> Tuple[Optional[RNNSpec], Dict[str, Any]]:
    """The spec of ``module`` (its path in the file at ``path``) and the facts inspect shows of it, read off the shapes
    of ``params`` and the module's ``attrs``, each checked against the other (a damaged or edited file is refused);
    None for an ``nn.RNN`` whose file does not say tanh or relu and ``mode_flag`` (``--mode``) does not either."""
    where = f"{path}: {module or '(top level)'}"
    hh = params.get(("weight_hh", 0, 0))
    ih = params.get(("weight_ih", 0, 0))
    if hh is None or ih is None or hh.ndim != 2 or ih.ndim != 2:
        raise CudnnPortError(f"{where} lacks weight_ih_l0 / weight_hh_l0 as matrices; the file is damaged or edited")
    present = {k for _, k, _ in params}
    layers = 1 + max(present)
    if len(present) != layers:  # a layer index past the ones stored (weight_ih_l999999): name the first gap
        gap = next(k for k in range(layers) if k not in present)
        raise CudnnPortError(f"{where} holds layer {layers - 1} but no tensor of layer {gap}; the file is damaged or "
                             "edited")
    dirs = 1 + max(d for _, _, d in params)
    hr = params.get(("weight_hr", 0, 0))
    H = hr.shape[1] if hr is not None else hh.shape[1]
    proj = hr.shape[0] if hr is not None else 0
    gates = hh.shape[0] // H if H and hh.shape[0] % H == 0 else 0
    if gates not in GATES:
        raise CudnnPortError(f"{where}: weight_hh_l0 {list(hh.shape)} fits no LSTM / GRU / RNN of hidden size {H}; "
                             "the file is damaged or edited")
    bias = ("bias_ih", 0, 0) in params
    facts: Dict[str, Any] = {"module": module,
                             "from": {"mode, sizes, layers, directions, bias": "the tensors' shapes"}}
    mode = GATES[gates]
    stated = str(attrs.get("mode", "")).lower() or None
    if mode == "rnn":
        nonlinearity = attrs.get("nonlinearity") or (stated[4:] if stated and stated.startswith("rnn_") else None)
        if nonlinearity:
            mode = f"rnn_{nonlinearity}"
            facts["from"]["nonlinearity"] = "the module's attributes"
        elif mode_flag in ("rnn_tanh", "rnn_relu"):
            mode = mode_flag
            facts["from"]["nonlinearity"] = "--mode"
        else:
            facts.update(mode="rnn (tanh or relu: pass --mode)", **{"class": "nn.RNN"})
            return None, facts
    elif stated and stated != mode:
        raise CudnnPortError(f"{where}: the module says mode {stated.upper()} but its tensors are a {mode.upper()}'s; "
                             "the file is damaged or edited")
    if mode_flag is not None and mode_flag != mode and not (mode_flag.startswith("rnn_") and gates != 1):
        # --mode rnn_tanh / rnn_relu settles the nn.RNN modules; beside them an LSTM or GRU stays as its file says
        raise CudnnPortError(f"{where}: --mode {mode_flag} contradicts the file, which holds an {CLASSES[mode]} "
                             f"({mode}); leave --mode out")
    spec = RNNSpec(mode=mode, num_layers=layers, num_units=H, input_size=int(ih.shape[1]), bidirectional=dirs == 2,
                   num_proj=proj)
    for key, said in (("hidden_size", H), ("num_layers", layers), ("bidirectional", dirs == 2),
                      ("proj_size", proj), ("input_size", int(ih.shape[1])), ("bias", bias)):
        if key in attrs and attrs[key] is not None and attrs[key] != said:
            raise CudnnPortError(f"{where}: the module says {key}={attrs[key]!r} but its tensors say {said!r}; the "
                                 "file is damaged or edited")
    expected = _expected(spec, bias)
    missing = [k for k in expected if k not in params]
    if missing:
        kind, k, d = missing[0]
        raise CudnnPortError(f"{where} lacks {kind}_l{k}{'_reverse' if d else ''} ({len(missing)} tensors missing) "
                             f"for a {spec.describe()}; the file is damaged or edited")
    extra = [k for k in params if k not in expected]
    if extra:
        kind, k, d = extra[0]
        raise CudnnPortError(f"{where} holds {kind}_l{k}{'_reverse' if d else ''}, which a {spec.describe()} has "
                             "not; the file is damaged or edited")
    for (kind, k, d), value in params.items():
        want = _shape(spec, kind, k)
        if tuple(value.shape) != want:
            raise CudnnPortError(f"{where}: {kind}_l{k}{'_reverse' if d else ''} has shape {list(value.shape)}, a "
                                 f"{spec.describe()} needs {list(want)}; the file is damaged or edited")
    facts.update({"class": CLASSES[mode], "bias": bias, "batch_first": attrs.get("batch_first")})
    if attrs:
        facts["from"]["batch_first"] = "the module's attributes" if "batch_first" in attrs else "not in the file"
    if not bias:
        facts["note"] = "bias=False: biases are zero"
    return spec, facts


def _expected(spec, bias):
    kinds = ["weight_ih", "weight_hh"] + (["bias_ih", "bias_hh"] if bias else []) + \
        (["weight_hr"] if spec.num_proj else [])
    return [(kind, k, d) for k in range(spec.num_layers) for d in range(spec.num_dirs) for kind in kinds]


def _shape(spec, kind, k):
    G, H, S = spec.num_gates, spec.num_units, spec.state_size
    return {"weight_ih": (G * H, spec.layer_input_size(k)), "weight_hh": (G * H, S), "bias_ih": (G * H,),
            "bias_hh": (G * H,), "weight_hr": (spec.num_proj or 0, H)}[kind]


def params_dtype(params: Params) -> str:
    """The buffer's dtype: the tensors' own where they share one of float64 / float32 / float16."""
    names = {v.dtype.name for v in params.values()}
    for name in ("float64", "float32", "float16"):
        if names == {name}:
            return name
    return "float32"  # bfloat16 or mixed: the buffer is float32, exact for both


def canonical(spec: RNNSpec, params: Params) -> CanonicalRNN:
    """The canonical model of one module: PyTorch's blocks are cuDNN's, in cuDNN's gate order (biases absent with
    ``bias=False`` are zero)."""
    G, H = spec.num_gates, spec.num_units
    layers = []
    for k in range(spec.num_layers):
        for d in range(spec.num_dirs):
            def get(kind):
                value = params.get((kind, k, d))
                return None if value is None else np.asarray(value, np.float64 if value.dtype == np.float64
                                                              else np.float32)
            W, R = get("weight_ih"), get("weight_hh")
            b_W = get("bias_ih") if get("bias_ih") is not None else np.zeros(G * H, W.dtype)
            b_R = get("bias_hh") if get("bias_hh") is not None else np.zeros(G * H, W.dtype)
            layers.append(LayerParams(W=W.reshape(G, H, -1), R=R.reshape(G, H, -1), b_W=b_W.reshape(G, H),
                                      b_R=b_R.reshape(G, H), P=get("weight_hr") if spec.num_proj else None))
    return CanonicalRNN(spec, layers)
