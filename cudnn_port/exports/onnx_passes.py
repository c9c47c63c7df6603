"""Clean-up passes over an ONNX graph that tf2onnx wrote, each in place and each keeping what an If / Loop / Scan
body reads by name: a Squeeze that undoes the Unsqueeze before it, and LSTM / GRU / RNN outputs that nothing reads."""
from typing import TYPE_CHECKING, List, Set

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
    alias = {}

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
