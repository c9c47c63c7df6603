"""Passes over an ONNX graph that tf2onnx wrote, each in place and each keeping what an If / Loop / Scan body reads by
name: a Squeeze that undoes the Unsqueeze before it, and LSTM / GRU / RNN outputs that nothing reads, removed; and
one sequence input given to each LSTM / GRU / RNN node (:func:`sequence_inputs_apart`)."""
from typing import TYPE_CHECKING, Any, Dict, List, Set

if TYPE_CHECKING:
    import onnx


def squeeze_pairs_cancelled(graph: "onnx.GraphProto") -> None:
    """Remove, in place, each Squeeze that undoes the Unsqueeze before it (or the reverse) over the same constant
    axes: what a state passed from one layer to the next through Keras' [batch, units] form leaves behind. The
    graph's outputs keep their names."""
    # lazy: onnx, loaded on first use (import cudnn_port stays light)
    from onnx import numpy_helper

    consts = {t.name: numpy_helper.to_array(t) for t in graph.initializer}
    produced = {out: node for node in graph.node for out in node.output}
    opposite = {"Squeeze": "Unsqueeze", "Unsqueeze": "Squeeze"}
    keep = {o.name for o in graph.output} | read_in_subgraphs(graph)  # what a branch or loop body reads stays
    alias: Dict[str, str] = {}  # {a removed node's output: the tensor read in its place}

    def axes(node):
        return consts[node.input[1]].tolist() if len(node.input) == 2 and node.input[1] in consts else None

    for node in graph.node:
        node.input[:] = [alias.get(name, name) for name in node.input]
        first = produced.get(node.input[0]) if node.op_type in opposite and node.input else None
        if first is not None and first.op_type == opposite[node.op_type] and axes(node) is not None \
                and axes(node) == axes(first) and node.output[0] not in keep:
            alias[node.output[0]] = first.input[0]
    if alias:
        live = [n for n in graph.node if n.output[0] not in alias]
        while True:  # drop the squeezes nothing reads any more
            read = {name for node in live for name in node.input} | keep
            dead = [n for n in live if n.op_type in opposite and not set(n.output) & read]
            if not dead:
                break
            live = [n for n in live if n not in dead]
        del graph.node[:]
        graph.node.extend(live)


def read_in_subgraphs(graph: "onnx.GraphProto") -> Set[str]:
    """Every tensor name a node inside an If / Loop / Scan body of ``graph`` reads (at any depth): such a body may
    read a tensor of the graph around it by name."""
    names = set()
    for node in graph.node:
        for body in bodies(node):
            names |= {name for inner in body.node for name in inner.input} | {o.name for o in body.output}
            names |= read_in_subgraphs(body)
    return names


def bodies(node: "onnx.NodeProto") -> List["onnx.GraphProto"]:
    """The graphs ``node`` holds as attributes: an If's branches, a Loop's or Scan's body."""
    # lazy: onnx, loaded on first use (import cudnn_port stays light)
    from onnx import AttributeProto

    return [g for attr in node.attribute for g in ([attr.g] if attr.type == AttributeProto.GRAPH else
                                                   list(attr.graphs) if attr.type == AttributeProto.GRAPHS else [])]


def unread_outputs_dropped(graph: "onnx.GraphProto") -> None:
    """Name "" (ONNX's "not produced") every optional LSTM / GRU / RNN output that nothing reads, in place: a runtime
    then skips writing it (the full output sequence of a layer whose last state is all the model reads)."""
    read = {name for node in graph.node for name in node.input} | {o.name for o in graph.output} | \
        read_in_subgraphs(graph)
    for node in graph.node:
        if node.op_type in ("LSTM", "GRU", "RNN"):
            for k, name in enumerate(node.output):
                if name and name not in read:
                    node.output[k] = ""


SEQUENCE_OPS = ("LSTM", "GRU", "RNN")
OWN_X = "own_X"  # the last name part of sequence_inputs_apart's views (``{node}/own_X``, its Shape ``..._shape``)


def sequence_inputs_apart(graph: "onnx.GraphProto") -> None:
    """Give (in place) each LSTM / GRU / RNN node after the first that reads the same sequences ``X`` a view of its
    own: ``Reshape(V, Shape(V))`` of the view ``V`` the node before it got (the first: ``X``), the same tensor.
    OpenVINO 2026.4's CPU plugin computes one of several sequence nodes that share their ``X`` wrongly when the batch
    is dynamic and the time length known: Keras' ``LSTM(4, return_sequences=True)`` and ``LSTM(4)`` on one
    ``keras.Input((6, 5))``, the second off by 0.25 (0.41 for two layers in ``TimeDistributed`` over one input, 0.48
    for three LSTMs behind one ``Masking``), exact with a static batch and in onnxruntime. Identical views of ``X``
    it merges back into one (the three LSTMs), hence a chain. Measured in tests/test_whole_model_openvino.py
    (test_sequence_nodes_sharing_one_input_run_in_openvino). The views change no number in any runtime; the int8
    rewrite, which drops a masked LSTM's padding channel, follows them back to it
    (:func:`cudnn_port.exports.onnx_portable.plain_lstm_inputs`)."""
    # lazy: onnx, loaded on first use (import cudnn_port stays light)
    from onnx import helper

    last: Dict[str, str] = {}
    nodes: List[Any] = []  # onnx NodeProtos; last: X: the view the last node reading it got (X itself for the first)
    for node in graph.node:
        if node.op_type in SEQUENCE_OPS and node.input and node.input[0] in last:
            # a view of the previous view: identical views of X, OpenVINO merges back into one (three LSTMs measured)
            source, view = last[node.input[0]], f"{node.name}/{OWN_X}"
            nodes += [helper.make_node("Shape", [source], [f"{view}_shape"], name=f"{view}_shape"),
                      helper.make_node("Reshape", [source, f"{view}_shape"], [view], name=view)]
            last[node.input[0]], node.input[0] = view, view
        elif node.op_type in SEQUENCE_OPS and node.input:
            last[node.input[0]] = node.input[0]
        nodes.append(node)
    del graph.node[:]
    graph.node.extend(nodes)
