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
import os
from typing import Any, Dict, List, Optional

import numpy as np

from ..errors import CudnnPortError
from ..layout import pack
from ..paths import require_file
from ..source import Source, SourceType, buffer_name
from .torch_files import read_torch_file, sniff
from .torch_stacks import canonical, group_params, module_spec, params_dtype
from .torch_state import script_constants, state_tensors


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
        tensors, attrs, where = state_tensors(f.root, self.prefix)
        if f.kind.startswith("TorchScript"):
            script_constants(self.prefix, f.root, attrs)
        for node in f.nodes:  # a .pt2's recurrent nodes: their arguments are the modules' settings
            path_of = node["params"][0].rsplit(".", 1)[0] if node["params"] and "." in node["params"][0] else ""
            args = node["args"]
            attrs.setdefault(path_of, {}).update(
                mode=node["target"].upper(), num_layers=args.get("num_layers"), bias=args.get("has_biases"),
                bidirectional=args.get("bidirectional"), batch_first=args.get("batch_first"), **{"class": "aten op"})
        self.shapes, self.dtypes, self.modules, self._canon = {}, {}, {}, {}
        self._arrays: Dict[str, np.ndarray] = {}
        grouped, cells, others = group_params(tensors)
        if cells:
            name = next(iter(cells))
            raise CudnnPortError(f"{self.prefix}: {name or '(top level)'} holds weight_ih / weight_hh without a layer "
                                 "index: an nn.LSTMCell / nn.GRUCell stepped by a loop of the model's own, not a "
                                 "cuDNN stack; it has no fused form to convert")
        for module, params in grouped.items():
            spec, facts = module_spec(self.prefix, module, params, attrs.get(module, {}), mode)
            variable = buffer_name(module)
            facts["file_keys"] = where.get(module, module)
            self.modules[variable] = facts
            if spec is None:  # nn.RNN, tanh or relu: listed (both have one buffer, the same bytes) and refused by
                # convert until --mode says which; verify reads its buffer whatever the mode
                packed = module_spec(self.prefix, module, params, attrs.get(module, {}), "rnn_tanh")[0]
                assert packed is not None  # --mode rnn_tanh settles an nn.RNN's spec
                self._canon[variable] = canonical(packed, params)
                self._add(variable, None, (packed.param_count,), params_dtype(params))
                continue
            canon = canonical(spec, params)
            self._canon[variable] = canon
            dtype = params_dtype(params)
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



SOURCE = SourceType("pytorch", "PyTorch file", "stack", is_pytorch_file,
                    lambda path, mode: PyTorchSource(path, mode), spec_flags=True, order=40,
                    judge="cudnn_port.judging.torch_weights:judge_stack",
                    original="cudnn_port.judging.torch_weights:torch_row")
