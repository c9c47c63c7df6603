"""PyTorch files holding ``nn.LSTM`` / ``nn.GRU`` / ``nn.RNN`` modules, read as cuDNN stacks (no torch needed).

PyTorch runs these modules on cuDNN, and its parameters are cuDNN's blocks in cuDNN's gate order (LSTM i, f, g, o;
GRU r, z, n, reset-after), biases apart (torch/nn/modules/rnn.py)::

    weight_ih_l{k}[_reverse] [G*H, I_k]   weight_hh_l{k}[_reverse] [G*H, S]   (S = H, or P with proj_size)
    bias_ih_l{k}[_reverse]   [G*H]        bias_hh_l{k}[_reverse]   [G*H]      (absent with bias=False: zero)
    weight_hr_l{k}[_reverse] [P, H]                                           (nn.LSTM(proj_size=P))

Every file kind of :mod:`.torch_files` is read as data; the state_dict is found inside checkpoint dicts (the
Lightning ``state_dict``, ``model_state_dict``, ...), pickled modules and TorchScript modules; the prefixes
``module.`` (DataParallel / DDP) and ``_orig_mod.`` (torch.compile) are dropped; AWD-LSTM's ``weight_hh_l0_raw`` is
the weight. Each module becomes one stack ``{module path}/opaque_kernel`` (``lstm``, ``rnn.0``, ``encoder.lstm``)
whose spec is read off the tensors' shapes and, where the file holds them, the module's own attributes
(``batch_first``, ``nonlinearity``, ``proj_size``); what neither tells (``nn.RNN``'s tanh or relu in a bare
state_dict) comes from ``--mode``. Every other floating tensor is carried over under its name; optimizer states are
not read. Tensors saved from a GPU are views of one cuDNN weight buffer: offsets and strides are honoured.
"""
import ast
import os
import re
import zipfile
from typing import Any, Dict, List, Optional, Tuple

import numpy as np

from ..canonical import CanonicalRNN, LayerParams
from ..errors import CudnnPortError
from ..layout import RNNSpec, pack
from ..paths import require_file
from ..source import Source, SourceType, buffer_name
from .torch_files import read_torch_file, sniff
from .torch_pickle import Inert, Quantized

GATES = {4: "lstm", 3: "gru", 1: "rnn"}
CLASSES = {"lstm": "nn.LSTM", "gru": "nn.GRU", "rnn_tanh": "nn.RNN", "rnn_relu": "nn.RNN", "rnn": "nn.RNN"}
_PARAM = re.compile(r"^(?:(.*)\.)?(weight_ih|weight_hh|bias_ih|bias_hh|weight_hr)_l(0|[1-9]\d{0,5})(_reverse)?(_raw)?$")
_CELL = re.compile(r"^(?:(.*)\.)?(weight_ih|weight_hh)$")
DROPPED_PREFIXES = ("module.", "_orig_mod.")
STATE_KEYS = ("state_dict", "model_state_dict", "model_state", "model", "net", "network", "module",
              "state_dict_ema", "model_ema", "weights", "params")
NOT_WEIGHTS = ("optimizer", "optimizer_state_dict", "optimizer_states", "optim", "lr_schedulers", "scheduler",
               "callbacks", "loops", "amp", "scaler", "grad_scaler")
MODULE_ATTRS = ("mode", "input_size", "hidden_size", "num_layers", "bias", "batch_first", "bidirectional",
                "proj_size", "nonlinearity", "dropout")


def is_pytorch_file(path: str) -> bool:
    """Whether ``path`` is a file PyTorch wrote (by its content, whatever its extension)."""
    return os.path.isfile(path) and sniff(path) is not None


