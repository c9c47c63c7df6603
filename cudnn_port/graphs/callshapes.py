"""The shapes at a function's nodes where the SavedModel does not record them, taken from its callers.

tf.keras 2.0-2.2 saved functions without the shapes of their arguments (no ``_input_shapes`` attribute, no
``_output_shapes`` on arguments or nodes), so shape inference over one function alone knows nothing of a cuDNN node's
inputs, and its ``params`` (built inside the function from ``kernel``, ``recurrent_kernel`` and ``bias``) have no
static size either. The sizes are known where the call starts: the signature's placeholders, and the variables
(``VarHandleOp``'s ``shape``) whose handles the calls pass down. This follows the calls from the main graph down to
the function, through ``PartitionedCall`` / ``StatefulPartitionedCall`` (nested), ``If`` / ``Case`` branches,
``While`` bodies and direct calls, and runs TensorFlow's own shape inference over each function on the way, each
argument given the shape its caller passes and each read of a variable argument the variable's shape (the graph's
own construction then sizes ``params``). Nothing is run: graphs are only imported. A function nothing calls that
shares ``api_implements`` with a called one (Grappler's GPU alternative of it) takes the called one's arguments.
"""
from typing import TYPE_CHECKING, Any, Dict, Iterable, List, Optional, Tuple

from ..deps import import_tf

if TYPE_CHECKING:
    from tensorflow.core.framework import node_def_pb2
    from tensorflow.core.protobuf import meta_graph_pb2, saved_model_pb2
    import tensorflow as tf

CALLS = {"PartitionedCall": (("f",), 0), "StatefulPartitionedCall": (("f",), 0),
         "If": (("then_branch", "else_branch"), 1), "StatelessIf": (("then_branch", "else_branch"), 1),
         "While": (("cond", "body"), 0), "StatelessWhile": (("cond", "body"), 0)}
CASES = ("Case", "StatelessCase")
Fact = Tuple[Any, Any]  # per argument: (its TensorShape or None, the variable's shape for a resource or None)


def _base(ref):
    return ref.lstrip("^").split(":")[0]


