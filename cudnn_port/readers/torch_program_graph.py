"""A ``torch.export`` program (``.pt2``) read as data: the archive's graph JSON (or a TorchScript file's code,
which :mod:`.torchscript` parses into the same form) as a :class:`Program` of nodes in order, user inputs and
outputs, parameters with their weights, and each tensor's recorded sizes and dtype. Its pickles are never read and
``torch.export.load`` never runs. The ops a program may hold (:data:`SUPPORTED`, :data:`PASSED`) are checked here,
before anything is built, and a node's messages name the module it came from (``nn_module_stack``).
"""
import json
import zipfile
from dataclasses import dataclass, field
from typing import Any, Dict, List

import numpy as np

from ..errors import CudnnPortError, UnsupportedError, short
from .torch_files import MAX_STORAGES, PT2_DTYPES, read_torch_file, zip_names
from .torchscript import is_script, read_script
from .zip_guard import check_members

RECURRENT = {"lstm": "lstm", "gru": "gru", "rnn_tanh": "rnn_tanh", "rnn_relu": "rnn_relu"}
SIZE_OPS = ("_operator.mul",)  # Python's arithmetic on sizes torch.export records (x.view(s * b, h))
PASSED = ("_assert_tensor_metadata", "_assert_scalar", "sym_constrain_range_for_size",
          "sym_constrain_range", "_assert_async")
SUPPORTED = ("embedding", "linear", "addmm", "matmul", "mm", "bmm", "t", "select", "slice", "cat", "stack",
             "view", "reshape", "permute", "transpose", "flatten", "squeeze", "unsqueeze", "relu", "tanh", "sigmoid",
             "gelu", "softmax", "log_softmax", "mean", "sum", "layer_norm", "dropout", "add", "sub", "rsub", "mul",
             "div", "zeros", "new_zeros", "zeros_like", "contiguous", "clone", "alias", "detach", "conv1d", "conv2d",
             "batch_norm", "_native_batch_norm_legit_no_training", "split", "split_with_sizes", "chunk",
             "lstm", "gru", "rnn_tanh", "rnn_relu")


def is_program(path: str) -> bool:
    """Whether ``path`` is a ``torch.export.save`` archive holding a program's graph JSON."""
    names = zip_names(path)
    return any(n.endswith("archive_format") for n in names) and _model_json(names) is not None


def _model_json(names):
    return next((n for n in names if "/models/" in n and n.endswith(".json") and "weights" not in n), None)


@dataclass
class Program:
    """A ``.pt2`` program as data: ``nodes`` (graph JSON nodes in order), ``inputs`` (user input names),
    ``outputs`` (user output names), ``params`` (placeholder -> parameter FQN), ``weights`` ({FQN: array}),
    ``sizes`` ({tensor: recorded sizes, a symbolic one by its hint}), ``symbolic`` ({tensor: [whether each dim is
    symbolic]}), ``dtypes`` ({tensor: NumPy dtype name})."""

    path: str
    nodes: List[Dict[str, Any]]
    inputs: List[str]
    outputs: List[Any]
    params: Dict[str, str]
    weights: Dict[str, np.ndarray]
    sizes: Dict[str, List[int]] = field(default_factory=dict)
    symbolic: Dict[str, List[bool]] = field(default_factory=dict)
    dtypes: Dict[str, str] = field(default_factory=dict)


def read_program(path: str) -> Program:
    """The program of the ``.pt2`` at ``path`` (graph JSON and weights, read as data); a damaged or crafted archive
    is refused in one line."""
    try:
        return _read_program(path)
    except CudnnPortError:
        raise
    except (OSError, zipfile.BadZipFile, json.JSONDecodeError, KeyError, ValueError, TypeError, AttributeError,
            IndexError, StopIteration, RecursionError, MemoryError) as e:
        raise CudnnPortError(f"cannot read {path} as a torch.export program ({type(e).__name__}: {short(str(e), 80)}); "
                             "save it again with torch.export.save") from None


