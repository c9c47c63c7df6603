"""``cudnn-port inspect``: what a source holds, which specs fit each cuDNN buffer, and how it would convert."""
import contextlib
import os
from typing import Any, Dict, List, Optional, Union, cast

import numpy as np

from .canonical import LayerParams
from .errors import CudnnPortError
from . import formats as registry
from .infer import candidates, choose, differing_flags, ranked
from .layout import RNNSpec
from .formats.jobs import GraphJob, road_plan
from .keras_models.model_inputs import IDS_ONLY, input_specs, to_records
from .roads.buffers import clues_for, find_stacks
from .roads.stack import artifact_paths, default_formats
from .targets import target_for, tf1
from .graphs import load_proto
from .graphs.reach import describe, dropped_summary, reach
from .graphs.trust import inspect_entries
from .readers import open_source, source_type
from .formats.keras import WHOLE_MODEL



def inspect_source(path: "os.PathLike[str] | str", variable: Optional[str] = None, ids_dtype: Optional[str] = None,
                   **flags: Optional[Union[int, bool, str]]) -> Dict[str, Any]:
    """What ``path`` holds and how each buffer would convert; a JSON-ready dict.

    flags: mode, num_layers, num_units, input_size, bidirectional, num_proj (None = not given). ``ids_dtype``: as
    ``convert``'s, the dtype a whole model's artifacts would take for its ids
    (:mod:`cudnn_port.keras_models.model_inputs`).
    """
    path = os.fspath(path)
    road = source_type(path).road
    if ids_dtype is not None and road != "model":
        raise CudnnPortError(IDS_ONLY)
    if road == "graph":
        return _inspect_saved_model(path)
    source = open_source(path, mode=cast(Optional[str], flags.get("mode")))
    given: Dict[str, Any] = {k: v for k, v in flags.items() if v is not None}
    report: Dict[str, Any] = {
        "checkpoint": source.prefix, "format": source.format, "default_style": source.default_style,
        "variables": [{"name": n, "shape": list(source.shapes[n]), "dtype": source.dtypes[n]} for n in source.names],
        "stacks": []}
    if source.stock_layers:  # a Keras model's stock recurrent layers: fused or refused
        report["stock_layers"] = source.stock_layers
    if source.whole_model:  # what the whole model's artifacts take
        warnings: List[str] = []
        report["model_inputs"] = to_records(input_specs(source.model, warnings.append, ids_dtype))
        report["warnings"] = warnings
    stacks = find_stacks(source, variable)
    for stack in stacks:
        clues = clues_for(source, stack)
        stated = cast(Optional[RNNSpec], source.specs.get(stack.variable))  # a spec the source states outright: no
        # other to rank
        found = [stated] if stated is not None and not given else \
            ranked(candidates(stack.size, dtype=stack.dtype, **given), clues)
        entry = {"variable": stack.variable, "size": stack.size, "dtype": stack.dtype, "slots": stack.slots,
                 "found": _found(source, stack, clues), "candidate_count": len(found),
                 "candidates": [dict(s.to_dict(), score=clues.score(s), reasons=clues.reasons(s)) for s in found[:20]]}
        if hasattr(source, "layer_of"):
            entry.update(source.layer_of(stack.variable))
        problem = getattr(source, "undecided_problem", lambda variable: None)(stack.variable)
        if problem:  # the file leaves part of the spec to a flag (an nn.RNN's tanh or relu)
            entry.update(spec=None, problem=problem, settle_with=["--mode rnn_tanh", "--mode rnn_relu"], candidates=[],
                         candidate_count=0, found=source.describe(stack.variable))
            report["stacks"].append(entry)
            continue
        try:
            spec, how = choose(stack.variable, stack.size, stack.dtype, clues, **given)
            entry.update(spec=spec.to_dict(), how=how, flags=spec.flags() if spec.cudnn_computes else None,
                         plan=_plan(source, stack, spec, several=len(stacks) > 1))
        except CudnnPortError as e:
            entry.update(spec=None, problem=str(e), settle_with=differing_flags(found))
        report["stacks"].append(entry)
    return report


