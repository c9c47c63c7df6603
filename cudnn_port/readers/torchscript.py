"""A TorchScript file (``torch.jit.trace(...).save`` / ``torch.jit.script(...).save``) as a whole program: its
serialized code (``code/__torch__/...py``, TorchScript's Python subset) parsed with :mod:`ast` as data, never
compiled, imported or run, and its ``data.pkl`` read by cudnn-port's restricted unpickler, into the graph form of a
``torch.export`` program (:mod:`.torch_program` translates it; :mod:`cudnn_port.judging.torch_program` judges it
with PyTorch's kernels).

What is read: the root module's ``forward`` as a straight line of assignments, with each ``(self.child).forward(...)``
inlined (the child's class from its ``__torch__.*`` name in data.pkl, its code from the file that name spells),
``torch.<op>(...)`` / ``ops.aten.<op>(...)`` calls of the ops in :data:`SCHEMAS` as ATen nodes, ``torch.size`` as a
size read when the model runs, ``ops.prim.NumToTensor`` / ``int`` around sizes, and parameters as ``self.<name>``.
A trace is such a line. Anything else (``if``, ``for``, ``while``, a subscript, a call of another function: what
``torch.jit.script`` writes for ``nn.LSTM`` itself) is refused in one line naming the construct, the file inside the
zip and its line; the file's stacks still convert (:func:`cudnn_port.roads.script.export_script_file`).

Sizes: the code records none, so each input is given a shape from what it feeds (an ``aten.embedding``'s indices:
``[batch, time]`` int64; a recurrent node's input: ``[batch, time, input_size]`` or time-major, float32) at a batch
and a length that no number written in the code equals (:mod:`.torchscript_shapes`), and every tensor's size follows
from them. A number a trace wrote where the model read a size (``view(x, [3, 7, 12])``: a trace records
``x.size(1)`` as a number when Python arithmetic used it) is baked: the translation keeps it, so the model takes
only that size, and the shapes refuse it where it disagrees with the length chosen.
"""
import ast
import zipfile
from typing import Any, Dict, List, NoReturn, Optional, Tuple

import numpy as np

from ..errors import CudnnPortError, UnsupportedError, short
from .torch_files import read_torch_file, zip_names
from .torch_pickle import Inert
from .torchscript_shapes import give_sizes
from .torchscript_ops import CONSTRUCTS, SCHEMAS, NotStraight, SizeRef, TensorRef, arg, dotted_name, keyword
from .zip_guard import check_members

MAX_CODE = 4 << 20  # bytes of one code file parsed; a model's code is kilobytes
MAX_NODES = 20000


def is_script(path: str) -> bool:
    """Whether ``path`` is a TorchScript zip (``code/`` beside ``data.pkl``)."""
    names = zip_names(path)
    return any("/code/" in n and n.endswith(".py") for n in names) and any(n.endswith("/data.pkl") for n in names)


class _Mod:
    """A module of data.pkl (an :class:`Inert` ``__torch__.*`` object) at its path in the model."""

    def __init__(self, obj: Inert, fqn: str):
        self.obj, self.fqn = obj, fqn


class _Function:
    """A function of the code (``__torch__.torch.nn.functional.embedding``) bound to a name."""

    def __init__(self, name: str):
        self.name = name


