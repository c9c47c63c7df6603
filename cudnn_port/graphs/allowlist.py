"""A model file's graph is data until it is checked: the op allow-list, read from the parsed protobuf before
TensorFlow loads or runs any of it (TensorFlow's SECURITY.md: "models are programs").

Every node of the main graph and of every library function (signatures, the init op, the saver's save and restore
functions, functions nothing calls) must be pure computation (:func:`.allowed_ops.pure_ops`), the saver's own file
ops inside the functions its ``saver_def`` names, a lookup table read from a file the loader binds (an asset), or
``tf.print`` to standard error. Anything else (files, network, queues, tfdbg, Python callbacks), a string constant
holding an address (``gs://``, ``s3://``, ``http(s)://``, ``grpc://``, ``file://``, ...) and an asset named outside
``assets/`` is a :class:`Finding`: one line, exit 2, nothing run, unless the caller passes ``trust_source=True``
(``--trust-source``), which runs it and says so once. Refused even then: a Python callback (``tf.py_function``,
whose code the file does not hold, so it cannot run from it), and a constant that declares far more values than it
stores (a memory bomb: 510 bytes declaring 2^29 floats), before anything allocates it.

    findings = saved_model_findings(proto)     # [] for every model TensorFlow and Keras write
    check_saved_model("exported/", proto)      # raises CudnnPortError naming the first finding
"""
import os
from typing import TYPE_CHECKING, Callable, Dict, Iterator, List, NamedTuple, Optional, Set, Tuple

from ..errors import CudnnPortError, short
from . import allowed_ops as ops

if TYPE_CHECKING:
    from tensorflow.core.framework import graph_pb2
    from tensorflow.core.protobuf import meta_graph_pb2, saved_model_pb2

SPLAT_LIMIT = 64 << 20  # a constant may declare this many bytes beyond what it stores (tf.zeros([H, G*H]) etc.)
TABLE_DATA = ("LookupTableImportV2", "LookupTableImport", "InitializeTableV2", "InitializeTable", "LookupTableInsertV2")
CALLBACKS = ("PyFunc", "PyFuncStateless", "EagerPyFunc")  # their Python code is not in the file: nothing to trust


class Finding(NamedTuple):
    """A node the allow-list refuses: ``function`` is "" for the main graph."""
    node: str
    op: str
    function: str
    why: str

    def words(self) -> str:
        return f"node {short(self.node)} ({self.op}) in {short(self.function) or 'the main graph'} {self.why}"


def _graphs(graph_def) -> Iterator[Tuple[str, list]]:
    """("" and the main graph's nodes), then (name, nodes) of each library function."""
    yield "", list(graph_def.node)
    for function in graph_def.library.function:
        yield function.signature.name, list(function.node_def)


def _calls(node, library) -> Set[str]:
    """The library functions ``node`` calls: its function-valued attributes, or its op when that is a function."""
    called = {node.op} & library
    for value in node.attr.values():
        called.update({value.func.name} if value.func.name else set())
        called.update(f.name for f in value.list.func)
    return called & library


def _reachable(roots, calls) -> Set[str]:
    seen, todo = set(), list(roots)
    while todo:
        name = todo.pop()
        if name not in seen:
            seen.add(name)
            todo.extend(calls.get(name, ()))
    return seen


def _saver_scope(meta) -> Tuple[Set[str], str]:
    """(main-graph node names the saver_def names, TF1's saver scope prefix such as "save/" or "")."""
    saver = meta.saver_def if meta is not None else None
    if saver is None or not saver.restore_op_name:
        return set(), ""
    names = {saver.restore_op_name.split(":")[0], saver.save_tensor_name.split(":")[0]}
    scope = saver.restore_op_name.rsplit("/", 1)[0] + "/" if "/" in saver.restore_op_name else ""
    return names, scope


def _tensors(node) -> Iterator:
    for value in node.attr.values():
        kind = value.WhichOneof("value")
        if kind == "tensor":
            yield value.tensor
        elif kind == "list":
            yield from value.list.tensor


def _literal_path(value: bytes) -> bool:
    """Whether a string constant names a place outside the model: an absolute path, a ``..`` step or an address."""
    text = value.strip().lower()
    return text.startswith((b"/", b"~", b"\\")) or b"../" in text or b"..\\" in text or \
        (len(text) > 2 and text[1:3] in (b":\\", b":/")) or any(s in text for s in ops.URL_SCHEMES)


def _producer(name: str) -> str:
    return name.lstrip("^").split(":")[0]