class PyTorchSource(Source):
    """A PyTorch file as a :class:`~cudnn_port.source.Source`: one synthesised buffer per recurrent module (see the
    module docstring); ``modules`` holds, per stack, the module's facts and where each came from."""

    default_style = "pytorch"
    names_note = "PyTorch module paths kept as they are; each recurrent module one stack"
    consumes_mode = True  # --mode is applied here (to the modules whose file leaves it open), not to every stack

    def __init__(self, path: str, mode: Optional[str] = None):
        self.prefix = os.path.abspath(require_file(os.fspath(path), "PyTorch file"))
        f = read_torch_file(self.prefix)
        self.format = f"PyTorch {f.kind}"
        tensors, attrs, where = _flatten(f.root, self.prefix)
        if f.kind.startswith("TorchScript"):
            _script_constants(self.prefix, f.root, attrs)
        for node in f.nodes:  # a .pt2's recurrent nodes: their arguments are the modules' settings
            path_of = node["params"][0].rsplit(".", 1)[0] if node["params"] and "." in node["params"][0] else ""
            args = node["args"]
            attrs.setdefault(path_of, {}).update(
                mode=node["target"].upper(), num_layers=args.get("num_layers"), bias=args.get("has_biases"),
                bidirectional=args.get("bidirectional"), batch_first=args.get("batch_first"), **{"class": "aten op"})
        self.shapes, self.dtypes, self._arrays, self.modules, self._canon = {}, {}, {}, {}, {}
        grouped, cells, others = _group(tensors)
        if cells:
            name = next(iter(cells))
            raise CudnnPortError(f"{self.prefix}: {name or '(top level)'} holds weight_ih / weight_hh without a layer "
                                 "index: an nn.LSTMCell / nn.GRUCell stepped by a loop of the model's own, not a "
                                 "cuDNN stack; it has no fused form to convert")
        for module, params in grouped.items():
            spec, facts = _spec(self.prefix, module, params, attrs.get(module, {}), mode)
            variable = buffer_name(module)
            facts["file_keys"] = where.get(module, module)
            self.modules[variable] = facts
            if spec is None:  # nn.RNN, tanh or relu: listed (both have one buffer, the same bytes) and refused by
                # convert until --mode says which; verify reads its buffer whatever the mode
                packed = _spec(self.prefix, module, params, attrs.get(module, {}), "rnn_tanh")[0]
                self._canon[variable] = _canonical(packed, params)
                self._add(variable, None, (packed.param_count,), _dtype(params))
                continue
            canon = _canonical(spec, params)
            self._canon[variable] = canon
            dtype = _dtype(params)
            self.specs[variable] = spec
            self._add(variable, None, (spec.param_count,), dtype)
        for name, value in others.items():
            if value.dtype.kind in "fiub" and value.dtype.name != "bfloat16":
                self._add(name, value, value.shape, value.dtype.name)
            elif value.dtype.name == "bfloat16":
                self._add(name, value.astype(np.float32), value.shape, "float32")

    def _add(self, name, value, shape, dtype):
        self._arrays[name] = value
        self.shapes[name], self.dtypes[name] = tuple(shape), dtype

    def undecided(self) -> List[str]:
        """The modules whose mode the file does not tell (an ``nn.RNN`` state_dict: tanh or relu)."""
        return [v for v, facts in self.modules.items() if v not in self.specs]

    def undecided_problem(self, variable: str) -> Optional[str]:
        """Why ``variable``'s spec is not settled (the flag that settles it), or None."""
        if variable not in self.modules or variable in self.specs:
            return None
        module = self.modules[variable]["module"] or "(top level)"
        return f"{self.prefix}: {module} is an nn.RNN whose file does not say tanh or relu; pass --mode rnn_tanh " \
               "or --mode rnn_relu"

    def refuse_undecided(self) -> None:
        for variable in self.undecided():
            raise CudnnPortError(self.undecided_problem(variable))

    def get(self, name: str) -> np.ndarray:
        if name in self._canon:
            return pack(self._canon[name], self.dtypes[name])
        return self._arrays[name]

    def files(self) -> List[str]:
        return [self.prefix]

    def describe(self, name: str) -> str:
        facts = self.modules.get(name, {})
        return f"{facts.get('class', 'module')} '{facts.get('module', name)}' in a {self.format}: " + \
            "; ".join(f"{k} from {v}" for k, v in facts.get("from", {}).items())

    def layer_of(self, variable: str) -> Dict[str, Any]:
        """What inspect shows of a stack: the module's path, class and facts."""
        facts = self.modules.get(variable, {})
        return {"module": facts.get("module"), "type": facts.get("class"), "batch_first": facts.get("batch_first"),
                "facts_from": facts.get("from", {})}

    def nothing_found(self) -> str:
        return (f"no nn.LSTM / nn.GRU / nn.RNN in {self.prefix}: no tensor is named weight_ih_l0 (inspect lists "
                "the tensors)")


def _strip(key: str) -> str:
    changed = True
    while changed:
        changed = False
        for prefix in DROPPED_PREFIXES:
            if key.startswith(prefix):
                key, changed = key[len(prefix):], True
        key = key.replace("._orig_mod.", ".")  # torch.compile of a submodule
    return key