class _Reader:
    """The straight line of ATen nodes the root module's ``forward`` runs, read from the code as data."""

    def __init__(self, path: str, z: zipfile.ZipFile, root: Inert):
        self.path, self.z = path, z
        pkl = next(n for n in z.namelist() if n.endswith("/data.pkl") and n.count("/") == 1)
        self.base = pkl[:-len("data.pkl")]
        self.trees: Dict[str, ast.Module] = {}
        self.nodes: List[Dict[str, Any]] = []
        self.params: Dict[str, str] = {}
        self.weights: Dict[str, np.ndarray] = {}
        self.root = root
        self.count = 0
        self.stack = ""  # the nn_module_stack of the module being read ("lstm,lstm,LSTM")

    def fresh(self, base: str) -> str:
        self.count += 1
        if self.count > MAX_NODES:
            raise UnsupportedError(f"{self.path}: the code runs over {MAX_NODES} ops; not read as a whole model")
        return f"{base}_{self.count}"

    def refuse(self, member: str, node: Optional[ast.AST], what: str) -> NoReturn:
        raise NotStraight(f"{self.path}: {member[len(self.base):]}:{getattr(node, 'lineno', '?')} holds {what}; "
                          "the whole model is read only as a straight line of ops, so its recurrent stacks convert "
                          "alone (save a torch.jit.trace of the model, or a torch.export .pt2, to convert it whole)")

    def code(self, qualname: str, function: bool = False) -> Tuple[str, Any]:
        """(the zip member, the class definition) of the TorchScript class ``qualname`` (``__torch__.a.b.C``);
        ``function``: (the member, its parsed module) of the code module ``qualname`` names."""
        module, _, name = qualname.rpartition(".")
        if not module.startswith("__torch__") or not all(p.isidentifier() for p in module.split(".")):
            raise CudnnPortError(f"{self.path}: data.pkl names a module of class {short(qualname)}, which is not "
                                 "TorchScript's; save the model again with torch.jit.save")
        member = self.base + "code/" + module.replace(".", "/") + ".py"
        if member not in self.trees:  # code that cannot be read leaves the stacks, which data.pkl holds
            if member not in self.z.namelist():
                raise NotStraight(f"{self.path}: data.pkl names {short(qualname)}, whose code {member} is not in the "
                                  "zip; the whole model is not read, its recurrent stacks convert alone")
            info = self.z.getinfo(member)
            if info.file_size > MAX_CODE:
                raise NotStraight(f"{self.path}: {member} is {info.file_size} bytes of code, over {MAX_CODE}; the "
                                  "whole model is not read, its recurrent stacks convert alone")
            try:
                self.trees[member] = ast.parse(self.z.read(member).decode("utf-8"), filename=member)
            except (SyntaxError, UnicodeDecodeError, ValueError) as e:
                raise NotStraight(f"{self.path}: {member} does not parse as TorchScript's Python ({type(e).__name__}: "
                                  f"{short(str(e), 60)}); the whole model is not read, its recurrent stacks convert "
                                  "alone") from None
        if function:
            return member, self.trees[member]
        found = next((c for c in self.trees[member].body if isinstance(c, ast.ClassDef) and c.name == name), None)
        if found is None:
            raise CudnnPortError(f"{self.path}: {member} defines no class {name}; save the model again")
        return member, found

    def forward(self, mod: Any, args: List[Any], depth: int = 0, method: str = "forward") -> Any:
        """What ``method`` of module ``mod`` returns on ``args``, its nodes appended (``mod`` None: ``method`` is a
        function ``__torch__.<module>.<name>`` of the code)."""
        if depth > 64:
            raise UnsupportedError(f"{self.path}: calls nest over 64 deep; not read as a whole model")
        if mod is None:
            module, _, name = method.rpartition(".")
            member, tree = self.code(f"{module}.", function=True)
            found = [f for f in tree.body if isinstance(f, ast.FunctionDef) and f.name == name]
        else:
            member, tree = self.code(mod.obj.cls.qualname)
            found = [f for f in tree.body if isinstance(f, ast.FunctionDef) and f.name == method]
        if not found:
            self.refuse(member, tree, f"no function {method}")
        fn = found[0]
        names = [a.arg for a in fn.args.args]
        given = ([mod] if mod is not None else []) + list(args)
        if len(names) != len(given) or fn.args.vararg or fn.args.kwarg or fn.args.kwonlyargs:
            self.refuse(member, fn, f"a function of {len(names)} arguments called with {len(given)}")
        env = dict(zip(names, given))
        outer = self.stack
        if mod is not None:  # a function of the code runs in its caller's module
            self.stack = f"{mod.fqn},{mod.fqn},{mod.obj.cls.name}" if mod.fqn else ""
        try:
            return self.statements(fn, env, member, depth)
        finally:
            self.stack = outer

    def statements(self, fn: ast.FunctionDef, env: Dict[str, Any], member: str, depth: int) -> Any:
        for stmt in fn.body:  # control flow of this function is named before anything it calls is read
            if not isinstance(stmt, (ast.Assign, ast.Return, ast.Expr)):
                self.refuse(member, stmt, CONSTRUCTS.get(type(stmt).__name__, f"a statement {type(stmt).__name__}"))
        for stmt in fn.body:
            if isinstance(stmt, ast.Return):
                return self.expr(stmt.value, env, member, depth)
            if isinstance(stmt, ast.Expr) and isinstance(stmt.value, ast.Constant):
                continue  # a docstring
            if not isinstance(stmt, ast.Assign) or len(stmt.targets) != 1:
                self.refuse(member, stmt, CONSTRUCTS.get(type(stmt).__name__, f"a statement {type(stmt).__name__}"))
            target = stmt.targets[0]
            if isinstance(target, ast.Name):
                env[target.id] = self.expr(stmt.value, env, member, depth)
            elif isinstance(target, ast.Tuple) and all(isinstance(t, ast.Name) for t in target.elts):
                value = self.expr(stmt.value, env, member, depth, outputs=len(target.elts))
                if not isinstance(value, list) or len(value) != len(target.elts):
                    self.refuse(member, stmt, "an unpacking of a value that is not that many tensors")
                env.update({t.id: v for t, v in zip(target.elts, value) if isinstance(t, ast.Name)})
            else:
                self.refuse(member, stmt, "an assignment to something other than names")
        self.refuse(member, fn, "a forward that returns nothing")

    def expr(self, node: Optional[ast.AST], env: Dict[str, Any], member: str, depth: int, outputs: int = 1) -> Any:
        if isinstance(node, ast.Name):
            if node.id not in env:
                self.refuse(member, node, f"a read of {node.id}, which is never assigned")
            return env[node.id]
        if isinstance(node, ast.Constant):
            return node.value
        if isinstance(node, (ast.List, ast.Tuple)):
            return [self.expr(e, env, member, depth) for e in node.elts]
        if isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.USub):
            value = self.expr(node.operand, env, member, depth)
            if isinstance(value, (int, float)) and not isinstance(value, bool):
                return -value
        if isinstance(node, ast.Attribute):
            if dotted_name(node).startswith("__torch__."):  # a function of the code, named to be called later
                return _Function(dotted_name(node))
            return self.attribute(self.expr(node.value, env, member, depth), node, member)
        if isinstance(node, ast.Call):
            return self.call(node, env, member, depth, outputs)
        self.refuse(member, node, CONSTRUCTS.get(type(node).__name__, f"an expression {type(node).__name__}"))

    def attribute(self, base: Any, node: ast.Attribute, member: str) -> Any:
        if not isinstance(base, _Mod):
            self.refuse(member, node, f"a read of attribute {node.attr} of something that is not a module")
        value = base.obj.attrs.get(node.attr)
        fqn = f"{base.fqn}.{node.attr}" if base.fqn else node.attr
        if isinstance(value, Inert):
            return _Mod(value, fqn)
        if isinstance(value, np.ndarray):
            placeholder = "p_" + fqn.replace(".", "_")
            self.params[placeholder], self.weights[fqn] = fqn, value
            return TensorRef(placeholder)
        if value is None or isinstance(value, (bool, int, float)):
            return value
        self.refuse(member, node, f"a read of self.{node.attr}, which data.pkl does not hold as a tensor, a "
                    "module or a number")

    def call(self, node: ast.Call, env: Dict[str, Any], member: str, depth: int, outputs: int) -> Any:
        func = node.func
        dotted = dotted_name(func)
        if isinstance(func, ast.Name) and isinstance(env.get(func.id), _Function):
            dotted = env[func.id].name
        if isinstance(func, ast.Attribute) and not dotted.startswith(("torch.", "ops.", "__torch__.")):
            child = self.expr(func.value, env, member, depth)
            if not isinstance(child, _Mod) or node.keywords:
                self.refuse(member, node, f"a call of {func.attr} on something that is not a module")
            return self.forward(child, [self.expr(a, env, member, depth) for a in node.args], depth + 1, func.attr)
        if dotted.startswith("__torch__.") and not node.keywords:  # a function of the code (torch.nn.functional's)
            return self.forward(None, [self.expr(a, env, member, depth) for a in node.args], depth + 1, dotted)
        args = [self.expr(a, env, member, depth) for a in node.args]
        kwargs = {k.arg: self.expr(k.value, env, member, depth) for k in node.keywords}
        if dotted in ("ops.prim.NumToTensor", "int", "float") and len(args) == 1:
            return args[0]  # a size as a tensor and back: the same size
        if dotted == "torch.device":
            return {"as_device": {"type": "cpu"}}
        op = dotted.split(".")[-1] if dotted.startswith(("torch.", "ops.aten.")) and dotted.count(".") == \
            (1 if dotted.startswith("torch.") else 2) else None
        if op == "size" and len(args) == 2 and isinstance(args[0], TensorRef) and isinstance(args[1], int):
            name = self.fresh("sym_size")
            self.nodes.append({"name": name, "target": "torch.ops.aten.sym_size.int", "inputs": [
                {"name": "self", "arg": arg(args[0]), "kind": 1},
                {"name": "dim", "arg": {"as_int": args[1]}, "kind": 1}],
                "outputs": [{"as_sym_int": {"as_name": name}}]})
            return SizeRef(name)
        if op not in SCHEMAS:
            self.refuse(member, node, f"a call of {dotted or 'a computed function'}, which has no translation (docs/"
                        "sources.md lists the ops that have one)")
        overload, spelled = SCHEMAS[op]
        names = spelled.split()
        if op in ("add", "sub", "mul", "div") and len(args) > 1 and not isinstance(args[1], TensorRef):
            overload = "Scalar"
        if len(args) > len(names):
            self.refuse(member, node, f"a call of {dotted} with {len(args)} arguments")
        inputs = [{"name": n, "arg": arg(a), "kind": 1} for n, a in zip(names, args)]
        for key, value in kwargs.items():
            inputs.append({"name": key, "arg": keyword(key, value, self.path), "kind": 2})
        name = self.fresh(op)
        outs = [TensorRef(name if k == 0 else f"{name}_{k}") for k in range(outputs)]
        self.nodes.append({"name": name, "target": f"torch.ops.aten.{op}.{overload}", "inputs": inputs,
                           "outputs": [{"as_tensor": {"name": t.name}} for t in outs],
                           "metadata": {"nn_module_stack": self.stack}})
        return outs if outputs > 1 else outs[0]


