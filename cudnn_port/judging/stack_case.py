"""One stack judged, as verify judges each: where the judge's weights come from (the source file's own rule, its
buffer read through the cuDNN API's layout, or OUT/checkpoint read back when the source is gone), the seeded ragged
case with non-zero states (smaller where the cell's functions overflow on it), its fp32 floors, and every row of
:mod:`.stack_rows` run on that case (:func:`judge_stack`). verify (:mod:`cudnn_port.verify`) walks OUT and calls it
once per stack."""
import importlib
import os
import re
from typing import TYPE_CHECKING, Any, Callable, Dict, List, Optional, Sequence, Tuple

import numpy as np

from .. import reference
from ..checkpoint import Checkpoint
from ..errors import CudnnPortError
from ..infer import neighbour_contradiction
from ..layout import RNNSpec, unpack
from ..readers import source_type
from ..targets import reader
from . import cudnn_api, keras_weights, tf1_weights
from .parity import RTOL, failed_row, fp32_floor, sample_batch
from .stack_rows import checkpoint_judge, gpu_row, stack_artifact_rows

if TYPE_CHECKING:
    from ..canonical import CanonicalRNN
    from ..manifest import Manifest, StackRecord
    from ..source import Source


def converted_canon(manifest: "Manifest", out: str, stack: "StackRecord", spec: RNNSpec) -> "CanonicalRNN":
    """The stack read back from OUT/checkpoint by the style's reader (the judge's weights when the source is gone)."""
    ckpt = Checkpoint(os.path.join(out, "checkpoint"))
    tensors = {name: ckpt.get(name) for name in stack.targets}
    return reader(manifest.style or "", stack.scheme).read(tensors, stack.prefix, spec)


