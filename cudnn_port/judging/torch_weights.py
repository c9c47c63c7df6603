"""verify's per-stack judge of a PyTorch source: each gate's matrix taken from the file's tensors by PyTorch's
documented names (torch/nn/modules/rnn.py), not through the reader the artifacts came from
(:mod:`cudnn_port.readers.pytorch` and the buffer it packs), so a gate, a direction or a layer that reader maps
wrongly fails every row.

- The tensors: where torch is installed and can load the file without running it (``torch.load(weights_only=True)``:
  a state_dict, a checkpoint dict, a legacy file; ``safetensors`` for safetensors files), PyTorch's own loader reads
  them; otherwise (a whole pickled module, TorchScript, ``.pt2``) cudnn-port's unpickler
  (:mod:`cudnn_port.readers.torch_files`), and the row says so.
- The rule: ``weight_ih_l{k}[_reverse]`` is ``[W_0; ...; W_{G-1}]`` row blocks of H in cuDNN's gate order (LSTM i, f,
  g, o; GRU r, z, n), ``weight_hh`` likewise R, ``bias_ih`` / ``bias_hh`` b_W / b_R (zero without ``bias``),
  ``weight_hr`` the projection ``[P, H]``. The module's tensors are found as the keys ending in
  ``{module}.weight_ih_l0`` once the wrappers' prefixes (``module.``, ``_orig_mod.``) are read past.
- :func:`torch_row`: ``torch.nn.LSTM / GRU / RNN`` itself on CPU, loading those tensors, on verify's ragged batch
  with non-zero states, against the same reference (a judge of the judge: PyTorch's kernels agree with it).
"""
import zipfile
from typing import TYPE_CHECKING, Any, Dict, List, Optional, Tuple

import numpy as np

from .parity import compare, failed_row, skipped_row
from .torch_program import Interpreter
from ..canonical import CanonicalRNN, LayerParams
from ..formats.pytorch import torch_modules
from ..readers.torch_files import read_torch_file
from ..readers.torch_pickle import Inert

if TYPE_CHECKING:
    from ..layout import RNNSpec

WRAPPERS = ("module", "_orig_mod")


def file_tensors(path: str) -> Tuple[Dict[str, np.ndarray], str]:
    """({dotted name: array} of every tensor in the file, how they were read)."""
    try:
        # lazy: safetensors / torch, loaded on first use (import cudnn_port stays light)
        from safetensors.numpy import load_file

        return dict(load_file(path)), "safetensors' own loader"
    except Exception:  # BLE001: not a safetensors file (or its dtype NumPy lacks): try PyTorch's loader
        pass
    if zipfile.is_zipfile(path) and any(n.endswith("archive_format") for n in zipfile.ZipFile(path).namelist()):
        try:  # a torch.export archive: its weights as the program judge reads them, raw bytes into torch tensors
            weights = Interpreter(path).weights
            return {k: v.float().numpy() if str(v.dtype) == "torch.bfloat16" else v.numpy()
                    for k, v in weights.items()}, "the .pt2's weight config and raw bytes, read into torch tensors"
        except ImportError:  # no torch: the project's reader, as the row says
            pass
    try:
        # lazy: torch, loaded on first use (import cudnn_port stays light)
        import torch

        obj = torch.load(path, map_location="cpu", weights_only=True)
        found: Dict[str, np.ndarray] = {}
        _walk(obj, "", found, lambda t: t.detach().float().numpy() if t.dtype == torch.bfloat16
              else t.detach().numpy())
        if found:
            return found, "PyTorch's own loader (torch.load, weights_only=True)"
    except Exception:  # BLE001: no torch, or a file torch cannot load without running it: the project's unpickler
        pass
    found = {}
    root = read_torch_file(path).root

    def module(obj, prefix):
        for name, value in obj.attrs.items():
            key = f"{prefix}.{name}" if prefix else name
            if isinstance(value, np.ndarray):
                found[key] = value
            elif isinstance(value, dict) and name in ("_parameters", "_modules", "_buffers"):
                for k, v in value.items():
                    if isinstance(v, np.ndarray):
                        found[f"{prefix}.{k}" if prefix else k] = v
                    elif isinstance(v, Inert):
                        module(v, f"{prefix}.{k}" if prefix else k)
            elif isinstance(value, Inert):
                module(value, key)

    if isinstance(root, Inert):
        module(root, "")
    else:
        _walk(root, "", found, lambda a: a, inert=lambda obj, prefix: module(obj, prefix))
    return found, "cudnn-port's unpickler (PyTorch cannot load this file without running it)"


def _walk(obj, prefix, found, convert, inert=None):
    if hasattr(obj, "shape") and hasattr(obj, "dtype") and not isinstance(obj, dict):
        found[prefix] = np.asarray(convert(obj))
    elif isinstance(obj, dict):
        for k, v in obj.items():
            _walk(v, f"{prefix}.{k}" if prefix else str(k), found, convert, inert)
    elif inert is not None and isinstance(obj, Inert):
        inert(obj, prefix)


CONTAINERS = ("state_dict", "model_state_dict", "model_state", "model", "net", "network", "weights", "params")


