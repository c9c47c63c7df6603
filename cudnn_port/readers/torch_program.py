"""A ``torch.export`` program (``.pt2``) as a whole Keras model: the graph JSON read as data (its pickles are never
read, ``torch.export.load`` never runs), each node translated in order into a Keras Functional model that
:func:`cudnn_port.roads.model.export` writes as every whole-model artifact.

- each user input a ``keras.Input`` named as the program names it, of its dtype, with its batch and time
  dimensions free: batch is what the program marked dynamic (``torch.export.Dim``), time is the length the
  recurrent nodes were exported at (torch.export cannot keep an RNN's length symbolic, so every ``.pt2`` of one is
  fixed in time: docs/sources.md);
- each ``aten.lstm`` / ``gru`` / ``rnn_tanh`` / ``rnn_relu`` node one fused layer of :mod:`cudnn_port.layers` holding
  the module's stack as :class:`~cudnn_port.readers.pytorch.PyTorchSource` reads it (states in PyTorch's
  ``[L*D, batch, S]`` layout outside the layer, batch-major inside; ``batch_first=False``: transposed around it);
- ``embedding`` Keras' ``Embedding``, ``linear`` of parameters Keras' ``Dense``; every other supported op one
  :class:`~cudnn_port.aten_layers.AtenOp`;
- a size the program recorded as numbers (``view(x, [s0, 7, 4])``) keeps a dimension free where it comes from a free
  dimension of the input: sizes are aligned with the input's recorded sizes group by group, and a group holding a
  free dimension is read from the tensors when the model runs.

Any other op is refused in one line naming it and the module it came from (``nn_module_stack``).
"""
import json
import os
import re
import zipfile
from dataclasses import dataclass, field
from typing import Any, Dict, List, Optional, Tuple

import numpy as np

from ..deps import import_tf
from ..errors import CudnnPortError, UnsupportedError, short
from ..source import SourceType, buffer_name
from .keras_model import KerasModelSource
from .pytorch import PyTorchSource
from .torch_files import MAX_STORAGES, PT2_DTYPES, read_torch_file, zip_names
from .torchscript import is_script, read_script
from .zip_guard import check_members

PROGRAM_FORMAT = "PyTorch program (torch.export .pt2)"
SCRIPT_FORMAT = "PyTorch program (TorchScript)"  # a TorchScript file's code read as such a program (.torchscript)
PROGRAM_FORMATS = (PROGRAM_FORMAT, SCRIPT_FORMAT)
RECURRENT = {"lstm": "lstm", "gru": "gru", "rnn_tanh": "rnn_tanh", "rnn_relu": "rnn_relu"}
PASSED = ("_assert_tensor_metadata", "_assert_scalar", "sym_constrain_range_for_size",
          "sym_constrain_range", "_assert_async")
SAME = {"contiguous": "identity", "clone": "identity", "alias": "identity", "detach": "identity",
        "lift_fresh_copy": "identity", "_unsafe_view": "reshape", "view": "reshape", "reshape": "reshape",
        "_softmax": "softmax", "_log_softmax": "log_softmax", "true_divide": "div", "mm": "matmul",
        "bmm": "matmul"}
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
        if op not in SUPPORTED and op not in PASSED and op != "sym_size":
            raise UnsupportedError(f"{program.path}: {node['target'].replace('torch.ops.', '')} (from "
                                   f"{module_of(node)}) has no translation to a whole model yet (docs/sources.md lists "
                                   "the ops that have one)")


@dataclass
class _Sym:
    """A symbolic int of the program: the product of these (tensor name, axis) dimensions."""
    refs: List[Tuple[str, int]]
    hint: int


@dataclass
class _Zeros:
    """A zeros tensor not made yet (a recurrent node's default state, which the fused layer makes itself)."""
    size: List[Any]
    node: Dict[str, Any]


