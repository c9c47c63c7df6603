"""Library functions nothing calls, and Grappler's per-device alternatives.

tf_keras (Keras 2) writes two implementations of each LSTM / GRU layer into a SavedModel's function library, even
on a CPU: the standard one, which the graph calls, and ``gpu_lstm_with_fallback`` / ``gpu_gru_with_fallback``
(``CudnnRNNV3``) with its gradient pair ``__forward_gpu_..._with_fallback`` /
``__inference___backward_gpu_..._with_fallback`` (``CudnnRNNBackpropV3``). No node calls the cuDNN ones: they share
the standard function's ``api_implements`` attribute, and Grappler's implementation selector swaps them in on a
GPU only. A model compiled and trained before ``model.save()`` carries them all.

- :func:`prune` drops what nothing can call, so the SavedModel runs its standard function everywhere (what it
  already does on a CPU) and holds no cuDNN op;
- :func:`.reach.gpu_selected` does what the selector does on a GPU, for ONNX: the cuDNN node becomes one fused
  ONNX LSTM / GRU node, where tf2onnx would turn the standard masked loop into a ``Loop``.
"""
from typing import TYPE_CHECKING, Any, Dict, List

from .nodes import is_cudnn

if TYPE_CHECKING:
    from tensorflow.core.framework import node_def_pb2
    from tensorflow.core.protobuf import saved_model_pb2

PAIRED_FUNCTIONS = ("forward_function_name", "backward_function_name")  # FunctionDef attrs naming a partner


def _function_refs(node):
    """Every NameAttrList of a NodeDef's attrs that names a function (``f``, ``body``, ``then_branch``, lists of
    functions, and functions nested in a function's own attrs)."""
    todo = list(node.attr.values())
    while todo:
        value = todo.pop()
        refs = ([value.func] if value.HasField("func") else []) + list(value.list.func)
        for ref in refs:
            yield ref
            todo += ref.attr.values()


def called_functions(node: "node_def_pb2.NodeDef") -> List[str]:
    """Names a NodeDef may call: its op and every function its attrs name."""
    return [node.op] + [ref.name for ref in _function_refs(node)]


def redirect(node: "node_def_pb2.NodeDef", names: Dict[str, str]) -> None:
    """Make ``node`` call ``names[f]`` wherever it called ``f``."""
    node.op = names.get(node.op, node.op)
    for ref in _function_refs(node):
        ref.name = names.get(ref.name, ref.name)


def _roots(meta):
    """What a SavedModel can call from outside its library: main-graph nodes (signatures, save and restore), the
    object graph's functions, registered gradients."""
    objects = meta.object_graph_def
    roots = [name for node in meta.graph_def.node for name in called_functions(node)] + list(objects.concrete_functions)
    for obj in objects.nodes:
        kind = obj.WhichOneof("kind")
        if kind == "function":
            roots += list(obj.function.concrete_functions)
        elif kind == "bare_concrete_function":
            roots.append(obj.bare_concrete_function.concrete_function_name)
    return roots + [g.gradient_func for g in meta.graph_def.library.registered_gradients]


def prune(proto: "saved_model_pb2.SavedModel") -> Dict[str, List[str]]:
    """Drop (in place) the library functions of ``proto`` that nothing can call: not reachable from
    :func:`_roots` through the nodes that call them, a kept function's gradient entry or its forward/backward
    partner. Functions reachable only by sharing an ``api_implements`` attribute with a kept one (Grappler's
    per-device alternatives) are dropped. Returns {dropped function name: sorted cuDNN ops it held}."""
    dropped = {}
    for meta in proto.meta_graphs:
        library = meta.graph_def.library
        functions = {f.signature.name: f for f in library.function}
        gradients = {g.function_name: g.gradient_func for g in library.gradient}
        kept, todo = set(), [r for r in _roots(meta) if r in functions]
        while todo:
            name = todo.pop()
            if name in kept:
                continue
            kept.add(name)
            function = functions[name]
            todo += [c for node in function.node_def for c in called_functions(node)]
            todo += [function.attr[a].s.decode() for a in PAIRED_FUNCTIONS if a in function.attr]
            todo += [gradients[name]] if name in gradients else []
            todo = [t for t in todo if t in functions and t not in kept]
        if len(kept) == len(functions):
            continue
        dropped.update({name: sorted({n.op for n in f.node_def if is_cudnn(n.op)})
                        for name, f in functions.items() if name not in kept})
        survivors = [f for f in library.function if f.signature.name in kept]
        grads = [g for g in library.gradient if g.function_name in kept and g.gradient_func in kept]
        del library.function[:]
        library.function.extend(survivors)
        del library.gradient[:]
        library.gradient.extend(grads)
    return dropped


def select_gpu_implementations(proto: "saved_model_pb2.SavedModel") -> Dict[str, str]:
    """Do (in place) what Grappler's implementation selector does on a GPU: every call of a function that has a
    GPU alternative (same ``api_implements``, ``api_preferred_device`` GPU, same argument types: tf_keras's
    ``gpu_lstm_with_fallback`` for its ``standard_lstm``) calls the alternative instead. Returns {replaced name:
    alternative name}."""
    swapped = {}
    for meta in proto.meta_graphs:
        library = meta.graph_def.library
        groups: Dict[bytes, Dict[str, List[Any]]] = {}  # {api_implements: {device: its FunctionDefs}}
        for f in library.function:
            if "api_implements" in f.attr and not any(a in f.attr for a in PAIRED_FUNCTIONS):
                device = f.attr["api_preferred_device"].s.decode().upper() if "api_preferred_device" in f.attr else ""
                groups.setdefault(f.attr["api_implements"].s, {}).setdefault(device, []).append(f)

        def types(f):
            return [a.type for a in f.signature.input_arg], [a.type for a in f.signature.output_arg]

        names = {}
        for group in groups.values():
            gpu = group.get("GPU", [])
            if len(gpu) == 1:
                names.update({f.signature.name: gpu[0].signature.name for device, members in group.items()
                              if device != "GPU" for f in members if types(f) == types(gpu[0])})
        for node_defs in [meta.graph_def.node] + [f.node_def for f in library.function]:
            for node in node_defs if names else ():
                redirect(node, names)
        swapped.update(names)
    return swapped


def drop_slot_references(proto: "saved_model_pb2.SavedModel") -> int:
    """Forget (in place) which variables are an optimizer's slots: clear every object's ``slot_variables``. An
    optimizer saved by tf.keras 2 (``OptimizerV2``, TF 2.0-2.10 and tf_keras's ``legacy`` ones) lists its slots
    there; TensorFlow without tf_keras restores that optimizer as a ``_UserObject`` and then calls its
    ``add_slot`` for each entry, which it lacks ("'_UserObject' object has no attribute 'add_slot'"). The slot
    variables stay in the object graph and the variables files, as plain variables; signatures never read them.
    Returns how many references were dropped."""
    count = 0
    for meta in proto.meta_graphs:
        for obj in meta.object_graph_def.nodes:
            count += len(obj.slot_variables)
            del obj.slot_variables[:]
    return count
