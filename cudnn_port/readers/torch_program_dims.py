"""Which dimensions of a program's tensors change when its translation runs. An input's batch is what the program
marked dynamic (``torch.export.Dim``), or, exported with none, the batch its recurrent nodes were exported at; its
time is the length the recurrent nodes were exported at (torch.export cannot keep an RNN's length symbolic, so every
``.pt2`` of one is fixed in time: docs/sources.md). A size the program recorded as numbers (``view(x, [s0, 7, 4])``)
keeps a dimension free where it comes from a free dimension of the input: sizes are aligned with the input's recorded
sizes group by group, and a group holding a free dimension becomes a :class:`Sym`, read from the tensors when the
model runs. :func:`axis_roles` names the batch and time dimensions of the translated model's inputs and outputs.
"""
from dataclasses import dataclass
from typing import Any, Dict, List, Optional, Set, Tuple

import numpy as np

from ..errors import CudnnPortError, UnsupportedError
from ..keras_models.model_inputs import signature_names
from .torch_program_graph import RECURRENT, Program, module_of, op_name, read_program


@dataclass
class Sym:
    """A symbolic int of the program: the product of these (tensor name, axis) dimensions and ``scale``."""
    refs: List[Tuple[str, int]]
    hint: int
    scale: int = 1


def exported_sizes(program: Program) -> Tuple[Set[int], Set[int]]:
    """(the lengths, the static batch sizes) the recurrent nodes' inputs were exported at."""
    lengths: Set[int] = set()
    batches: Set[int] = set()
    for node in program.nodes:
        if op_name(node["target"]) in RECURRENT:
            args = {inp.get("name") or str(i): inp["arg"] for i, inp in enumerate(node.get("inputs", []))}
            x = args["input"]["as_tensor"]["name"]
            batch_first = args.get("batch_first", {}).get("as_bool", False)
            lengths.add(program.sizes[x][1 if batch_first else 0])
            if not program.symbolic[x][0 if batch_first else 1]:
                batches.add(program.sizes[x][0 if batch_first else 1])
    return lengths, batches


def free_dims(program: Program) -> Dict[str, List[bool]]:
    """Which dims of each user input are free: symbolic ones (batch), those of the length the recurrent
    nodes were exported at (time), and, in a program exported with no dynamic dimension, the one of the batch
    size the recurrent nodes were exported at (batch)."""
    lengths, batches = exported_sizes(program)
    static = not any(any(program.symbolic[name]) for name in program.inputs)
    if not lengths:
        raise UnsupportedError(f"{program.path}: the program has no aten.lstm / gru / rnn_tanh / rnn_relu node; "
                               "cudnn-port converts recurrent models")
    free = {}
    for name in program.inputs:
        sizes, symbolic = program.sizes[name], program.symbolic[name]
        timed = [i for i, s in enumerate(sizes) if s in lengths and not symbolic[i]]
        if len(timed) > 1:
            raise CudnnPortError(f"{program.path}: input {name} of shape {sizes} has {len(timed)} dimensions of "
                                 f"the exported length {sizes[timed[0]]}, so its time dimension is not clear; "
                                 "export with a length that no other dimension has")
        batched = [i for i, s in enumerate(sizes) if static and s in batches and i not in timed]
        free[name] = [symbolic[i] or i in timed or (len(batched) == 1 and i in batched)
                      for i in range(len(sizes))]
    return free


def reshape_size(program: Program, node: Dict[str, Any], x: Any, size: List[Any]) -> List[Any]:
    """The size list of a reshape of ``x``: each number the program recorded kept where the input's dimensions
    it groups with are fixed; a group holding a free dimension of ``x`` computed from ``x`` when it runs."""
    inp = node["inputs"][0]["arg"]["as_tensor"]["name"]
    out = node["outputs"][0]["as_tensor"]["name"]
    a, b = program.sizes.get(inp), program.sizes.get(out)
    free = [d is None for d in getattr(x, "shape", ())]
    if a is None or b is None or not any(free):
        return [s if not isinstance(s, Sym) else s for s in size]
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
        if not any(free[k] for k in gi):  # its recorded sizes hold at any length: a -1 there is its number
            result = [b[q] if q in gj and result[q] == -1 else result[q] for q in range(len(result))]
            continue
        if len(gj) == 1:
            result[gj[0]] = Sym([(inp, k) for k in gi], b[gj[0]])
            continue
        unknown = [k for k in gj if not isinstance(size[k], Sym)]
        if len(unknown) == 1:
            result[unknown[0]] = -1
        elif len(gi) == len(gj) and all(a[p] == b[q] for p, q in zip(gi, gj)):
            for p, q in zip(gi, gj):
                result[q] = Sym([(inp, p)], b[q]) if free[p] else b[q]
        else:
            raise UnsupportedError(f"{program.path}: node {node['name']} (from {module_of(node)}) reshapes "
                                   f"{a} to {b}, splitting a dimension that changes with batch or time into "
                                   "several; give the sizes from the tensor's own shape")
    return result


def axis_roles(path: str, model: Any) -> Dict[str, List[Optional[str]]]:
    """{input name (the model's, :func:`~cudnn_port.keras_models.model_inputs.signature_names`), or ``output_N``: each
    dimension's role, ``"batch"``, ``"time"`` or None} of the program at ``path`` translated into ``model``: an
    input's time is the dimension of the length its recurrent nodes were
    exported at, its batch the other free one (an input read time-major by a ``batch_first=False`` layer is
    ``[time, batch, ...]``); an output's are the dimensions that change when the model runs on another batch size
    and on another length. What a whole-model ONNX names its dynamic dimensions by, and guards the batch of."""
    # lazy: Keras, loaded on first use (import cudnn_port stays light)
    import keras

    program = read_program(path)
    free, (lengths, _) = free_dims(program), exported_sizes(program)
    given = dict(zip(program.inputs, signature_names(program.inputs)))
    roles: Dict[str, List[Optional[str]]] = {}
    for name in program.inputs:
        sizes, symbolic = program.sizes[name], program.symbolic[name]
        marks: List[Optional[str]] = ["time" if f and s in lengths and not y else None
                                      for s, y, f in zip(sizes, symbolic, free[name])]
        rest = [i for i, f in enumerate(free[name]) if f and marks[i] is None]
        if rest:
            marks[rest[0]] = "batch"
        roles[given[name]] = marks

    def run(batch: int, steps: int) -> List[Tuple[int, ...]]:
        feeds = []
        for tensor, name in zip(model.inputs, program.inputs):
            shape = [batch if r == "batch" else steps if r == "time" else (d or 1)
                     for r, d in zip(roles[given[name]], tensor.shape)]
            feeds.append(np.zeros(shape, program.dtypes[name]))  # id 0 is in every table
        result = model(feeds[0] if len(feeds) == 1 else feeds, training=False)
        return [tuple(np.shape(y)) for y in keras.tree.flatten(result)]

    base, batched, timed = run(2, 3), run(5, 3), run(2, 7)
    for i, (a, b, c) in enumerate(zip(base, batched, timed)):
        roles[f"output_{i}"] = ["batch" if x != y else "time" if x != z else None for x, y, z in zip(a, b, c)]
    return roles
