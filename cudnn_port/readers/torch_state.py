"""Where a PyTorch file keeps its weights, read off the object tree :mod:`.torch_files` rebuilt (nothing of the
file runs): the state_dict itself, the one inside a checkpoint dict (Lightning's ``state_dict``,
``model_state_dict``, ...; optimizer states are not read), a pickled module tree or a TorchScript module, whose
settings are ``Final`` constants in its code. The wrappers' prefixes ``module.`` (DataParallel / DDP) and
``_orig_mod.`` (torch.compile) are read past."""
import ast
import re
import zipfile
from typing import Any, Dict, Tuple

import numpy as np

from ..errors import CudnnPortError
from .torch_pickle import Inert, Quantized

PARAM = re.compile(r"^(?:(.*)\.)?(weight_ih|weight_hh|bias_ih|bias_hh|weight_hr)_l(0|[1-9]\d{0,5})(_reverse)?(_raw)?$")
DROPPED_PREFIXES = ("module.", "_orig_mod.")
STATE_KEYS = ("state_dict", "model_state_dict", "model_state", "model", "net", "network", "module",
              "state_dict_ema", "model_ema", "weights", "params")
NOT_WEIGHTS = ("optimizer", "optimizer_state_dict", "optimizer_states", "optim", "lr_schedulers", "scheduler",
               "callbacks", "loops", "amp", "scaler", "grad_scaler")
MODULE_ATTRS = ("mode", "input_size", "hidden_size", "num_layers", "bias", "batch_first", "bidirectional",
                "proj_size", "nonlinearity", "dropout")


def _strip(key: str) -> str:
    changed = True
    while changed:
        changed = False
        for prefix in DROPPED_PREFIXES:
            if key.startswith(prefix):
                key, changed = key[len(prefix):], True
        key = key.replace("._orig_mod.", ".")  # torch.compile of a submodule
    return key


def _dict(value: Any) -> Dict[str, Any]:
    """``value`` where it is a dict (a module's ``_parameters``, ``_buffers``, ``_modules``), else an empty one."""
    return value if isinstance(value, dict) else {}


def state_tensors(root: Any, path: str) -> Tuple[Dict[str, np.ndarray], Dict[str, dict], Dict[str, str]]:
    """({tensor name: array}, {module path: attributes of a pickled module}, {module path: its key prefix in the
    file}) of the weights ``root`` holds: the state_dict itself, the one inside a checkpoint dict, or a module tree."""
    tensors: Dict[str, np.ndarray] = {}
    attrs: Dict[str, dict] = {}
    raw: Dict[str, str] = {}
    seen_at: Dict[int, str] = {}

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
        params = _dict(state.get("_parameters"))
        buffers = _dict(state.get("_buffers"))
        for name, value in list(params.items()) + list(buffers.items()):
            if isinstance(value, np.ndarray):
                add(f"{prefix}.{name}" if prefix else name, value)
        children = _dict(state.get("_modules"))
        for name, value in state.items():  # TorchScript keeps parameters and submodules as attributes
            if isinstance(value, np.ndarray) and name not in params and not name.startswith("_"):
                add(f"{prefix}.{name}" if prefix else name, value)
            elif isinstance(value, Inert) and value.cls.module.startswith("__torch__") and name not in children:
                children = {**children, name: value}
        for name, child in children.items():
            if isinstance(child, Inert):
                module(child, f"{prefix}.{name}" if prefix else name)

    first: Dict[str, str] = {}  # stripped name -> the key it was read from: two keys that read as one name are refused

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
        m = PARAM.match(stripped)
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


def script_constants(path: str, root: Any, attrs: Dict[str, dict]) -> None:
    """TorchScript keeps a module's settings (``batch_first``, ``hidden_size``, ...) as ``Final`` constants in the
    class's code, ``name : Final[type] = value``: read as text, each value a literal; nothing of the code runs."""
    constants: Dict[str, Dict[str, Any]] = {}
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