def graph_findings(graph_def: "graph_pb2.GraphDef",
                   meta: "Optional[meta_graph_pb2.MetaGraphDef]" = None) -> List[Finding]:
    """What the graph (a GraphDef; ``meta``: its SavedModel MetaGraphDef, for the saver, the assets and the object
    graph) would run beyond pure computation, in graph order."""
    library = {f.signature.name for f in graph_def.library.function}
    graphs = list(_graphs(graph_def))
    calls = {name: set().union(*[_calls(n, library) for n in nodes]) for name, nodes in graphs}
    saver_nodes, scope = _saver_scope(meta)
    main = graphs[0][1]
    saver_roots = {f for n in main if n.name in saver_nodes for f in _calls(n, library)}
    saver_functions = _reachable(saver_roots, calls)
    other_roots = {f for n in main if n.name not in saver_nodes for f in _calls(n, library)}
    other_roots |= library - saver_functions  # the object graph may call any function, not only the main graph
    saver_only = saver_functions - _reachable(other_roots, calls)
    assets = _asset_findings(meta) if meta is not None else []
    asset_tensors = {i.tensor_info.name.split(":")[0] for i in _assets(meta)}
    arguments = _arguments(graph_def)
    bound = _bound_kinds(meta, arguments)
    found = list(assets)
    for function, nodes in graphs:
        by_name = {n.name: n for n in nodes}
        args = arguments.get(function, [])
        in_saver = function in saver_only or (not function and bool(scope))
        for node in nodes:
            why = _why(node, function, in_saver and (function or node.name.startswith(scope) or
                                                     node.name in saver_nodes),
                       by_name, args, bound.get(function, {}), asset_tensors, library)
            if why:
                found.append(Finding(node.name, node.op, function, why))
    return found


def _why(node, function, saver_node, by_name, args, bound, asset_tensors, library) -> Optional[str]:
    """Why ``node`` is refused, or None."""
    for tensor in _tensors(node):
        for value in tensor.string_val:
            if _literal_path(value) and (saver_node or any(s in value.lower() for s in ops.URL_SCHEMES)) and \
                    not _table_data(node.name, by_name) and node.name not in asset_tensors:
                return f"holds {short(value.decode('utf-8', 'replace'), 50)!r}, a place outside the model"
    op = node.op
    if op in ops.pure_ops() or op in library:
        return None
    if op in ops.SAVER:
        return None if saver_node else "reads or writes a checkpoint outside the SavedModel's saver"
    if op in ops.PRINT:
        stream = node.attr["output_stream"].s.decode("utf-8", "replace") if "output_stream" in node.attr else "stderr"
        return None if stream in ops.PRINT_STREAMS else f"prints to {short(stream, 50)!r}"
    if op in ops.TABLE_FILE and len(node.input) > 1:
        return _file_name_source(node.input[1], function, by_name, args, bound, asset_tensors)
    return ops.why_refused(op)


def _table_data(name, by_name) -> bool:
    """Whether constant ``name`` only feeds lookup tables as keys or values (a vocabulary may hold any text)."""
    users = [n for n in by_name.values() if any(_producer(i) == name for i in n.input if not i.startswith("^"))]
    return bool(users) and all(n.op in TABLE_DATA for n in users)


def _file_name_source(name, function, by_name, args, bound, asset_tensors) -> Optional[str]:
    """None when the file name of a table initializer comes from outside the graph (an argument bound to an asset, a
    placeholder or variable the loader feeds); else why not."""
    for _ in range(32):
        node = by_name.get(_producer(name))
        if node is None or node.op not in ("Identity", "Const"):
            break
        if node.op == "Const":
            return None if node.name in asset_tensors else "reads a file whose name is written in the graph"
        name = node.input[0]
    arg = _producer(name)
    if arg in args and bound.get(args.index(arg), "asset") != "asset":
        return f"reads a file named by a captured {bound[args.index(arg)]}, not by an asset of the SavedModel"
    return None


def _arguments(graph_def) -> Dict[str, List[str]]:
    """{function: its argument names}."""
    return {f.signature.name: [a.name for a in f.signature.input_arg] for f in graph_def.library.function}


def _bound_kinds(meta, arguments) -> Dict[str, Dict[int, str]]:
    """{function: {argument index: kind of the object the loader binds it to}} for the object graph's concrete
    functions (their captures are their last arguments)."""
    if meta is None:
        return {}
    nodes, found = meta.object_graph_def.nodes, {}
    for name, concrete in meta.object_graph_def.concrete_functions.items():
        count = len(arguments.get(name, ()))
        first = count - len(concrete.bound_inputs)
        found[name] = {first + i: nodes[b].WhichOneof("kind") if 0 <= b < len(nodes) else "missing object"
                       for i, b in enumerate(concrete.bound_inputs)}
    return found