def read_script(path: str) -> Tuple[Dict[str, Any], Dict[str, np.ndarray]]:
    """(the TorchScript file at ``path`` as a ``torch.export`` graph module: ``graph`` with ``nodes`` and
    ``tensor_values``, ``signature``; {parameter FQN: array}). A construct that is not a straight line raises
    :class:`NotStraight`; a damaged file is refused in one line."""
    try:
        with zipfile.ZipFile(path) as z:
            check_members(z, path, "a TorchScript archive holds one per tensor")
            root = read_torch_file(path).root
            if not isinstance(root, Inert):
                raise CudnnPortError(f"{path}: data.pkl holds no TorchScript module; save it with torch.jit.save")
            reader = _Reader(path, z, root)
            member, cls = reader.code(root.cls.qualname)
            fn = next((f for f in cls.body if isinstance(f, ast.FunctionDef) and f.name == "forward"), None)
            if fn is None:
                reader.refuse(member, cls, f"class {cls.name} with no forward")
            inputs = [a.arg for a in fn.args.args[1:]]
            result = reader.forward(_Mod(root, ""), [TensorRef(n) for n in inputs])
    except (CudnnPortError, NotStraight):
        raise
    except (OSError, zipfile.BadZipFile, KeyError, ValueError, TypeError, SyntaxError, UnicodeDecodeError,
            RecursionError, MemoryError, StopIteration) as e:
        raise CudnnPortError(f"cannot read {path} as a TorchScript program ({type(e).__name__}: "
                             f"{short(str(e), 80)}); save it again with torch.jit.save") from None
    results = result if isinstance(result, list) else [result]
    if not results or not all(isinstance(r, TensorRef) for r in results):
        raise UnsupportedError(f"{path}: the model's forward returns something other than tensors")
    signature = {"input_specs": [{"user_input": {"arg": {"as_tensor": {"name": n}}}} for n in inputs] +
                 [{"parameter": {"arg": {"name": p}, "parameter_name": f}} for p, f in reader.params.items()],
                 "output_specs": [{"user_output": {"arg": {"as_tensor": {"name": r.name}}}} for r in results]}
    graph = {"nodes": reader.nodes, "tensor_values": {}}
    give_sizes(path, graph, signature, reader.weights)
    return {"graph": graph, "signature": signature}, reader.weights