def _flatten(root: Any, path: str) -> Tuple[Dict[str, np.ndarray], Dict[str, dict], Dict[str, str]]:
    """({tensor name: array}, {module path: attributes of a pickled module}, {module path: its key prefix in the
    file}) of the weights ``root`` holds: the state_dict itself, the one inside a checkpoint dict, or a module tree."""
    tensors, attrs, raw, seen_at = {}, {}, {}, {}

    def module(obj: Inert, prefix: str):
        if id(obj) in seen_at:  # a module shared (tied weights) or holding itself: read at its first path only
            return
        seen_at[id(obj)] = prefix
        _module(obj, prefix)

    def _module(obj: Inert, prefix: str):
        state = obj.attrs
        info = {k: state[k] for k in MODULE_ATTRS if k in state and not isinstance(state[k], (np.ndarray, Inert))}
        info["class"] = obj.cls.name
        attrs[_strip(prefix)] = info
        params = state.get("_parameters") if isinstance(state.get("_parameters"), dict) else {}
        buffers = state.get("_buffers") if isinstance(state.get("_buffers"), dict) else {}
        for name, value in list(params.items()) + list(buffers.items()):
            if isinstance(value, np.ndarray):
                add(f"{prefix}.{name}" if prefix else name, value)
        children = state.get("_modules") if isinstance(state.get("_modules"), dict) else {}
        for name, value in state.items():  # TorchScript keeps parameters and submodules as attributes
            if isinstance(value, np.ndarray) and name not in params and not name.startswith("_"):
                add(f"{prefix}.{name}" if prefix else name, value)
            elif isinstance(value, Inert) and value.cls.module.startswith("__torch__") and name not in children:
                children = {**children, name: value}
        for name, child in children.items():
            if isinstance(child, Inert):
                module(child, f"{prefix}.{name}" if prefix else name)

    first = {}  # stripped name -> the key it was read from: two keys that read as one name are refused

    def add(key, value):
        if isinstance(value, Quantized):  # quantize_dynamic's nn.LSTM: no float weights, no cuDNN form
            module = key.split("._all_weight_values")[0].split("._packed_params")[0].rsplit(".", 1)[0]
            raise CudnnPortError(f"{path}: {_strip(module) or '(top level)'} is a quantized module ({key}), which has "
                                 "no cuDNN form; convert the float model before it was quantized")
        stripped = _strip(key)
        if stripped in first and first[stripped] != key:
            raise CudnnPortError(f"{path}: {first[stripped]} and {key} both read as {stripped} once the wrappers' "
                                 "prefixes (module., _orig_mod.) are read past; save the unwrapped model's state_dict")
        first[stripped] = key
        tensors[stripped] = value
        m = _PARAM.match(stripped)
        if m:
            raw.setdefault(m.group(1) or "", key.rsplit(".", 1)[0] if "." in key else "")

    containers = [k for k, v in root.items() if k in STATE_KEYS and isinstance(v, (dict, Inert))] \
        if isinstance(root, dict) else []

    walked = set()  # a pickle may share one dict or module many times (or hold itself): each is read once

    def walk(obj, prefix):
        if id(obj) in walked:
            return
        walked.add(id(obj))
        if isinstance(obj, Inert):
            module(obj, prefix)
        elif isinstance(obj, dict):
            arrays = {k: v for k, v in obj.items() if isinstance(k, str) and isinstance(v, np.ndarray)}
            for k, v in arrays.items():
                add(f"{prefix}.{k}" if prefix else k, v)
            for k, v in obj.items():
                packed = isinstance(v, Inert) and v.cls.qualname == "torch.ScriptObject"  # quantize_dynamic's
                if isinstance(k, str) and (isinstance(v, Quantized) or packed or
                                           (isinstance(v, tuple) and any(isinstance(t, Quantized) for t in v))):
                    add(f"{prefix}.{k}" if prefix else k, Quantized())
                    continue
                if isinstance(k, str) and isinstance(v, (dict, Inert)) and k not in NOT_WEIGHTS:
                    # the one state_dict of a checkpoint dict is the model's; beside another (an EMA copy) each
                    # keeps its key as a prefix
                    alone = obj is root and containers == [k]
                    walk(v, prefix if alone else (f"{prefix}.{k}" if prefix else k))

    walk(root, "")
    if not tensors:
        raise CudnnPortError(f"{path} holds no tensors (a PyTorch file of {type(root).__name__}); save the model with "
                             "torch.save(model.state_dict(), path)")
    return tensors, attrs, raw