def judge_stack(manifest: "Manifest", out: str, stack: "StackRecord", source: "Optional[Source]",
                judged_by: Optional[str], atol: float, rtol: float, seed: int, batch: int, steps: int,
                say: Callable[[str], None]) -> List[Dict[str, Any]]:
    """verify's rows of ``stack``: its layout rows, OUT/checkpoint in stock components, every artifact in each
    runtime, the source's own framework where its registry entry names one, and the fused cuDNN op where a GPU is
    seen; each judged by the reference on the stack the judge reads from ``source`` (words: ``judged_by``), or from
    OUT/checkpoint where ``source`` is None (then a pass is only ``unjudged``: the conversion cannot vouch for
    itself)."""
    try:
        spec = RNNSpec(**stack.spec.to_dict())
        layout_rows: List[Dict[str, Any]] = []
        if source is not None and stack.variable in source.shapes:
            canon, layout_rows = _read_buffer(spec, source.get(stack.variable))
            independent = _independent_stack(manifest, source, stack.variable, spec)
            if independent is not None:
                canon, judged_by = independent
            elif manifest.road != "model":  # a checkpoint's buffer: its neighbours may contradict it
                layout_rows += _neighbour_rows(source, stack.variable, spec)
        else:
            canon, judged_by = converted_canon(manifest, out, stack, spec), "converted checkpoint (source unavailable)"
    except (TypeError, KeyError, ValueError, CudnnPortError) as e:  # the manifest's spec fits no buffer
        return [dict(failed_row("manifest spec", e), stack=stack.variable, judge=None)]
    x, lengths, h, c_given = sample_batch(spec, batch, steps, seed)
    c: Optional[np.ndarray] = c_given if spec.mode == "lstm" else None
    want, want_zero, single, single_zero = _judged(canon, x, lengths, h, c)
    scale = 1.0
    # the cell's functions overflow on this sample, in float64 or in the float32 the artifacts compute in (exp, a GRU
    # of log_softmax gates growing without bound): judge on fewer steps, smaller inputs and states, and say so
    while not _finite(want, want_zero, single, single_zero) and scale > 1e-6:
        scale, keep = scale / 10, max(1, x.shape[1] // 2)
        x, lengths = x[:, :keep] / 10, np.minimum(lengths, keep)
        h, c = h / 10, (None if c is None else c / 10)
        want, want_zero, single, single_zero = _judged(canon, x, lengths, h, c)
    atol_in = atol
    # each way of calling has its own fp32 floor: zero states can sit on saturated gates that fed states leave
    # (measured: 4.4e-5 from float64 with zero states, 1.4e-5 fed, on a published textgenrnn layer)
    atol, atol_zero = (max(atol, case_floor(w, s, rtol), *(case_floor(w, reference.forward(
        canon, x, lengths, h_0, c_0, dtype=np.float32, ulps=u), rtol) for u in (2, -2)))
        for w, s, (h_0, c_0) in ((want, single, (h, c)), (want_zero, single_zero, (None, None))))
    # c is None for a GRU or an RNN, as .stack_rows' functions take it (their annotation says an array: theirs to fix)
    case: Tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray] = (x, lengths, h, c)  # type: ignore[assignment]
    rows = layout_rows
    if manifest.road != "model" or "checkpoint" in manifest.formats:
        say(f"{stack.variable}: checkpoint")
        rows.append(checkpoint_judge(manifest, out, stack, spec, case, want, atol, rtol))
    rows += stack_artifact_rows(out, stack, spec, canon, case, want, want_zero, (atol, atol_zero), rtol, say)
    original = source_type(manifest.source.checkpoint).original if source is not None else None
    if original is not None:  # the source's own framework runs the stack from the file (PyTorch's nn.LSTM)
        say(f"{stack.variable}: the source's own framework")
        rows.append(_call(original, manifest.source.checkpoint, stack.variable, spec, case, want, atol, rtol))
    # the fused cuDNN op's bound is this case's own (4x its fp32 floor, states fed), never the artifacts' errors:
    # an artifact that errs within its tolerance must not loosen the bound of the GPU that should match it
    rows.append(gpu_row(spec, canon, case, want, atol, rtol))
    self_judged = str(judged_by).startswith("converted checkpoint")  # the conversion's own output: no judge
    for row in rows:
        row.setdefault("judge", judged_by if row["passed"] is not None else None)
        row["stack"] = stack.variable
        if self_judged and row["passed"] and row.get("judge") == judged_by:
            row.update(passed=None, unjudged=True, note="; ".join(filter(None, [
                row.get("note"), f"agrees with {str(judged_by).split(' (')[0]}, which is the conversion's own output: "
                                 "the source is gone or changed"])))
        if scale < 1:
            taken = f"{x.shape[1]} step{'s' if x.shape[1] > 1 else ''}"
            row["note"] = "; ".join(filter(None, [row.get("note"), f"{taken}, inputs and states scaled by {scale:g}: "
                                                  "the cell's functions overflow on verify's usual sample"]))
        granted = row.pop("atol", atol)
        if row["passed"] and row["max_abs"] is not None and atol_in < row["max_abs"] <= granted:  # on the floor
            row["note"] = "; ".join(filter(None, [row.get("note"), f"atol {granted:.2e}: 4x this case's fp32 floor"]))
    return rows


def _judged(canon, x, lengths, h, c):
    """The float64 reference's outputs with states fed and with none (zeros), and the same math in fp32 (their
    floors)."""
    return (reference.forward(canon, x, lengths, h, c), reference.forward(canon, x, lengths),
            reference.forward(canon, x, lengths, h, c, dtype=np.float32),
            reference.forward(canon, x, lengths, dtype=np.float32))


def _finite(*outputs) -> bool:
    """Whether every array of the reference's outputs (lists with None for a state not returned) is finite."""
    return all(np.all(np.isfinite(a)) for out in outputs for a in out if a is not None)