def _read_program(path: str) -> Program:
    if is_script(path):  # its code parsed as data into the same graph form
        module, weights = read_script(path)
    else:
        with zipfile.ZipFile(path) as z:
            check_members(z, path, "a torch.export archive holds one per weight", max_members=MAX_STORAGES)
            graph = json.loads(z.read(_model_json(z.namelist())))
        module, weights = graph.get("graph_module", graph), None
    body = module["graph"]
    params, inputs = {}, []
    for spec in module["signature"]["input_specs"]:
        if "user_input" in spec:
            arg = spec["user_input"]["arg"]
            if "as_tensor" not in arg:
                raise UnsupportedError(f"{path}: a program input that is not a tensor ({short(json.dumps(arg), 60)})")
            inputs.append(arg["as_tensor"]["name"])
        else:
            kind = next(iter(spec))
            entry = spec[kind]
            name = entry.get("parameter_name") or entry.get("buffer_name") or entry.get("tensor_constant_name")
            params[entry["arg"]["name"]] = name
    outputs = []
    for spec in module["signature"]["output_specs"]:
        kind = next(iter(spec))
        if kind != "user_output":
            raise UnsupportedError(f"{path}: the program mutates a buffer or a user input ({kind}); export it in "
                                   "eval mode without in-place updates")
        outputs.append(spec[kind]["arg"])
    weights = read_torch_file(path).root if weights is None else weights
    missing = [p for p in params.values() if p not in weights]
    if missing:
        raise UnsupportedError(f"{path}: the program reads {short(missing[0])}, a constant torch.export stores as a "
                               "pickle, which is not read; make it a parameter or a buffer of the module")
    program = Program(path, body["nodes"], inputs, outputs, params, weights)
    for name, meta in body.get("tensor_values", {}).items():
        sizes = meta.get("sizes", [])
        program.sizes[name] = [_hint(s, body) for s in sizes]
        program.symbolic[name] = [not (isinstance(s, dict) and "as_int" in s) and not isinstance(s, int)
                                  for s in sizes]
        program.dtypes[name] = PT2_DTYPES.get(meta.get("dtype"), "float32")
    return program


def _hint(size, body):
    if isinstance(size, int):
        return size
    if "as_int" in size:
        return size["as_int"]
    expr = size.get("as_expr", {})
    hint = expr.get("hint")
    return int(hint["as_int"] if isinstance(hint, dict) else hint) if hint is not None else -1


def op_name(target: str) -> str:
    """``torch.ops.aten.softmax.int`` -> ``softmax``."""
    parts = target.split(".")
    return parts[3] if target.startswith("torch.ops.aten.") and len(parts) > 3 else target


def module_path(node: Dict[str, Any]) -> str:
    """The path of the module a node came from (``encoder.lstm``), or ""."""
    stack = (node.get("metadata") or {}).get("nn_module_stack") or ""
    entries = [e.split(",") for e in stack.split(";") if e]
    return next((e[1] for e in reversed(entries) if len(e) >= 3 and e[1]), "")


def module_of(node: Dict[str, Any]) -> str:
    """Where a node came from: the innermost entry of its ``nn_module_stack`` ("lstm: torch.nn.modules.rnn.LSTM"),
    or "the model's forward"."""
    stack = (node.get("metadata") or {}).get("nn_module_stack") or ""
    entries = [e.split(",") for e in stack.split(";") if e]
    inner = next((e for e in reversed(entries) if len(e) >= 3 and e[1]), None)
    return f"{inner[1]} ({inner[-1]})" if inner else "the model's forward"


def refuse_untranslated(program: Program) -> None:
    """Refuses, in one line naming it and the module it came from, the first op of ``program`` with no
    translation."""
    for node in program.nodes:
        op = op_name(node["target"])
        if op not in SUPPORTED and op not in PASSED and op != "sym_size" and node["target"] not in SIZE_OPS:
            raise UnsupportedError(f"{program.path}: {node['target'].replace('torch.ops.', '')} (from "
                                   f"{module_of(node)}) has no translation to a whole model yet (docs/sources.md lists "
                                   "the ops that have one)")