class _Translator:
    def __init__(self, program: Program, source: Any):
        self.p, self.source = program, source
        self.values: Dict[str, Any] = {}
        self.layers: Dict[str, Any] = {}
        self.names: Dict[str, int] = {}
        self.pending: List[Tuple[Any, Any]] = []  # (variable, value) set once the model is built

    # ---- inputs -------------------------------------------------------------------------------------------------
    def exported_sizes(self) -> Tuple[set, set]:
        """(the lengths, the static batch sizes) the recurrent nodes' inputs were exported at."""
        lengths, batches = set(), set()
        for node in self.p.nodes:
            if op_name(node["target"]) in RECURRENT:
                args = self.args(node, raw=True)
                x = args["input"]["as_tensor"]["name"]
                batch_first = args.get("batch_first", {}).get("as_bool", False)
                lengths.add(self.p.sizes[x][1 if batch_first else 0])
                if not self.p.symbolic[x][0 if batch_first else 1]:
                    batches.add(self.p.sizes[x][0 if batch_first else 1])
        return lengths, batches

    def free_dims(self) -> Dict[str, List[bool]]:
        """Which dims of each user input are free: symbolic ones (batch), those of the length the recurrent
        nodes were exported at (time), and, in a program exported with no dynamic dimension, the one of the batch
        size the recurrent nodes were exported at (batch)."""
        lengths, batches = self.exported_sizes()
        static = not any(any(self.p.symbolic[name]) for name in self.p.inputs)
        if not lengths:
            raise UnsupportedError(f"{self.p.path}: the program has no aten.lstm / gru / rnn_tanh / rnn_relu node; "
                                   "cudnn-port converts recurrent models")
        free = {}
        for name in self.p.inputs:
            sizes, symbolic = self.p.sizes[name], self.p.symbolic[name]
            timed = [i for i, s in enumerate(sizes) if s in lengths and not symbolic[i]]
            if len(timed) > 1:
                raise CudnnPortError(f"{self.p.path}: input {name} of shape {sizes} has {len(timed)} dimensions of "
                                     f"the exported length {sizes[timed[0]]}, so its time dimension is not clear; "
                                     "export with a length that no other dimension has")
            batched = [i for i, s in enumerate(sizes) if static and s in batches and i not in timed]
            free[name] = [symbolic[i] or i in timed or (len(batched) == 1 and i in batched)
                          for i in range(len(sizes))]
        return free

    # ---- arguments ----------------------------------------------------------------------------------------------
    def args(self, node, raw=False) -> Dict[str, Any]:
        out = {}
        for i, inp in enumerate(node.get("inputs", [])):
            out[inp.get("name") or str(i)] = inp["arg"] if raw else self.value(inp["arg"], node)
        return out

    def value(self, arg, node):
        kind, v = next(iter(arg.items())) if arg else ("as_none", None)
        if kind == "as_tensor":
            return self.values[v["name"]] if v["name"] in self.values else self.param(v["name"], node)
        if kind == "as_tensors":
            return [self.value({"as_tensor": t}, node) for t in v]
        if kind == "as_optional_tensors":
            return [None if "as_none" in t else self.value(t, node) for t in v]
        if kind in ("as_int", "as_float", "as_bool", "as_string", "as_ints", "as_floats", "as_bools"):
            return v
        if kind == "as_sym_int":
            return self.sym(v)
        if kind == "as_sym_ints":
            return [self.sym(s) for s in v]
        if kind in ("as_none", "as_scalar_type", "as_device", "as_layout", "as_memory_format"):
            return None
        if kind == "as_scalar":
            return next(iter(v.values())) if isinstance(v, dict) else v
        raise UnsupportedError(f"{self.p.path}: node {node.get('name')} of {module_of(node)} takes an argument of "
                               f"kind {kind}, which is not translated")

    def sym(self, v):
        if "as_int" in v:
            return v["as_int"]
        found = self.values.get(v.get("as_name"))
        if not isinstance(found, _Sym):
            raise UnsupportedError(f"{self.p.path}: a size computed as {short(json.dumps(v), 40)}, which is not "
                                   "translated")
        return found

    def param(self, name, node):
        if name in self.p.params:
            return np.asarray(self.p.weights[self.p.params[name]])
        raise CudnnPortError(f"{self.p.path}: node {node.get('name')} reads {name}, which the graph never defines")

    # ---- building blocks ----------------------------------------------------------------------------------------
    def unique(self, base):
        base = re.sub(r"[^A-Za-z0-9_]", "_", base) or "op"
        n = self.names.get(base, 0)
        self.names[base] = n + 1
        return base if n == 0 else f"{base}_{n}"

    def aten(self, op, args, name):
        """An :class:`AtenOp` over ``args`` (values: Keras tensors, arrays, _Sym, literals, lists); folded to an
        array where no Keras tensor is among them."""
        # lazy: Keras, loaded on first use (import cudnn_port stays light)
        import keras

        from ..aten_layers import AtenOp, run_op

        tensors, constants = [], []

        def enc(a):
            if isinstance(a, _Zeros):
                a = self.zeros(a)
            if isinstance(a, keras.KerasTensor):
                for k, t in enumerate(tensors):
                    if t is a:
                        return {"t": k}
                tensors.append(a)
                return {"t": len(tensors) - 1}
            if isinstance(a, np.ndarray):
                constants.append(a)
                return {"c": len(constants) - 1}
            if isinstance(a, _Sym):
                return {"dims": [[enc(self.values[n])["t"], axis] for n, axis in a.refs]}
            if isinstance(a, (list, tuple)):
                return {"list": [enc(x) for x in a]}
            return {"v": a.item() if isinstance(a, np.generic) else a}

        encoded = [enc(a) for a in args]
        if not tensors:  # a computation on parameters alone: folded here, once
            tf = import_tf()
            return np.asarray(run_op(op, encoded, [], [tf.constant(c) for c in constants]))
        layer = AtenOp(op, encoded, [[list(c.shape), c.dtype.name] for c in constants], name=self.unique(name))
        result = layer(tensors)
        for variable, value in zip(layer.constants, constants):
            self.pending.append((variable, value))
        return result

    def zeros(self, z):
        return self.aten("zeros", [z.size], z.node["name"])

    # ---- nodes --------------------------------------------------------------------------------------------------
    def node(self, node):
        target = node["target"]
        op = op_name(target)
        outs = [o.get("as_tensor", {}).get("name") for o in node.get("outputs", [])]
        if op in PASSED:  # checks torch.export inserted; nothing to compute
            return
        if op in RECURRENT:
            return self.recurrent(node, op, outs)
        args = list(self.args(node).values())
        if op == "sym_size":
            tensor = node["inputs"][0]["arg"]["as_tensor"]["name"]
            sym_name = node["outputs"][0]["as_sym_int"]["as_name"]
            self.values[sym_name] = _Sym([(tensor, args[1])], self.p.sizes[tensor][args[1]])
            return
        result = self.translate(op, args, node)
        listed = node.get("outputs", [{}])[0].get("as_tensors")
        if listed is not None:  # split / chunk: a list of tensors
            for t, value in zip(listed, result):
                self.values[t["name"]] = value
        elif op == "_native_batch_norm_legit_no_training":  # (output, save_mean, save_rstd): only the first is used
            self.values[outs[0]] = result
        else:
            self.values[outs[0]] = result

    def translate(self, op, a, node):
        # lazy: Keras, loaded on first use (import cudnn_port stays light)
        import keras

        name = node["name"]
        if op == "embedding":
            weight, ids = a[0], a[1]
            if not isinstance(weight, np.ndarray):
                raise UnsupportedError(f"{self.p.path}: an embedding of a computed table (from {module_of(node)})")
            from ..aten_layers import TorchEmbedding

            layer = TorchEmbedding(weight.shape[0], weight.shape[1], name=self.unique(module_path(node) or name))
            result = layer(ids)
            self.pending.append((layer.embeddings, weight))
            return result
        if op == "linear" and isinstance(a[1], np.ndarray) and (len(a) < 3 or a[2] is None
                                                                 or isinstance(a[2], np.ndarray)) \
                and isinstance(a[0], keras.KerasTensor):
            bias = a[2] if len(a) > 2 else None
            layer = keras.layers.Dense(a[1].shape[0], use_bias=bias is not None,
                                       name=self.unique(module_path(node) or name))
            result = layer(a[0])
            self.pending.append((layer.kernel, a[1].T))
            if bias is not None:
                self.pending.append((layer.bias, bias))
            return result
        if op == "dropout":
            if a[2]:
                raise UnsupportedError(f"{self.p.path}: dropout in training mode (from {module_of(node)}); export "
                                       "the model after model.eval()")
            return a[0]
        if op in ("zeros", "new_zeros", "zeros_like"):
            size = a[0] if op == "zeros" else a[1] if op == "new_zeros" else None
            if op == "zeros_like":
                return self.aten("mul", [a[0], 0.0], name)
            return _Zeros(size, node)
        if op in ("conv1d", "conv2d"):
            if len(a) > 6 and a[6] not in (1, None) or any(isinstance(v, str) for v in a[3:6]):
                raise UnsupportedError(f"{self.p.path}: {op} with groups or string padding (from {module_of(node)}) "
                                       "is not translated yet")
            return self.aten("convolution", a[:6], name)
        if op in ("batch_norm", "_native_batch_norm_legit_no_training"):
            training = a[5] if op == "batch_norm" else False
            if training:
                raise UnsupportedError(f"{self.p.path}: batch_norm in training mode (from {module_of(node)}); export "
                                       "the model after model.eval()")
            eps = a[7] if op == "batch_norm" else a[6]
            return self.aten("batch_norm", a[:5] + [False, 0.0, eps], name)
        if op in ("split", "split_with_sizes", "chunk"):
            sizes = self.p.sizes[node["inputs"][0]["arg"]["as_tensor"]["name"]]
            dim = a[2] if len(a) > 2 else 0
            total = sizes[dim]
            if getattr(a[0], "shape", [None] * (dim + 1))[dim] is None:
                raise UnsupportedError(f"{self.p.path}: {op} along a dimension that changes with batch or time (from "
                                       f"{module_of(node)}) is not translated")
            if op == "chunk":
                step = -(-total // a[1])
                parts = [min(step, total - k) for k in range(0, total, step)]
            elif op == "split":
                parts = [min(a[1], total - k) for k in range(0, total, a[1])]
            else:
                parts = list(a[1])
            return self.aten("split", [a[0], parts, dim], name)
        if op in ("view", "reshape", "_unsafe_view"):
            return self.aten("reshape", [a[0], self.reshape_size(node, a[0], a[1])], name)
        if op == "squeeze":
            dims = a[1] if len(a) > 1 else None
            sizes = self.p.sizes[node["inputs"][0]["arg"]["as_tensor"]["name"]]
            dims = range(len(sizes)) if dims is None else dims if isinstance(dims, list) else [dims]
            return self.aten("squeeze", [a[0], [d for d in dims if sizes[d] == 1]], name)
        if op in ("mean", "sum") and len(a) > 1 and isinstance(a[1], int):
            a = [a[0], [a[1]]] + a[2:]
        if op in ("softmax", "log_softmax", "_softmax", "_log_softmax"):
            a = a[:2]
        if op == "gelu":
            a = a[:2]
        return self.aten(SAME.get(op, op), a, name)

    def reshape_size(self, node, x, size):
        """The size list of a reshape of ``x``: each number the program recorded kept where the input's dimensions
        it groups with are fixed; a group holding a free dimension of ``x`` computed from ``x`` when it runs."""
        inp = node["inputs"][0]["arg"]["as_tensor"]["name"]
        out = node["outputs"][0]["as_tensor"]["name"]
        a, b = self.p.sizes.get(inp), self.p.sizes.get(out)
        free = [d is None for d in getattr(x, "shape", ())]
        if a is None or b is None or not any(free):
            return [s if not isinstance(s, _Sym) else s for s in size]
        groups, i, j = [], 0, 0
        while i < len(a) or j < len(b):
            gi, gj, pa, pb = [], [], 1, 1
            if i < len(a):
                gi.append(i)
                pa *= a[i]
                i += 1
            if j < len(b):
                gj.append(j)
                pb *= b[j]
                j += 1
            while pa != pb and (i < len(a) or j < len(b)):
                if (pa < pb and i < len(a)) or j >= len(b):
                    gi.append(i)
                    pa *= a[i]
                    i += 1
                else:
                    gj.append(j)
                    pb *= b[j]
                    j += 1
            groups.append((gi, gj))
        result = list(size)
        for gi, gj in groups:
            if not any(free[k] for k in gi):
                continue
            if len(gj) == 1:
                result[gj[0]] = _Sym([(inp, k) for k in gi], b[gj[0]])
                continue
            unknown = [k for k in gj if not isinstance(size[k], _Sym)]
            if len(unknown) == 1:
                result[unknown[0]] = -1
            elif len(gi) == len(gj) and all(a[p] == b[q] for p, q in zip(gi, gj)):
                for p, q in zip(gi, gj):
                    result[q] = _Sym([(inp, p)], b[q]) if free[p] else b[q]
            else:
                raise UnsupportedError(f"{self.p.path}: node {node['name']} (from {module_of(node)}) reshapes "
                                       f"{a} to {b}, splitting a dimension that changes with batch or time into "
                                       "several; give the sizes from the tensor's own shape")
        return result

    def recurrent(self, node, op, outs):
        # lazy: Keras, loaded on first use (import cudnn_port stays light)
        from ..layers import FUSED_CLASSES

        args = self.args(node)
        x, hx = args["input"], args["hx"]
        names = [t["name"] for t in node["inputs"][2]["arg"]["as_tensors"]]
        fqns = [self.p.params.get(n, n) for n in names]
        module = fqns[0].rsplit(".", 1)[0] if "." in fqns[0] else ""
        if args["train"] and args["dropout"]:
            raise UnsupportedError(f"{self.p.path}: {module or 'the recurrent module'} runs with dropout in training "
                                   "mode; export the model after model.eval()")
        variable = buffer_name(module)
        spec = self.source.specs.get(variable)
        if spec is None:
            raise CudnnPortError(f"{self.p.path}: the {op} node reads parameters {short(fqns[0])}..., which are not "
                                 f"one recurrent module's")
        if spec.num_layers != args["num_layers"] or spec.bidirectional != bool(args["bidirectional"]):
            raise CudnnPortError(f"{self.p.path}: the {op} node of {module} says {args['num_layers']} layers, "
                                 f"bidirectional={args['bidirectional']}, its parameters {spec.describe()}")
        batch_first = bool(args["batch_first"])
        if not batch_first:
            x = self.aten("transpose", [x, 0, 1], f"{node['name']}_batch_major")
        hx = hx if isinstance(hx, list) else [hx]
        states = None
        if not all(isinstance(h, _Zeros) for h in hx):
            states = [self.aten("transpose", [h, 0, 1], f"{node['name']}_state_{k}") for k, h in enumerate(hx)]
        layer = self.layers.get(variable)
        if layer is None:
            layer = FUSED_CLASSES[op](spec.num_units, num_layers=spec.num_layers, bidirectional=spec.bidirectional,
                                      num_proj=spec.num_proj, return_sequences=True, return_state=True,
                                      name=self.unique(module or op))
            self.layers[variable] = layer
        results = layer(x, initial_state=states) if states is not None else layer(x)
        self.pending.append((lambda: layer.opaque_kernel, self.source.get(variable).astype("float32")))
        y = results[0] if batch_first else self.aten("transpose", [results[0], 0, 1], f"{node['name']}_time_major")
        finals = [self.aten("transpose", [s, 0, 1], f"{node['name']}_final_{k}") for k, s in enumerate(results[1:])]
        for name, value in zip(outs, [y] + finals):
            if name:
                self.values[name] = value


def translate(path: str, source: Optional[Any] = None) -> "Any":
    """The ``.pt2`` program at ``path`` as a built Keras Functional model with its weights (see the module
    docstring); ``source``: the file's :class:`~cudnn_port.readers.pytorch.PyTorchSource`, read here if None."""
    # lazy: Keras, loaded on first use (import cudnn_port stays light)
    import keras

    program = read_program(path)
    refuse_untranslated(program)  # before anything is built
    source = source if source is not None else PyTorchSource(path)
    t = _Translator(program, source)
    free = t.free_dims()
    inputs = []
    for name in program.inputs:
        sizes = program.sizes[name]
        shape = [None if f else s for s, f in zip(sizes, free[name])]
        tensor = keras.Input(shape=tuple(shape[1:]), batch_size=shape[0], dtype=program.dtypes[name], name=name)
        t.values[name] = tensor
        inputs.append(tensor)
    for node in program.nodes:
        t.node(node)
    outputs = []
    for arg in program.outputs:
        value = t.value(arg, {"name": "output"})
        if isinstance(value, _Zeros):
            value = t.zeros(value)
        if not isinstance(value, keras.KerasTensor):
            raise UnsupportedError(f"{path}: an output of the program ({short(json.dumps(arg), 40)}) does not depend "
                                   "on its inputs; leave constants out of the outputs")
        outputs.append(value)
    model = keras.Model(inputs, outputs, name="torch_program")
    for variable, value in t.pending:
        variable = variable() if callable(variable) else variable
        variable.assign(np.asarray(value, dtype=variable.dtype))
    return model


def axis_roles(path: str, model: Any) -> Dict[str, List[Optional[str]]]:
    """{input name, or ``output_N``: each dimension's role, ``"batch"``, ``"time"`` or None} of the program at
    ``path`` translated into ``model``: an input's time is the dimension of the length its recurrent nodes were
    exported at, its batch the other free one (an input read time-major by a ``batch_first=False`` layer is
    ``[time, batch, ...]``); an output's are the dimensions that change when the model runs on another batch size
    and on another length. What a whole-model ONNX names its dynamic dimensions by, and guards the batch of."""
    # lazy: Keras, loaded on first use (import cudnn_port stays light)
    import keras

    t = _Translator(read_program(path), None)
    free, (lengths, _) = t.free_dims(), t.exported_sizes()
    roles: Dict[str, List[Optional[str]]] = {}
    for name in t.p.inputs:
        sizes, symbolic = t.p.sizes[name], t.p.symbolic[name]
        marks: List[Optional[str]] = ["time" if f and s in lengths and not y else None
                                      for s, y, f in zip(sizes, symbolic, free[name])]
        rest = [i for i, f in enumerate(free[name]) if f and marks[i] is None]
        if rest:
            marks[rest[0]] = "batch"
        roles[name] = marks

    def run(batch: int, steps: int) -> List[Tuple[int, ...]]:
        feeds = []
        for tensor, name in zip(model.inputs, t.p.inputs):
            shape = [batch if r == "batch" else steps if r == "time" else (d or 1)
                     for r, d in zip(roles[name], tensor.shape)]
            feeds.append(np.zeros(shape, t.p.dtypes[name]))  # id 0 is in every table
        result = model(feeds[0] if len(feeds) == 1 else feeds, training=False)
        return [tuple(np.shape(y)) for y in keras.tree.flatten(result)]

    base, batched, timed = run(2, 3), run(5, 3), run(2, 7)
    for i, (a, b, c) in enumerate(zip(base, batched, timed)):
        roles[f"output_{i}"] = ["batch" if x != y else "time" if x != z else None for x, y, z in zip(a, b, c)]
    return roles


def _open_program(path: str, mode: Optional[str] = None) -> Any:
    """The program's whole model (:func:`translate`), as a Keras model source."""
    source = KerasModelSource(translate(path), os.path.abspath(path))
    source.format = PROGRAM_FORMAT if is_program(path) else SCRIPT_FORMAT
    return source


# before the stack reader (order 40), which reads a .pt2's recurrent modules alone
SOURCE = SourceType("torch_program", PROGRAM_FORMAT, "model", lambda path: os.path.isfile(path) and is_program(path),
                    _open_program, order=35, judge="cudnn_port.judging.torch_weights:judge_stack",
                    original="cudnn_port.judging.torch_weights:torch_row",
                    export="cudnn_port.roads.model:export_program_file", translated=True)