def _independent_stack(manifest, source, variable, spec):
    """(the stack read from the source's own weights by their format's documented rule, the judge's words) where
    the source's stacks are not cuDNN buffers (a Keras 2 ``.h5``: Keras 2's CuDNN weight rule on its arrays; TF1
    canonical cells: their tensors by TF1's names and gate orders; a stock Keras layer: its kernels by Keras' math),
    so that the per-stack judge shares nothing with the reader or rewrite the artifacts came through; None for a
    source whose stacks are buffers as saved."""
    judge = source_type(manifest.source.checkpoint).judge  # the source file's own rule, by the registry
    if judge is not None:
        return _call(judge, manifest.source.checkpoint, variable, spec)
    if variable in getattr(source, "canonical", {}):  # TF1 canonical cells, no buffer: the reader packed one
        checkpoint = source.checkpoint
        return (tf1_weights.stack_from_checkpoint(checkpoint.get, checkpoint.shapes, variable, spec),
                "the checkpoint's TF1 cell tensors, by TF1's names and gate orders (not the reader)")
    original = getattr(source, "original", None)
    if original is not None:
        row = source.layer_of(variable)
        kind = row["type"]
        while re.fullmatch(r"TimeDistributed\((.+)\)", kind):  # TimeDistributed(LSTM): the LSTM's
            kind = kind[len("TimeDistributed("):-1]
        if kind in ("LSTM", "GRU", "SimpleRNN", "RNN", "Bidirectional"):
            return (keras_weights.stock_stack(original, row["layer"], spec, row.get("cell"), row.get("direction")),
                    "the stock layer's own Keras weights, by Keras' math (not the rewrite)")
    return None


def _call(where: str, *args):
    """The function a source's registry entry names as ``"module:function"``, called."""
    module, function = where.split(":")
    return getattr(importlib.import_module(module), function)(*args)


def _read_buffer(spec: RNNSpec, buffer: np.ndarray) -> Tuple["CanonicalRNN", List[Dict[str, Any]]]:
    """(the stack the reference judges by, read through the cuDNN API's statement of the layout
    (:mod:`cudnn_port.judging.cudnn_api`); a failed row where :func:`cudnn_port.layout.unpack`, which every writer
    reads the buffer by, reads it otherwise)."""
    canon = cudnn_api.canonical(spec, buffer)
    where = cudnn_api.disagreement(canon, unpack(spec, buffer))
    if not where:
        return canon, []
    return canon, [{"artifact": "layout (two statements of cuDNN's)", "passed": False, "max_abs": None,
                    "max_rel": None, "note": f"the converter's layout and the cuDNN API's read the buffer "
                                             f"differently at {where}: every artifact is suspect"}]


def _neighbour_rows(source, variable: str, spec: RNNSpec) -> List[Dict[str, Any]]:
    """A failed ``layout`` row where a 2-D tensor beside the buffer takes the output width of another spec of the
    buffer's size, not the manifest's (:func:`cudnn_port.infer.neighbour_contradiction`): flags that chose among
    several specs chose wrong, and every artifact, read by the same spec, agrees with the reference."""
    why = neighbour_contradiction(variable, spec, dict(source.shapes))
    return [{"artifact": "layout (spec against the tensors beside it)", "passed": False, "max_abs": None,
             "max_rel": None, "note": why}] if why else []


def case_floor(want: Sequence[Optional[np.ndarray]], got: Sequence[Optional[np.ndarray]],
               rtol: float = RTOL) -> float:
    """4x the fp32 floor of this case (:func:`cudnn_port.judging.parity.fp32_floor`): how far the reference's own
    math run in fp32 (``got``: ``reference.forward(..., dtype=np.float32)``) lands from its float64 outputs
    ``want``, beyond what ``rtol * |want|`` already allows each element. verify takes the largest of three fp32
    runs: NumPy's own functions, and every tanh / sigmoid value 2 ulp high, then 2 ulp low (``ulps``), as a
    runtime's approximations are; one run alone depends on NumPy's fp32 functions (numpy 1.26's landed 4.2e-6 from
    float64 on a published textgenrnn layer where numpy 2.4's landed 1.4e-5 and OpenVINO's 1.5e-5). Trained
    weights (large pre-activations, saturated gates) can put a correct fp32 artifact above a fixed 1e-5 (measured:
    1.06e-5 on a published textgenrnn model whose every artifact is right); no artifact computing in fp32 can be
    held closer than that. An
    element's error that the relative tolerance covers grants nothing: a stack whose outputs grow to 8e5 (an
    exploding ReLU SimpleRNN) errs by 8e-2 there in fp32, and would otherwise grant atol 0.34 to every element,
    its exact zeros included."""
    excess = max((float(np.max(np.abs(np.asarray(g, np.float64) - w) - rtol * np.abs(w), initial=0.0))
                  for g, w in zip(got, want) if w is not None), default=0.0)
    floor = fp32_floor(max(excess, 0.0))
    return floor if np.isfinite(floor) else 0.0  # float32 overflows where float64 does not: no floor to grant
