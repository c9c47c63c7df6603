"""The gate layout of a GPU alternative's params where the graph cannot tell it, chosen by the original's outputs.

:mod:`.layouts` finds the layout by running the params' construction on marker values. Where that construction needs
more than the layer's weights (:class:`.layouts.LayoutUnknown`: a tf.keras 2.0-2.2 GPU function whose params are
computed from its inputs too), the original itself decides: its signature runs on CPU with stock TensorFlow (Grappler
keeps the standard function there, whose weights are in Keras' own gate order), ``model.onnx`` is written once per
candidate layout (:func:`.layouts.candidates`: cuDNN's, and the other build's, for each such node), each runs in
onnxruntime on the same inputs, and the one candidate whose outputs match the original's within
:data:`ATOL` + :data:`RTOL` is kept. None matching, or more than one, is refused in one line.
"""
import itertools
import os
import tempfile
from typing import Callable, Dict, List, Optional, Tuple

import numpy as np

from ..errors import UnsupportedError, reason
from ..exports.runners import onnx_session
from .layouts import LayoutUnknown, put_params_in_cudnn_order
from .nodes import find_nodes, load_proto
from .onnx_parts import write_signature_onnx
from .reach import gpu_selected, reached_by, select

# verify's float32 bar (judging.parity): a right layout is within 1e-6 of the original, a wrong gate is off by ~0.1
ATOL, RTOL = 1e-5, 1e-4
MOST_CANDIDATES = 8  # ONNX files written to choose (two layouts per node: three undecided nodes)

Original = Tuple[Dict[str, np.ndarray], Dict[str, np.ndarray]]


def unknown_layouts(source: str) -> List[LayoutUnknown]:
    """Each cuDNN node of SavedModel folder ``source``'s GPU alternatives whose params' layout the marker run cannot
    tell (:mod:`.layouts`)."""
    proto = load_proto(source)
    select(proto)
    unknown: List[LayoutUnknown] = []
    put_params_in_cudnn_order(proto, find_nodes(proto, set().union(*reached_by(proto).values())), unknown=unknown)
    return unknown


def choose_layouts(source: str, signature: str, unknown: List[LayoutUnknown], original: Callable[[], Original],
                   say: Callable[[str], None] = lambda _: None) -> Dict[str, Tuple[str, Optional[np.ndarray]]]:
    """{"function/node": (the layout's name, ``perm`` or None)} for the nodes of ``unknown``: the one combination of
    candidate layouts whose ``model.onnx`` of ``signature`` computes what the original does. ``original()``
    returns (feeds, the original's outputs of ``signature`` on them, run on CPU by stock TensorFlow). Raises
    UnsupportedError (one line) where none matches, several do, or there are too many to try."""
    where = ", ".join(u.key for u in unknown)
    combos = list(itertools.product(*[list(u.candidates.items()) for u in unknown]))
    if len(combos) > MOST_CANDIDATES:
        raise UnsupportedError(f"{unknown[0]}; {len(combos)} combinations of gate layouts for {len(unknown)} nodes "
                               f"are too many to try against the original")
    try:
        feeds, want = original()
    except Exception as e:  # noqa: BLE001 (an original that does not run here cannot choose: one line saying why)
        raise UnsupportedError(f"{where}: cannot tell the gate order of its params from the graph, and the original "
                               f"does not run on CPU to tell it ({reason(e)}); convert with --formats saved_model") \
            from None
    # (label, combo): per unknown node, (its candidate layout's name, its permutation or None)
    matched: List[Tuple[str, Tuple[Tuple[str, Optional[np.ndarray]], ...]]] = []
    worst: List[Tuple[str, Tuple[Tuple[str, Optional[np.ndarray]], ...]]] = []
    with tempfile.TemporaryDirectory(prefix="cudnn_port_layout_") as tmp:
        path = os.path.join(tmp, "candidate.onnx")
        for combo in combos:
            chosen = {u.key: perm for u, (_, perm) in zip(unknown, combo)}
            with gpu_selected(source, None, chosen) as selected:
                if write_signature_onnx(selected, path, signature):
                    raise UnsupportedError(f"{unknown[0]}; its signature takes text, so the original cannot judge "
                                           "the numeric part's layout on the same inputs")
            session = onnx_session(path)
            names = [o.name for o in session.get_outputs()]
            got = dict(zip(names, session.run(names, {i.name: feeds[i.name] for i in session.get_inputs()})))
            error = max(_excess(got[name], want[name]) for name in want if name in got) if set(want) & set(got) \
                else np.inf
            label = " + ".join(name for name, _ in combo)
            say(f"gate layout {label}: {'matches' if error <= 0 else 'differs from'} the original's outputs")
            (matched if error <= 0 else worst).append((label, combo))
    if len(matched) != 1:
        tried = "; ".join(label for label, _ in (matched or worst))
        raise UnsupportedError(f"{where}: cannot tell the gate order of its params from the graph, and "
                               f"{'several' if matched else 'no'} candidate layout gives the original's outputs "
                               f"({'matched' if matched else 'tried'}: {tried}); convert with --formats saved_model")
    _, combo = matched[0]
    return {u.key: pick for u, pick in zip(unknown, combo)}


def _excess(got: np.ndarray, want: np.ndarray) -> float:
    """How far ``got`` is past the bar ``ATOL + RTOL * |want|`` (<= 0: within it); inf for another shape."""
    got, want = np.asarray(got, np.float64), np.asarray(want, np.float64)
    if got.shape != want.shape:
        return np.inf
    return float(np.max(np.abs(got - want) - (ATOL + RTOL * np.abs(want)), initial=-np.inf))