def _script_constants(path: str, root: Any, attrs: Dict[str, dict]) -> None:
    """TorchScript keeps a module's settings (``batch_first``, ``hidden_size``, ...) as ``Final`` constants in the
    class's code, ``name : Final[type] = value``: read as text, each value a literal; nothing of the code runs."""
    constants = {}
    with zipfile.ZipFile(path) as z:
        for name in z.namelist():
            if "/code/" not in name or not name.endswith(".py"):
                continue
            module = name[name.index("/code/") + len("/code/"):-len(".py")].replace("/", ".")
            current = None
            for line in z.read(name).decode("utf8", "replace").splitlines():
                m = re.match(r"^class (\w+)\(", line)
                if m:
                    current = constants.setdefault(f"{module}.{m.group(1)}", {})
                    continue
                m = re.match(r"^  (\w+) : Final\[\w+\] = (.{1,200})$", line)  # a setting is a short literal
                if current is not None and m and m.group(1) in MODULE_ATTRS:
                    try:
                        current[m.group(1)] = ast.literal_eval(m.group(2).strip())
                    except (ValueError, SyntaxError, TypeError, MemoryError, RecursionError):
                        pass

    seen = set()  # each module once: a crafted archive shares or nests modules in itself

    def walk(obj, prefix):
        if not isinstance(obj, Inert) or id(obj) in seen:
            return
        seen.add(id(obj))
        found = constants.get(obj.cls.qualname)
        if found:
            attrs.setdefault(_strip(prefix), {}).update(found, **{"class": obj.cls.name})
        for name, value in obj.attrs.items():
            if isinstance(value, Inert):
                walk(value, f"{prefix}.{name}" if prefix else name)

    walk(root, "")


def _group(tensors):
    """({module path: {(kind, layer, direction): array}}, {module path of a cell}, {other name: array})."""
    grouped, cells, others = {}, {}, {}
    raw = {k: v for k, v in tensors.items() if k.endswith("_raw") and _PARAM.match(k)}
    for key, value in tensors.items():
        m = _PARAM.match(key)
        if m and not key.endswith("_raw"):
            module, kind, layer, reverse = m.group(1) or "", m.group(2), int(m.group(3)), bool(m.group(4))
            grouped.setdefault(module, {})[kind, layer, int(reverse)] = value
        elif m:
            continue
        elif _CELL.match(key) and key.rsplit(".", 1)[0] + ".bias_ih" in tensors or \
                (_CELL.match(key) and key.rsplit(".", 1)[0] + ".weight_hh" in tensors):
            cells[_CELL.match(key).group(1) or ""] = True
        else:
            others[key] = value
    for key, value in raw.items():  # AWD-LSTM's weight drop: the _raw tensor is the trained weight
        m = _PARAM.match(key)
        module, kind, layer, reverse = m.group(1) or "", m.group(2), int(m.group(3)), int(bool(m.group(4)))
        for owner in (f"{module}.module" if module else "module", module):
            if owner in grouped:
                grouped[owner][kind, layer, reverse] = value
                break
        else:
            grouped.setdefault(module, {})[kind, layer, reverse] = value
    return grouped, cells, others


def _spec(path, module, params, attrs, mode_flag) -> Tuple[Optional[RNNSpec], Dict[str, Any]]:
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
    facts = {"module": module, "from": {"mode, sizes, layers, directions, bias": "the tensors' shapes"}}
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
                   num_proj=proj or None)
    for key, value in (("hidden_size", H), ("num_layers", layers), ("bidirectional", dirs == 2),
                       ("proj_size", proj), ("input_size", int(ih.shape[1])), ("bias", bias)):
        if key in attrs and attrs[key] is not None and attrs[key] != value:
            raise CudnnPortError(f"{where}: the module says {key}={attrs[key]!r} but its tensors say {value!r}; the "
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


def _dtype(params):
    names = {v.dtype.name for v in params.values()}
    for name in ("float64", "float32", "float16"):
        if names == {name}:
            return name
    return "float32"  # bfloat16 or mixed: the buffer is float32, exact for both


def _canonical(spec: RNNSpec, params) -> CanonicalRNN:
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


SOURCE = SourceType("pytorch", "PyTorch file", "stack", is_pytorch_file,
                    lambda path, mode=None: PyTorchSource(path, mode), spec_flags=True, order=40,
                    judge="cudnn_port.judging.torch_weights:judge_stack",
                    original="cudnn_port.judging.torch_weights:torch_row")