def _inspect_saved_model(path):
    proto = load_proto(path)
    safety = inspect_entries(path, proto)  # before anything reads its constants
    reached = reach(proto)
    dropped, nodes = dropped_summary(reached["dropped"]), reached["called"]
    signatures = sorted({name for meta in proto.meta_graphs for name in meta.signature_def
                         if not name.startswith("__")})
    words = f"SavedModel with {len(nodes)} cuDNN nodes that its signatures call"
    if reached["gpu_alternatives"]:
        words += (f", and {len(reached['gpu_alternatives'])} in GPU alternatives of functions they call (Grappler "
                  "swaps those in on a GPU; model.onnx fuses them, saved_model calls the standard ones)")
    if dropped["with_cudnn_ops"]:
        words += (f"; {len(dropped['with_cudnn_ops'])} functions nothing calls directly hold cuDNN ops (GPU "
                  "alternatives, e.g. tf_keras's gpu_lstm_with_fallback, and their gradients) and are dropped")
    return {"checkpoint": os.path.abspath(path), "format": words, "signatures": signatures,
            "nodes": describe(nodes), "gpu_alternatives": describe(reached["gpu_alternatives"], True),
            "stacks": [], "plan": _graph_plan(nodes, proto), "variables": [],
            "uncalled_functions_dropped": dropped, **safety}


def _graph_plan(nodes, proto):
    job = GraphJob("", proto, nodes, {}, lambda message: None, lambda what: contextlib.nullcontext())
    paths, not_written = road_plan("graph", [n.spec for n in nodes], job)
    return dict(artifacts=paths, not_written=not_written) if not_written else {"artifacts": paths}


def _found(source, stack, clues):
    """What the source holds for ``stack``, in words."""
    if stack.variable in source.specs:
        return source.describe(stack.variable)
    words = f"cuDNN opaque buffer ({source.format} checkpoint)"
    if clues.exact is not None and clues.exact_how == clues.CANONICAL:
        scheme = "older names with bias_cudnn_0/1" if tf1.uses_legacy_names(source.shapes, stack.prefix) else \
            "current names"
        words += f", with TF1 canonical tensors beside it ({scheme}); they are compared with the buffer"
    elif clues.exact is not None:
        words += f", its spec {clues.exact_how}"
    if stack.slots:
        words += f"; optimizer slots {', '.join(s[len(stack.variable) + 1:] for s in stack.slots)} convert with it"
    return words


def _plan(source, stack, spec, several=False):
    """How ``stack`` converts by default: the style, its tensor names for layer 0, and the artifacts."""
    style = source.default_style
    target = target_for(style, source.shapes, stack.prefix)
    G, H, S, P = spec.num_gates, spec.num_units, spec.state_size, spec.num_proj
    zeros = LayerParams(W=np.zeros((G, H, spec.input_size), spec.dtype), R=np.zeros((G, H, S), spec.dtype),
                        b_W=np.zeros((G, H), spec.dtype), b_R=np.zeros((G, H), spec.dtype),
                        P=np.zeros((P, H), spec.dtype) if P else None)
    try:
        names = list(target.write_layer(spec, stack.prefix, 0, 0, zeros))
    except CudnnPortError as e:  # a style that cannot hold this stack
        return {"style": style, "scheme": None, "layer_0_names": [], "problem": str(e), "artifacts": []}
    if source.whole_model:  # a Keras model: its artifacts cover the whole model, as the registry declares them
        paths, not_written = road_plan("model", list(source.specs.values()) or [spec])
        plan = {"style": style, "scheme": None, "layer_0_names": names,
                "artifacts": ["checkpoint"] + paths + [WHOLE_MODEL, "model_parity.json"]}
        return dict(plan, not_written=not_written) if not_written else plan
    kinds = default_formats(style)
    paths, not_written = [], {}
    for name in kinds:
        fmt = registry.get(name)
        why = fmt.cannot_hold(spec)
        rels = list(artifact_paths(fmt, stack.label, several).values())
        if why:
            not_written.update((rel, why) for rel in rels)
        else:
            paths += rels
    plan = {"style": style, "scheme": getattr(target, "scheme", None), "layer_0_names": names,
            "artifacts": paths + ([WHOLE_MODEL] if "keras" in kinds and source.model_config else [])}
    if not_written:
        plan["not_written"] = not_written
    return plan
