"""What a whole graph accepts, and why a run of it failed, for verify's whole-model rows.

- :func:`token_vocabularies`: the inputs of a signature that end up as the indices of a ``Gather`` /
  ``GatherV2`` / ``ResourceGather`` (an Embedding, ``tf.nn.embedding_lookup``), through casts, reshapes and
  function calls, with the number of rows of the table they index: such inputs take integer ids in
  ``[0, vocab)`` whatever dtype they are declared with (a seq2seq model's float32 token inputs).
- :func:`masking_values`: the float inputs of a signature that a comparison with a scalar constant reads (a
  ``Masking`` layer's ``not_equal(x, mask_value)``), with that constant: the padding value the graph itself defines.
- :func:`could_not_run`: a report row for a judge or artifact that raised, with the reason in one line
  (TensorFlow's detail and node, onnxruntime's status message and node), marked as not run.
- :func:`sentences` / :func:`text_inputs`: what a string input gets: English sentences of a few words (a raw-text
  model's TextVectorization then finds words in its vocabulary; empty strings would test padding only).
"""
import re
from typing import TYPE_CHECKING, Any, Dict, List, Optional, Sequence, Tuple

import numpy as np

from ..deps import import_tf

if TYPE_CHECKING:
    import tensorflow as tf

CALLS = ("PartitionedCall", "StatefulPartitionedCall")
PASS_THROUGH = ("Cast", "Identity", "IdentityN", "Reshape", "ExpandDims", "Squeeze", "StridedSlice", "Slice",
                "Transpose", "Floor", "Round", "Rint", "Ceil", "StopGradient", "Snapshot", "EnsureShape")
GATHERS = ("Gather", "GatherV2", "ResourceGather")
# Keras 3's take (an Embedding's lookup) wraps negative ids first, where(i < 0, i + rows, i): ids pass through the
# add, and through a select as one of its values (not as its condition)
INDEX_WRAP = ("AddV2", "Add", "SelectV2", "Select")


def _base(ref):
    """Node (or function argument) name of an input reference: ``n:out:0`` / ``n:0`` / ``^n`` -> ``n``."""
    return ref.lstrip("^").split(":")[0]


class _Scopes:
    """The graph of a concrete function and its library, walked across function calls."""

    capture_rows: Dict[str, int]  # set by each caller: {captured variable's op name: its first dimension}

    def __init__(self, graph_def):
        self.nodes = {None: list(graph_def.node)}
        self.args = {None: []}
        for f in graph_def.library.function:
            self.nodes[f.signature.name] = list(f.node_def)
            self.args[f.signature.name] = [a.name for a in f.signature.input_arg]
        self.by_name = {scope: {n.name: n for n in nodes} for scope, nodes in self.nodes.items()}

    def callee(self, node) -> Optional[str]:
        if node.op in CALLS:
            return node.attr["f"].func.name
        return node.op if node.op in self.nodes else None

    def callers(self, function) -> List[Tuple[Optional[str], Any]]:
        """(scope, call node) pairs that call ``function``."""
        return [(scope, n) for scope, nodes in self.nodes.items() for n in nodes if self.callee(n) == function]

    def table_rows(self, scope, ref, depth=0) -> Optional[int]:
        """Rows (dimension 0) of the table that tensor ``ref`` of ``scope`` holds, followed back through
        ReadVariableOp, Identity and function arguments to a captured variable or a constant; None if unknown."""
        name = _base(ref)
        node = self.by_name[scope].get(name)
        if depth > 32:
            return None
        if node is None and name in self.args.get(scope, []):
            index = self.args[scope].index(name)
            for caller_scope, call in self.callers(scope):
                inputs = [i for i in call.input if not i.startswith("^")]
                found = self.table_rows(caller_scope, inputs[index], depth + 1) if index < len(inputs) else None
                if found:
                    return found
            return None
        if node is None:
            return None
        if node.op in ("ReadVariableOp", "Identity") and node.input:
            return self.table_rows(scope, node.input[0], depth + 1)
        if node.op == "Const":
            dims = node.attr["value"].tensor.tensor_shape.dim
            return int(dims[0].size) if dims else None
        if node.op in ("VarHandleOp", "Placeholder"):
            for key in ("shape", "_handle_shapes"):
                if key in node.attr and node.attr[key].WhichOneof("value") == "shape":
                    dims = node.attr[key].shape.dim
                    if dims and dims[0].size > 0:
                        return int(dims[0].size)
        return self.capture_rows.get(name) if scope is None else None


