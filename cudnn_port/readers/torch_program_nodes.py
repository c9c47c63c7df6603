"""Each node of a :class:`~.torch_program_graph.Program`, in order, as layers of a Keras Functional model (the
translation :mod:`.torch_program` drives): an ``aten.lstm`` / ``gru`` / ``rnn_tanh`` / ``rnn_relu`` node one fused
layer of :mod:`cudnn_port.layers` holding its module's stack as the file's
:class:`~cudnn_port.readers.pytorch.PyTorchSource` reads it, ``embedding`` and ``linear`` of parameters Keras
layers, every other supported op one :class:`~cudnn_port.aten_layers.AtenOp`, and an op on parameters alone folded
to an array once. The weights are assigned once the model is built (``pending``).
"""
import json
import re
from dataclasses import dataclass
from typing import Any, Dict, List, Optional, Tuple

import numpy as np

from ..deps import import_tf
from ..errors import CudnnPortError, UnsupportedError, short
from ..source import buffer_name
from .torch_program_dims import Sym, reshape_size
from .torch_program_graph import PASSED, RECURRENT, SIZE_OPS, Program, module_of, module_path, op_name

SAME = {"contiguous": "identity", "clone": "identity", "alias": "identity", "detach": "identity",
        "lift_fresh_copy": "identity", "_unsafe_view": "reshape", "view": "reshape", "reshape": "reshape",
        "_softmax": "softmax", "_log_softmax": "log_softmax", "true_divide": "div", "mm": "matmul",
        "bmm": "matmul"}


@dataclass
class Zeros:
    """A zeros tensor not made yet (a recurrent node's default state, which the fused layer makes itself)."""
    size: List[Any]
    node: Dict[str, Any]


class Translator:
    """Translates a program's nodes in order (:meth:`node`): ``values`` maps each tensor name to its Keras tensor,
    array or :class:`~.torch_program_dims.Sym`; ``pending`` holds the (variable, value) pairs assigned once the model
    is built."""

    def __init__(self, program: Program, source: Any):
        self.p, self.source = program, source
        self.values: Dict[str, Any] = {}
        self.layers: Dict[str, Any] = {}
        self.names: Dict[str, int] = {}
        self.pending: List[Tuple[Any, Any]] = []  # (variable, value) set once the model is built

    # ---- arguments ----------------------------------------------------------------------------------------------
    def args(self, node: Dict[str, Any]) -> Dict[str, Any]:
        out = {}
        for i, inp in enumerate(node.get("inputs", [])):
            out[inp.get("name") or str(i)] = self.value(inp["arg"], node)
        return out

    def value(self, arg: Optional[Dict[str, Any]], node: Dict[str, Any]) -> Any:
        kind: str
        v: Any
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

    def sym(self, v: Dict[str, Any]) -> Any:
        if "as_int" in v:
            return v["as_int"]
        found = self.values.get(v.get("as_name", ""))
        if not isinstance(found, Sym):
            raise UnsupportedError(f"{self.p.path}: a size computed as {short(json.dumps(v), 40)}, which is not "
                                   "translated")
        return found

    def param(self, name: str, node: Dict[str, Any]) -> np.ndarray:
        if name in self.p.params:
            return np.asarray(self.p.weights[self.p.params[name]])
        raise CudnnPortError(f"{self.p.path}: node {node.get('name')} reads {name}, which the graph never defines")

    # ---- building blocks ----------------------------------------------------------------------------------------
    def unique(self, base: str) -> str:
        base = re.sub(r"[^A-Za-z0-9_]", "_", base) or "op"
        n = self.names.get(base, 0)
        self.names[base] = n + 1
        return base if n == 0 else f"{base}_{n}"

    def aten(self, op: str, args: List[Any], name: str) -> Any:
        """An :class:`AtenOp` over ``args`` (values: Keras tensors, arrays, Sym, literals, lists); folded to an
        array where no Keras tensor is among them."""
        # lazy: Keras, loaded on first use (import cudnn_port stays light)
        import keras

        from ..aten_layers import AtenOp, run_op

        tensors: List[Any] = []
        constants: List[Any] = []

        def enc(a):
            if isinstance(a, Zeros):
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
            if isinstance(a, Sym):
                dims = {"dims": [[enc(self.values[n])["t"], axis] for n, axis in a.refs]}
                return dims if a.scale == 1 else {**dims, "scale": a.scale}
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

    def zeros(self, z: Zeros) -> Any:
        return self.aten("zeros", [z.size], z.node["name"])

    # ---- nodes --------------------------------------------------------------------------------------------------
    def node(self, node: Dict[str, Any]) -> None:
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
            self.values[sym_name] = Sym([(tensor, args[1])], self.p.sizes[tensor][args[1]])
            return
        if target in SIZE_OPS:  # a product of sizes: a number torch specialized (the exported length) kept as one
            a, b = (x if isinstance(x, Sym) else Sym([], x, x) for x in args)
            self.values[node["outputs"][0]["as_sym_int"]["as_name"]] = Sym(a.refs + b.refs, a.hint * b.hint,
                                                                            a.scale * b.scale)
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

    def translate(self, op: str, a: List[Any], node: Dict[str, Any]) -> Any:
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
            if op == "zeros_like":
                return self.aten("mul", [a[0], 0.0], name)
            return Zeros(a[0] if op == "zeros" else a[1], node)
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
            return self.aten("reshape", [a[0], reshape_size(self.p, node, a[0], a[1])], name)
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
    def recurrent(self, node: Dict[str, Any], op: str, outs: List[Optional[str]]) -> None:
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
        if not all(isinstance(h, Zeros) for h in hx):
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