class CallShapes:
    """Shapes of the nodes of one meta graph's functions, argument facts propagated from the main graph down."""

    def __init__(self, meta: "meta_graph_pb2.MetaGraphDef") -> None:
        self.meta = meta
        self.functions = {f.signature.name: f for f in meta.graph_def.library.function}
        self.callers: Dict[str, List[Tuple[Optional[str], "node_def_pb2.NodeDef", int]]] = {}
        scopes = [(None, meta.graph_def.node)] + [(n, f.node_def) for n, f in self.functions.items()]
        for scope, nodes in scopes:
            for node in nodes:
                for callee, offset in self.callees(node):
                    self.callers.setdefault(callee, []).append((scope, node, offset))
        self.by_name = {None: {n.name: n for n in meta.graph_def.node}}
        self.by_name.update({name: {n.name: n for n in f.node_def} for name, f in self.functions.items()})
        self._facts: Dict[str, List[Fact]] = {}
        self._graphs: Dict[str, str] = {}
        self._base: Optional["tf.Graph"] = None

    def callees(self, node: "node_def_pb2.NodeDef") -> List[Tuple[str, int]]:
        """(function name, index of the node input that is its first argument) for each function ``node`` calls."""
        if node.op in CALLS:
            attrs, offset = CALLS[node.op]
            return [(node.attr[a].func.name, offset) for a in attrs if a in node.attr]
        if node.op in CASES:
            return [(f.name, 1) for f in node.attr["branches"].list.func]
        return [(node.op, 0)] if node.op in self.functions else []

    def twin(self, name: str) -> Optional[str]:
        """A called function with the same ``api_implements`` and argument types as uncalled function ``name``."""
        function = self.functions[name]
        if "api_implements" not in function.attr:
            return None
        key, types = function.attr["api_implements"].s, [a.type for a in function.signature.input_arg]
        return next((other for other, f in self.functions.items() if other in self.callers and other != name and
                     "api_implements" in f.attr and f.attr["api_implements"].s == key and
                     [a.type for a in f.signature.input_arg] == types), None)

    def facts(self, name: str, depth: int = 0) -> List[Fact]:
        """What is known of each argument of function ``name``: from its first caller that knows most."""
        if name in self._facts:
            return self._facts[name]
        args = self.functions[name].signature.input_arg
        best: List[Fact] = [(None, None)] * len(args)
        self._facts[name] = best  # a recursive call sees nothing known
        if depth > 64:
            return best
        sites = self.callers.get(name) or []
        twin = None if sites else self.twin(name)
        if twin:
            best = self.facts(twin, depth + 1)
        elif not sites:
            best = self._object_facts(name, len(args)) or best
        for scope, node, offset in sites:
            inputs = [i for i in node.input if not i.startswith("^")][offset:offset + len(args)]
            found = [self._input_fact(scope, node, offset + i, ref, depth) for i, ref in enumerate(inputs)]
            found += [(None, None)] * (len(args) - len(found))
            if _known(found) > _known(best):
                best = found
        self._facts[name] = best
        return best

    def _object_facts(self, name, count) -> Optional[List[Fact]]:
        """Facts of a function the object graph holds (a layer's call): its input signature's shapes, then its
        captured variables' shapes (``bound_inputs``, the last arguments)."""
        # lazy: TensorFlow, loaded on first use (import cudnn_port stays light)
        from tensorflow.python.saved_model import nested_structure_coder

        objects = self.meta.object_graph_def
        if name not in objects.concrete_functions:
            return None
        tf, saved = import_tf(), objects.concrete_functions[name]
        captures = [objects.nodes[i].variable.shape if objects.nodes[i].WhichOneof("kind") == "variable" else None
                    for i in saved.bound_inputs]
        try:
            structure = nested_structure_coder.decode_proto(saved.canonicalized_input_signature)
            specs = [s for s in tf.nest.flatten(structure, expand_composites=True) if isinstance(s, tf.TensorSpec)]
        except Exception:  # noqa: BLE001 (an older or unusual signature: the captures alone)
            specs = []
        specs = specs if len(specs) + len(captures) == count else [None] * (count - len(captures))
        return [(spec.shape if spec is not None else None, None) for spec in specs] + \
            [(None, tf.TensorShape(var) if var is not None else None) for var in captures]

    def _input_fact(self, scope, node, index, ref, depth) -> Fact:
        var = self._variable_shape(scope, ref, depth)
        if var is not None:
            return None, var
        if scope is None:
            source = self.by_name[None].get(_base(ref))
            shape = source.attr["shape"].shape if source is not None and source.op == "Placeholder" else None
            return (import_tf().TensorShape(shape) if shape is not None else None), None
        prefix = self.graph(scope, depth + 1)
        try:
            return self.base.get_operation_by_name(f"{prefix}/{node.name}").inputs[index].shape, None
        except (KeyError, IndexError, ValueError):
            return None, None

    def _variable_shape(self, scope, ref, depth):
        """The shape of the variable whose handle ``ref`` (in ``scope``) is, or None."""
        tf = import_tf()
        for _ in range(32):
            name = _base(ref)
            node = self.by_name[scope].get(name)
            if scope is not None and node is None:
                args = [a.name for a in self.functions[scope].signature.input_arg]
                return self.facts(scope, depth + 1)[args.index(name)][1] if name in args else None
            if node is None:
                return None
            if node.op == "VarHandleOp":
                return tf.TensorShape(node.attr["shape"].shape)
            if node.op != "Identity" or not node.input:
                return None
            ref = node.input[0]
        return None

    def graph(self, name: str, depth: int = 0) -> str:
        """The import prefix of function ``name`` in :attr:`base` (a tf.Graph holding the library), imported with its
        arguments shaped by :meth:`facts` and each read of a variable argument a placeholder of the variable's
        shape."""
        if name in self._graphs:
            return self._graphs[name]
        # lazy: TensorFlow, loaded on first use (import cudnn_port stays light)
        from tensorflow.python.framework.function_def_to_graph import function_def_to_graph_def

        tf = import_tf()
        function, facts = self.functions[name], self.facts(name, depth)
        with self.base.as_default():  # direct calls of library functions are looked up there
            graph_def, _ = function_def_to_graph_def(function, input_shapes=[shape for shape, _ in facts])
        variables = {a.name: var for a, (_, var) in zip(function.signature.input_arg, facts) if var is not None}
        nodes = {n.name: n for n in graph_def.node}
        for node in graph_def.node:
            node.attr.pop("_class", None)  # colocation with nodes a placeholder replaced: only shapes matter here
            source = nodes.get(_base(node.input[0])) if node.op == "ReadVariableOp" and node.input else None
            while source is not None and source.op == "Identity" and source.input:
                source = nodes.get(_base(source.input[0]))
            if source is not None and source.name in variables:
                dtype = node.attr["dtype"].type
                del node.input[:]
                node.attr.clear()
                node.op = "Placeholder"
                node.attr["dtype"].type = dtype
                node.attr["shape"].shape.CopyFrom(variables[source.name].as_proto())
        prefix = self._graphs[name] = f"f{len(self._graphs)}"
        del graph_def.library.function[:]
        with self.base.as_default():
            tf.compat.v1.import_graph_def(graph_def, name=prefix)
        return prefix

    @property
    def base(self) -> "tf.Graph":
        if self._base is None:  # lazy: TensorFlow, loaded on first use
            from tensorflow.core.framework import graph_pb2

            tf, library = import_tf(), graph_pb2.GraphDef()
            library.library.CopyFrom(self.meta.graph_def.library)
            library.versions.CopyFrom(self.meta.graph_def.versions)
            self._base = tf.Graph()
            with self._base.as_default():
                tf.compat.v1.import_graph_def(library, name="")
        return self._base

    def input_shapes(self, name: str, ops: Iterable[str]) -> Dict[str, list]:
        """{node name: [input shapes]} of the nodes of function ``name`` whose op is in ``ops``."""
        prefix = self.graph(name) + "/"
        return {op.name[len(prefix):]: [t.shape for t in op.inputs] for op in self.base.get_operations()
                if op.type in ops and op.name.startswith(prefix)}


def _known(facts) -> int:
    return sum(1 for shape, var in facts if var is not None or (shape is not None and shape.rank is not None))


def record_input_shapes(proto: "saved_model_pb2.SavedModel") -> int:
    """Give (in place) each function the ``_input_shapes`` attribute TensorFlow writes today and tf.keras 2.0-2.2 did
    not, from :meth:`CallShapes.facts` (unknown where nothing is known), so that loaders and tf2onnx's freezing see
    the shapes the calls pass. Returns how many functions got one."""
    tf, count = import_tf(), 0
    for meta in proto.meta_graphs:
        missing = [f for f in meta.graph_def.library.function if "_input_shapes" not in f.attr]
        if not missing:
            continue
        calls = CallShapes(meta)
        for function in missing:
            try:
                facts = calls.facts(function.signature.name)
            except Exception:  # noqa: BLE001 (shapes are a help: leave this one as it was)
                continue
            shapes = function.attr["_input_shapes"].list.shape
            for shape, _ in facts:
                shapes.add().CopyFrom((shape if shape is not None else tf.TensorShape(None)).as_proto())
            count += 1
    return count