def token_vocabularies(function: "tf.types.experimental.ConcreteFunction") -> dict:
    """{input name: vocab} for each input of ConcreteFunction ``function`` (a loaded signature) that reaches the
    indices of a gather; vocab is the indexed table's first dimension, or None where it cannot be told."""
    # lazy: TensorFlow, loaded on first use (import cudnn_port stays light)
    from tensorflow.python.ops import handle_data_util

    graph_def = function.graph.as_graph_def()
    scopes = _Scopes(graph_def)
    scopes.capture_rows = {}
    for _, internal in function.graph.captures:
        try:
            data = handle_data_util.get_resource_handle_data(internal)
            dims = data.shape_and_type[0].shape.dim if data.shape_and_type else []
        except Exception:  # noqa: BLE001 (no handle data: not a variable)
            dims = []
        if dims and dims[0].size > 0:
            scopes.capture_rows[internal.op.name] = int(dims[0].size)
    found, placeholders = {}, {t.op.name for t in function.inputs}
    for name in function.structured_input_signature[1]:
        if name not in placeholders:
            continue
        vocab = _walk(scopes, name)
        if vocab is not False:
            found[name] = vocab
    return found


def _passes(op, hits):
    """Whether an ``op`` whose inputs ``hits`` carry ids carries them on (a select's condition alone does not)."""
    return op in PASS_THROUGH or op in INDEX_WRAP and not (op.startswith("Select") and hits == [0])


def _walk(scopes, placeholder, stop=None):
    """Follow ``placeholder`` forward (PASS_THROUGH ops and calls) to the first node where ``stop(scopes, scope,
    node, inputs, hits)`` is not False and return that (by default: the rows of the first table it indexes, None
    if a gather's table size is unknown); False if it reaches none."""
    stop = stop or _gathered
    tainted, todo = {(None, placeholder)}, [None]
    while todo:
        scope = todo.pop()
        changed = True
        while changed:
            changed = False
            for node in scopes.nodes[scope]:
                inputs = [i for i in node.input if not i.startswith("^")]
                hits = [k for k, ref in enumerate(inputs) if (scope, _base(ref)) in tainted]
                if not hits:
                    continue
                found = stop(scopes, scope, node, inputs, hits)
                if found is not False:
                    return found
                callee = scopes.callee(node)
                if callee is not None:
                    for k in hits:
                        arg = (callee, scopes.args[callee][k]) if k < len(scopes.args[callee]) else None
                        if arg and arg not in tainted:
                            tainted.add(arg)
                            todo.append(callee)
                elif _passes(node.op, hits) and (scope, node.name) not in tainted:
                    tainted.add((scope, node.name))
                    changed = True
    return False


def _gathered(scopes, scope, node, inputs, hits):
    """The rows of the table a gather indexes by the followed tensor; False for any other node."""
    if node.op in GATHERS and 1 in hits:
        return scopes.table_rows(scope, inputs[0])
    return False


COMPARED = ("NotEqual", "Equal")  # a Masking layer: any(x != mask_value, axis=-1)


def _compared_with(scopes, scope, node, inputs, hits):
    """The scalar constant a (Not)Equal compares the followed tensor with (a Masking layer's ``mask_value``), as a
    float; False for any other node."""
    if node.op not in COMPARED or len(inputs) != 2 or len(hits) != 1:
        return False
    const = scopes.by_name[scope].get(_base(inputs[1 - hits[0]]))
    if const is None or const.op != "Const":
        return False
    # lazy: TensorFlow, loaded on first use (import cudnn_port stays light)
    from tensorflow.python.framework import tensor_util

    value = np.asarray(tensor_util.MakeNdarray(const.attr["value"].tensor))
    return float(value.reshape(-1)[0]) if value.size == 1 and value.dtype.kind == "f" else False


