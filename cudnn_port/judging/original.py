"""verify's rows for a converted SavedModel judged by the original: the source's own signature run on CPU.

- :func:`original_outputs`: the source SavedModel's signature in a ``tf.compat.v1`` session on CPU (Grappler swaps
  each GPU function for its CPU twin; the session loader also runs what ``tf.saved_model.load`` cannot restore,
  e.g. tf.keras 2.x optimizer slots), the tables initialised from its own assets;
- :func:`numeric_onnx_row`: a model.onnx that holds the numeric part of the signature (manifest ``onnx_input``),
  fed the token ids the converted graph's preprocessing computes from the same strings.
"""
import os
from typing import TYPE_CHECKING, Any, Callable, Dict, Optional, Tuple

import numpy as np

from ..deps import import_tf

if TYPE_CHECKING:
    from ..manifest import Manifest

def original_outputs(source: str, signature: str, feeds: Dict[str, np.ndarray]) -> Optional[Dict[str, np.ndarray]]:
    """{output name: value} of ``signature`` of the SavedModel folder ``source`` on ``feeds``, or None where the
    folder is gone."""
    if not os.path.isdir(source):
        return None
    tf = import_tf()
    with tf.Graph().as_default() as graph, tf.compat.v1.Session(graph=graph) as session:
        meta = tf.compat.v1.saved_model.loader.load(session, ["serve"], source)
        sig = meta.signature_def[signature]
        return session.run({k: v.name for k, v in sig.outputs.items()},
                           {sig.inputs[k].name: v for k, v in feeds.items() if k in sig.inputs})


def numeric_onnx_row(out: str, manifest: "Manifest", feeds: Dict[str, np.ndarray], want: Dict[str, np.ndarray],
                     atol: float, rtol: float) -> Dict[str, Any]:
    """The numeric-part model.onnx on the token ids that OUT's preprocessing computes from ``feeds`` (in
    frozen_graph.pb where it is there, else in OUT/saved_model frozen again), against ``want``."""
    from ..graphs.frozen import run_frozen
    from ..graphs.onnx_parts import cut_values
    from .graph_inputs import could_not_run
    from .graph_inputs import onnx_row

    arts, cut = manifest["model_artifacts"], manifest["onnx_input"]
    try:
        if "graphdef" in arts:
            ids = run_frozen(os.path.join(out, arts["graphdef"]), manifest["graphdef_nodes"], feeds,
                             [cut["replaces"]])[cut["replaces"]]
        else:
            ids, _ = cut_values(os.path.join(out, arts["saved_model"]),
                                manifest.get("onnx_signature", "serving_default"), feeds, cut["replaces"])
    except Exception as e:  # noqa: BLE001 (a graph that does not run is a failed row)
        return could_not_run("onnx (onnxruntime)", "computing its token ids in TensorFlow", e)
    row = onnx_row(os.path.join(out, arts["onnx"]), {cut["name"]: ids}, want, atol, rtol)
    note = "; ".join(filter(None, [row.get("note"), f"fed {cut['name']} from {', '.join(cut['computed_from'])}"]))
    return dict(row, note=note)


def graphdef_row(out: str, manifest: "Manifest", feeds: Dict[str, np.ndarray], want: Dict[str, np.ndarray], atol: float,
                 rtol: float) -> Dict[str, Any]:
    """frozen_graph.pb in a TF1 session (tables initialised by its ``init_all_tables``) against ``want``."""
    from ..graphs.frozen import run_frozen
    from .graph_inputs import could_not_run
    from .parity import compare

    name = "graphdef (TF1 session)"
    try:
        got = run_frozen(os.path.join(out, manifest["model_artifacts"]["graphdef"]), manifest["graphdef_nodes"],
                         feeds)
    except Exception as e:  # noqa: BLE001
        return could_not_run(name, "TensorFlow", e)
    names = sorted(want)
    return compare(name, [got.get(n) for n in names], [want[n] for n in names], atol, rtol,
                   note="strings in, init_all_tables run first")


def original_rows(manifest: "Manifest", out: str, serving: Tuple[Dict[str, np.ndarray], Dict[str, np.ndarray]],
                  atol: float, rtol: float, say: Callable[[str], None]) -> list:
    """The converted SavedModel's signature against the original's on the same feeds (``serving``: (feeds, the
    converted signature's outputs)); for a numeric-part model.onnx, its row against the original (or, with the
    source gone, against the converted SavedModel)."""
    from .parity import compare
    from .graph_inputs import could_not_run

    feeds, results = serving
    signature, rows, want = manifest.get("onnx_signature", "serving_default"), [], None
    try:  # an original whose signature calls a cuDNN node has no CPU kernel for it: only the others run here
        want = None if manifest.get("nodes") else original_outputs(manifest["source"]["checkpoint"], signature, feeds)
    except Exception as e:  # noqa: BLE001 (an original that does not run here: said, not judged)
        rows.append(dict(could_not_run(f"saved_model [{signature}]", "the original", e), passed=None,
                         stack="(whole graph)", judge="the original"))
    if want is not None:
        say(f"saved_model [{signature}]: against the original")
        names = sorted(want)
        row = compare(f"saved_model [{signature}]", [results.get(n) for n in names], [want[n] for n in names], atol,
                      rtol, note="the original's signature run on CPU, same inputs")
        rows.append(dict(row, stack="(whole graph)", judge="the original SavedModel"))
    judge = "the original SavedModel" if want is not None else "the converted SavedModel"
    if "graphdef" in manifest["model_artifacts"]:
        say("graphdef: the whole signature in a TF1 session")
        rows.append(dict(graphdef_row(out, manifest, feeds, want or results, atol, rtol), stack="(whole graph)",
                         judge=judge))
    if "onnx_input" in manifest and "onnx" in manifest["model_artifacts"]:
        say("onnx: the numeric part, fed the token ids of the same strings")
        row = numeric_onnx_row(out, manifest, feeds, want or results, atol, rtol)
        rows.append(dict(row, stack="(whole graph)", judge=judge))
    return rows