def module_tensors(tensors: Dict[str, np.ndarray], module: str) -> Dict[str, np.ndarray]:
    """{PyTorch parameter name: array} of ``module`` (its path as the manifest names it) among ``tensors``: the
    keys ``{owner}weight_ih_l0`` whose owner is the module itself once the wrappers' components (DataParallel's
    ``module``, torch.compile's ``_orig_mod``) and at most one leading checkpoint container (Lightning's
    ``state_dict``, ``model_state_dict``, ...) are read past. No owner, or more than one, is an error."""
    def bare(owner):
        return [p for p in owner.split(".") if p and p not in WRAPPERS]

    want = bare(module)
    owners = [k[:-len("weight_ih_l0")] for k in tensors if k == "weight_ih_l0" or k.endswith(".weight_ih_l0")]
    found = [o for o in owners if bare(o) == want or (bare(o)[:1] and bare(o)[0] in CONTAINERS and
                                                      bare(o)[1:] == want)]
    exact = [o for o in found if bare(o) == want]
    found = exact or found
    if len(found) != 1:
        raise KeyError(f"module '{module}' is {'none' if not found else 'each'} of the file's owners of weight_ih_l0 "
                       f"{[o.rstrip('.') for o in (found or owners)][:4]}")
    owner = found[0]
    out = {k[len(owner):]: v for k, v in tensors.items() if k.startswith(owner) and "." not in k[len(owner):]}
    for k, v in list(out.items()):  # AWD-LSTM's weight drop: weight_hh_l0_raw on the wrapper is the weight
        if k.endswith("_raw"):
            out[k[:-4]] = v
    raw_owner = owner[:-len("module.")] if owner.endswith("module.") else None
    if raw_owner is not None:
        for k, v in tensors.items():
            if k.startswith(raw_owner) and k.endswith("_raw") and "." not in k[len(raw_owner):]:
                out[k[len(raw_owner):-4]] = v
    return out


def stack_from_file(path: str, module: str, spec: "RNNSpec") -> Tuple[CanonicalRNN, str]:
    """(the stack of ``module`` in cuDNN's order, read from the file by PyTorch's names; how the tensors were read)."""
    tensors, how = file_tensors(path)
    named = module_tensors(tensors, module)
    G, H = spec.num_gates, spec.num_units
    layers = []
    for k in range(spec.num_layers):
        for d in range(spec.num_dirs):
            sfx = f"_l{k}" + ("_reverse" if d else "")
            W = np.asarray(named[f"weight_ih{sfx}"], np.float64)
            R = np.asarray(named[f"weight_hh{sfx}"], np.float64)
            b_W = np.asarray(named.get(f"bias_ih{sfx}", np.zeros(G * H)), np.float64)
            b_R = np.asarray(named.get(f"bias_hh{sfx}", np.zeros(G * H)), np.float64)
            P = np.asarray(named[f"weight_hr{sfx}"], np.float64) if spec.num_proj else None
            layers.append(LayerParams(W=np.stack(np.split(W, G)), R=np.stack(np.split(R, G)),
                                      b_W=np.stack(np.split(b_W, G)), b_R=np.stack(np.split(b_R, G)), P=P))
    return CanonicalRNN(spec, layers), how


def torch_row(path: str, variable: str, spec: "RNNSpec", batch: Tuple[np.ndarray, ...],
              want: List[Optional[np.ndarray]], atol: float, rtol: float) -> Dict[str, Any]:
    """``torch.nn.LSTM / GRU / RNN`` loading the tensors of the module of stack ``variable`` from the file, against
    the reference (the registry's ``original`` row of a PyTorch source)."""
    module = variable.rsplit("/", 1)[0] if "/" in variable else ""
    name = "PyTorch's own module on the file's tensors"
    try:
        # lazy: torch, loaded on first use (import cudnn_port stays light)
        import torch  # noqa: F401
    except ImportError:
        return skipped_row(name, "PyTorch is not installed (pip install torch)")
    try:
        tensors, how = file_tensors(path)
        state = {k: v for k, v in module_tensors(tensors, module).items() if not k.endswith("_raw")}
        if not any(k.startswith("bias_") for k in state):  # bias=False: torch_modules builds bias=True modules
            G, H = spec.num_gates, spec.num_units
            state.update({f"bias_{w}{k[len('weight_ih'):]}": np.zeros(G * H, np.float32)
                          for k in list(state) if k.startswith("weight_ih") for w in ("ih", "hh")})
        x, lengths, h, c = batch
        got = torch_modules(spec, state, x, lengths, h, c)
        return dict(compare(name, got, want, atol, rtol), judge_of_artifact=f"torch.nn on CPU; tensors by {how}")
    except Exception as e:  # BLE001: a module PyTorch cannot build from the file is a failed check
        return failed_row(name, e)


def judge_stack(path: str, variable: str, spec: "RNNSpec") -> Tuple[CanonicalRNN, str]:
    """verify's per-stack judge of a PyTorch source (the registry's ``judge``): the stack ``variable``
    (``{module}/opaque_kernel``) from the file's tensors by PyTorch's names, and the judge's words."""
    canon, how = stack_from_file(path, variable.rsplit("/", 1)[0] if "/" in variable else "", spec)
    return canon, f"the source file's tensors by PyTorch's parameter names, read by {how} (not the reader)"