def masking_values(function: "tf.types.experimental.ConcreteFunction") -> Dict[str, float]:
    """{input name: value} for each float input of ConcreteFunction ``function`` (a loaded signature) that a
    comparison with a scalar constant reads (a ``Masking`` layer's ``not_equal(x, mask_value)``), through casts,
    reshapes and function calls: the value is the graph's own, so a step of it is padding to the model."""
    graph_def = function.graph.as_graph_def()
    scopes = _Scopes(graph_def)
    scopes.capture_rows = {}
    placeholders = {t.op.name for t in function.inputs}
    found = {}
    for name, spec in function.structured_input_signature[1].items():
        if name in placeholders and spec.dtype.is_floating:
            value = _walk(scopes, name, _compared_with)
            if value is not False:
                found[name] = value
    return found


def could_not_run(artifact: str, what: str, error: BaseException) -> Dict[str, Any]:
    """A failed report row for an artifact (or its judge, ``what`` names which) that raised: the reason in one
    line, marked ``ran: False`` so a reader tells it from a mismatch."""
    return {"artifact": artifact, "max_abs": None, "max_rel": None, "passed": False, "ran": False,
            "note": f"could not run: {what} failed: {run_error(error)}"}


def run_error(error: BaseException, limit: int = 240) -> str:
    """One line for an error TensorFlow or onnxruntime raised while running a graph: the detail and the node."""
    text = (getattr(error, "message", None) or str(error)).strip()
    ort = re.search(r"running (\w+) node\. Name:'([^']+)' Status Message: (.*)", text, re.S)
    status = re.findall(r"\[ONNXRuntimeError\] : \d+ : \w+ : (.*)", text)
    if ort:
        kind, node, detail = ort.groups()
        detail = (status[-1] if status else detail.strip().splitlines()[0] if detail.strip() else kind)
        line = f"node {node} ({kind}): {_ort_detail(detail)}"
    elif status:  # e.g. a model that does not load: the message without onnxruntime's C++ call stack
        line = _ort_detail(status[-1])
    else:
        node = re.search(r"\{\{node ([^}]+)\}\}", text) or re.search(r"Node: '([^']+)'", text)
        skip = ("Graph execution error", "Detected at node", "Node:", "File ", "[[", "Registered ", "Instructions")
        lines = [ln.strip() for ln in text.splitlines() if ln.strip() and not ln.strip().startswith(skip)
                 and not ln.startswith((" ", "\t"))]
        detail = lines[-1] if lines else type(error).__name__
        detail = re.sub(r"\s*\[\[\{\{node [^]]*\]\]", "", detail)
        detail = re.sub(r"\s*\[Op:[^]]*\]", "", detail).strip()
        line = f"{type(error).__name__}: {detail}" + (f" in node {node.group(1)}" if node else "")
    line = re.sub(r"(?:/[^\s/:;,()'\"]+)+/([^\s/:;,()'\"]+)", r"\1", line)
    return line if len(line) <= limit else line[:limit - 1] + "…"


def _ort_detail(text):
    """onnxruntime's message without source locations (``tensor.cc:57``) or C++ signatures."""
    text = re.sub(r"\b[\w/]+\.(?:cc|h|cpp):\d+\s*", "", text.strip().splitlines()[0])
    return re.split(r" [\w:]+::[\w:]+\(", text)[0].strip()


WORDS = ("the movie was great and the actors were wonderful a terrible film boring far too long I loved every "
         "minute of it worst plot have seen in years an honest moving story music loud but ending good nothing "
         "happens dull fine cast clever script").split()


def sentences(shape: Sequence[int], seed: int) -> np.ndarray:
    """Seeded English sentences (3 to 9 words from :data:`WORDS`, some capitalised, some with punctuation), an
    object array of ``shape`` as TensorFlow feeds strings."""
    rng = np.random.default_rng(seed)
    out = np.empty(int(np.prod(shape)), object)
    for i in range(out.size):
        words = list(rng.choice(WORDS, size=int(rng.integers(3, 10))))
        words[0] = words[0].capitalize()
        out[i] = (" ".join(words) + str(rng.choice([".", "!", "...", ""]))).encode()
    return out.reshape(shape)


def text_inputs(specs: "Sequence[Tuple[str, tf.TensorSpec]]", feeds: Dict[str, np.ndarray],
                seed: int) -> Dict[str, np.ndarray]:
    """{name: sentences} for each string input among ``specs`` ((name, TensorSpec) pairs), shaped like its feed."""
    tf = import_tf()
    return {name: sentences(np.shape(feeds[name]), seed + i) for i, (name, spec) in enumerate(specs)
            if spec.dtype == tf.string}