def _assets(meta) -> list:
    """The SavedModel's AssetFileDefs: TF2's asset_file_def, TF1's ``saved_model_assets`` collection."""
    if meta is None:
        return []
    # lazy: TensorFlow, loaded on first use (import cudnn_port stays light)
    from tensorflow.core.protobuf import meta_graph_pb2

    found = list(meta.asset_file_def)
    for packed in meta.collection_def["saved_model_assets"].any_list.value if "saved_model_assets" in \
            meta.collection_def else []:
        asset = meta_graph_pb2.AssetFileDef()
        if packed.Unpack(asset):
            found.append(asset)
    return found


def _asset_findings(meta) -> List[Finding]:
    """Assets named outside the SavedModel's assets/ folder (the loader joins the name to it)."""
    found = []
    for asset in _assets(meta):
        name = asset.filename
        if os.path.isabs(name) or ".." in name.replace("\\", "/").split("/") or _literal_path(name.encode()):
            found.append(Finding(asset.tensor_info.name, "asset", "", f"names the file {short(name, 50)!r} outside "
                                                                      "the SavedModel's assets/"))
    return found


def check_constants(graph_def: "graph_pb2.GraphDef", path: str) -> None:
    """Refuse a constant that declares far more bytes than it stores, before anything allocates it."""
    # lazy: TensorFlow, loaded on first use (import cudnn_port stays light)
    from tensorflow.python.framework import dtypes

    for function, nodes in _graphs(graph_def):
        for node in nodes:
            for tensor in _tensors(node):
                count = 1
                for dim in tensor.tensor_shape.dim:
                    count *= max(int(dim.size), 0)
                try:
                    size = dtypes.as_dtype(tensor.dtype).size if tensor.dtype != dtypes.string.as_datatype_enum else 32
                except (TypeError, ValueError):
                    size = 8
                stored = len(tensor.tensor_content) + sum(
                    sum(len(v) + 32 for v in values) if field.name == "string_val" else 8 * len(values)
                    for field, values in tensor.ListFields() if field.name.endswith("_val"))
                if count * size > stored + SPLAT_LIMIT:
                    shape = "x".join(str(d.size) for d in tensor.tensor_shape.dim)
                    raise CudnnPortError(
                        f"{path}: node {short(node.name)} ({node.op}) in {short(function) or 'the main graph'} "
                        f"declares a [{shape}] constant of {count * size / 2 ** 30:.3g} GiB but stores {stored} "
                        "bytes; refused before anything allocates it (a damaged or crafted model file)")


def check(path: str, findings: List[Finding], *, trust_source: bool = False,
          say: Optional[Callable[[str], None]] = None) -> None:
    """Raise one line naming the first finding; with ``trust_source``, say once what will run instead."""
    if not findings:
        return
    more = f" (+{len(findings) - 1} more: see cudnn-port inspect)" if len(findings) > 1 else ""
    callback = next((f for f in findings if f.op in CALLBACKS), None)
    if callback is not None:
        raise CudnnPortError(f"{path}: {callback.words()}, so it cannot run from the file; nothing was run; "
                             "replace it by TensorFlow ops and save the model again")
    if not trust_source:
        raise CudnnPortError(f"{path}: {findings[0].words()}{more}; nothing ran: only pure computation runs from "
                             "a model file; pass --trust-source to run it anyway")
    shown = "; ".join(f.words() for f in findings[:5]) + (" ..." if len(findings) > 5 else "")
    (say or (lambda message: None))(f"--trust-source: {path} runs {len(findings)} node(s) beyond pure computation: "
                                    f"{shown}")


def saved_model_findings(proto: "saved_model_pb2.SavedModel") -> List[Finding]:
    """:func:`graph_findings` of every MetaGraphDef of a parsed ``saved_model.pb``."""
    return [f for meta in proto.meta_graphs for f in graph_findings(meta.graph_def, meta)]


def check_saved_model(path: str, proto: "saved_model_pb2.SavedModel", *, trust_source: bool = False,
                      say: Optional[Callable[[str], None]] = None) -> List[Finding]:
    """The checks of the module docstring on SavedModel folder ``path`` (``proto``: its parsed saved_model.pb);
    returns the findings that ``trust_source`` let through."""
    for meta in proto.meta_graphs:
        check_constants(meta.graph_def, path)
    findings = saved_model_findings(proto)
    check(path, findings, trust_source=trust_source, say=say)
    return findings


def check_graph_def(path: str, graph_def: "graph_pb2.GraphDef", *, trust_source: bool = False,
                    say: Optional[Callable[[str], None]] = None) -> List[Finding]:
    """The same for a frozen GraphDef read from ``path``."""
    check_constants(graph_def, path)
    findings = graph_findings(graph_def)
    check(path, findings, trust_source=trust_source, say=say)
    return findings
