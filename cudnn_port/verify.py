"""``cudnn-port verify OUT``: every artifact of a convert output, every signature, every file, against judges that
share no code path with them.

- files: every file the manifest lists has the sha256 it records, and OUT holds no file it does not list;
- per stack, on seeded ragged batches with non-zero initial states, the NumPy reference of cuDNN's math
  (:mod:`cudnn_port.reference`) is the judge of: OUT/checkpoint restored by name into stock components
  (TF1 cells for ``--style tf1``, Keras layers for ``keras``, PyTorch modules for ``pytorch``,
  :mod:`cudnn_port.judging.stock`); both SavedModel signatures; the GraphDef; the ONNX model fed states and fed none;
  the Keras and PyTorch files; and, where TensorFlow sees a GPU, the fused cuDNN op itself (TF32 off);
- copied variables: equal to the source's;
- the whole model rebuilt from a Keras 2 ``.h5`` (``OUT/keras/model.keras``): against the model built from the
  source file's own config and arrays (:mod:`cudnn_port.judging.keras2_model`);
- a whole model (``convert model.keras``): its SavedModel, GraphDef and ONNX against the model with each fused
  layer's stack computed by the NumPy reference (:mod:`cudnn_port.judging.stock`);
- a SavedModel source: every artifact against the original signature, each cuDNN node it calls computed by the
  NumPy reference (:mod:`cudnn_port.judging.cudnn_nodes`).

The judge's weights come from the source buffer when the source is still where the manifest says and its files
hash the same; otherwise from OUT/checkpoint (the report says which). An element passes when
``|artifact - judge| <= atol + rtol * |judge|``.

    report = verify("out/")            # also writes out/parity.json
    assert report["passed"]
"""
import importlib
import os
import re
from typing import TYPE_CHECKING, Any, Dict, List, Optional, Tuple

import numpy as np

from . import reference
from .errors import CudnnPortError
from .infer import neighbour_contradiction
from .layout import RNNSpec, unpack
from .manifest import MANIFEST, load_manifest
from .judging.parity import ATOL, RTOL, failed_row, fp32_floor, sample_batch, write_report
from .paths import sha256
from .judging.stack_rows import checkpoint_judge, gpu_row, stack_artifact_rows
from .targets import reader
from .progress import Progress, say_to
from .checkpoint import Checkpoint
from .exports.runners import loads_shared
from .graphs.trust import check_out
from .judging import cudnn_api, keras_weights, tf1_weights
from .judging.keras2_model import JUDGE as KERAS2_JUDGE, rebuilt_model_row
from .judging.model_rows import keras_model_rows, saved_model_rows
from .judging.torch_program import program_rows
from .judging.source_place import locate
from .quiet import library_call
from .readers import open_source, source_type

if TYPE_CHECKING:
    from .canonical import CanonicalRNN
    from .manifest import Manifest, StackRecord

REPORT = "parity.json"


def file_rows(out: str, manifest: "Manifest") -> List[Dict[str, Any]]:
    """One row: every listed file present with its sha256, no unlisted file; a symbolic link or a name outside OUT
    fails it (OUT is never written through links)."""
    listed = manifest.get("files", {})
    present = set()
    for root, dirs, files in os.walk(out):
        for f in files:
            present.add(os.path.relpath(os.path.join(root, f), out))
    present -= {MANIFEST, REPORT}
    outside = {rel for rel in listed if os.path.isabs(rel) or os.path.normpath(rel).split(os.sep)[0] == os.pardir}
    links = {rel for rel in set(listed) & present - outside if _linked(out, rel)}
    problems = [f"missing {rel}" for rel in sorted(set(listed) - present - outside)]
    problems += [f"not in the manifest: {rel}" for rel in sorted(present - set(listed))]
    problems += [f"outside OUT: {rel}" for rel in sorted(outside)]
    problems += [f"a symbolic link: {rel}" for rel in sorted(links)]
    problems += [f"sha256 differs: {rel}" for rel in sorted(set(listed) & present - outside - links)
                 if sha256(os.path.join(out, rel)) != listed[rel]]
    note = f"{len(listed)} files, sha256 as recorded" if not problems else \
        "; ".join(problems[:3]) + (f" and {len(problems) - 3} more" if len(problems) > 3 else "")
    return [{"artifact": "files (sha256)", "stack": "(all)", "max_abs": None, "max_rel": None,
             "passed": not problems, "note": note, "judge": "manifest.json"}]


def _linked(out, rel):
    """Whether ``rel`` or a folder on its way down from OUT is a symbolic link."""
    parts = rel.split(os.sep)
    return any(os.path.islink(os.path.join(out, *parts[:i])) for i in range(1, len(parts) + 1))


def source_unchanged(manifest: "Manifest") -> bool:
    """Whether the source the manifest names is still there with the hashes it recorded."""
    source = manifest["source"]
    prefix, files = source.get("checkpoint", ""), source.get("files", {})
    base = prefix if os.path.isdir(prefix) else os.path.dirname(prefix)
    try:
        return bool(files) and all(sha256(os.path.join(base, name)) == digest for name, digest in files.items())
    except OSError:
        return False


def converted_canon(manifest: "Manifest", out: str, stack: "StackRecord", spec: RNNSpec) -> "CanonicalRNN":
    """The stack read back from OUT/checkpoint by the style's reader (the judge's weights when the source is gone)."""
    ckpt = Checkpoint(os.path.join(out, "checkpoint"))
    tensors = {name: ckpt.get(name) for name in stack["targets"]}
    return reader(manifest["style"], stack.get("scheme")).read(tensors, stack["prefix"], spec)


def verify(out: "os.PathLike[str] | str", atol: float = ATOL, rtol: float = RTOL, seed: int = 0, batch: int = 4,
           steps: int = 9, progress: Optional[Progress] = None, trust_source: bool = False,
           verbose: bool = False, source: "Optional[os.PathLike[str] | str]" = None,
           allow_unjudged: bool = False) -> Dict[str, Any]:
    """Check every artifact of convert output ``out``; write ``out/parity.json``; return the report dict. A graph in
    OUT that is not pure computation is refused before anything runs, unless ``trust_source``. Only cudnn-port's own
    words reach stderr during the call; ``verbose=True`` lets the libraries' through.

    A source no longer where the manifest says is looked for by its sha256 next to OUT, or read from ``source``
    (which must hash as recorded). A row whose independent judge could not run (``unjudged``: the original
    SavedModel gone, changed or of another platform's gate layout) fails, unless ``allow_unjudged``: then it is
    neither passed nor failed, and ``report["not_judged"]`` counts it."""
    with library_call(verbose), loads_shared():
        return _verify(os.fspath(out), atol, rtol, seed, batch, steps, progress, trust_source, source, allow_unjudged)


def _verify(out, atol, rtol, seed, batch, steps, progress, trust_source, named_source=None, allow_unjudged=False):
    out = os.fspath(out)
    manifest = load_manifest(out)
    say = say_to(progress)
    check_out(out, manifest, trust_source=trust_source, say=say)
    found = locate(manifest, out, named_source)
    report = {"out": os.path.abspath(out), "atol": atol, "rtol": rtol, "seed": seed, "batch": batch, "steps": steps,
              "rows": file_rows(out, manifest) + ([found] if found else [])}
    unchanged = source_unchanged(manifest)
    if manifest.road == "graph":
        report["rows"] += saved_model_rows(manifest, out, atol, rtol, seed, unchanged, say)
    elif manifest.road == "model":
        report["rows"] += keras_model_rows(manifest, out, atol, rtol, seed, unchanged, say)
        report["rows"] += program_rows(manifest, out, atol, rtol, seed, unchanged, say)  # a .pt2: by PyTorch
    elif "keras" in manifest.get("model_artifacts", {}):  # a Keras 2 .h5 rebuilt whole in Keras 3
        say("keras/model.keras: the rebuilt whole model")
        report["rows"].append(dict(rebuilt_model_row(manifest, out, unchanged, seed, atol, rtol),
                                   stack="(whole model)", judge=KERAS2_JUDGE))
    source, judged_by = _judge_source(manifest, out, unchanged)
    for stack in manifest["stacks"]:
        report["rows"] += _stack_rows(manifest, out, stack, source, judged_by, atol, rtol, seed, batch, steps, say)
    if source is not None:
        report["rows"].append(_copied_row(manifest, out, source))
    report["not_judged"] = _unjudged(report["rows"], allow_unjudged)
    report["passed"] = all(r["passed"] is not False for r in report["rows"])
    write_report(os.path.join(out, REPORT), report)
    return report


def _unjudged(rows: List[Dict[str, Any]], allow: bool) -> int:
    """How many rows no independent judge could judge (``unjudged``: left neither passed nor failed by their
    maker). Without ``allow`` each fails, its note saying how to accept it; with it each stays unjudged."""
    count = 0
    for row in rows:
        if row.get("unjudged") and row["passed"] is not False:
            count += 1
            if not allow:
                row["passed"] = False
                row["note"] = "; ".join(filter(None, [row.get("note"), "a row no independent judge could judge "
                                                      "fails (verify --source PATH names a moved source; "
                                                      "--allow-unjudged accepts it)"]))
    return count


def _judge_source(manifest, out, unchanged):
    """(the source the judge reads buffers from, words for the report): the source itself when it is unchanged;
    for a whole Keras model whose file is gone, the copy export kept in OUT; else None (OUT/checkpoint read back)."""
    path, words = manifest["source"].get("checkpoint", ""), "source buffer"
    if not unchanged:
        copy = os.path.join(out, manifest.get("model_artifacts", {}).get("keras", ""))
        if manifest.road != "model" or not os.path.isfile(copy):
            return None, None
        path, words = copy, "buffer in OUT/keras/model.keras (source unavailable)"
    modes = {s["spec"].get("mode") for s in manifest.get("stacks", [])} & {"rnn_tanh", "rnn_relu"}
    try:  # an nn.RNN whose file leaves tanh or relu to --mode: the mode convert was given
        return open_source(path, mode=modes.pop() if len(modes) == 1 else None), words
    except CudnnPortError:
        return None, None


def _stack_rows(manifest, out, stack, source, judged_by, atol, rtol, seed, batch, steps, say):
    try:
        spec = RNNSpec(**stack["spec"])
        layout_rows = []
        if source is not None and stack["variable"] in source.shapes:
            canon, layout_rows = _read_buffer(spec, source.get(stack["variable"]))
            independent = _independent_stack(manifest, source, stack["variable"], spec)
            if independent is not None:
                canon, judged_by = independent
            elif manifest.road != "model":  # a checkpoint's buffer: its neighbours may contradict it
                layout_rows += _neighbour_rows(source, stack["variable"], spec)
        else:
            canon, judged_by = converted_canon(manifest, out, stack, spec), "converted checkpoint (source unavailable)"
    except (TypeError, KeyError, ValueError, CudnnPortError) as e:  # the manifest's spec fits no buffer
        return [dict(failed_row("manifest spec", e), stack=stack.get("variable"), judge=None)]
    x, lengths, h, c = sample_batch(spec, batch, steps, seed)
    c = c if spec.mode == "lstm" else None
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
        canon, x, lengths, *states, dtype=np.float32, ulps=u), rtol) for u in (2, -2)))
        for w, s, states in ((want, single, (h, c)), (want_zero, single_zero, ())))
    rows = layout_rows
    if manifest.road != "model" or "checkpoint" in manifest.get("formats", []):
        say(f"{stack['variable']}: checkpoint")
        rows.append(checkpoint_judge(manifest, out, stack, spec, (x, lengths, h, c), want, atol, rtol))
    rows += stack_artifact_rows(out, stack, spec, canon, (x, lengths, h, c), want, want_zero, (atol, atol_zero), rtol,
                                say)
    original = source_type(manifest["source"]["checkpoint"]).original if source is not None else None
    if original is not None:  # the source's own framework runs the stack from the file (PyTorch's nn.LSTM)
        say(f"{stack['variable']}: the source's own framework")
        rows.append(_call(original, manifest["source"]["checkpoint"], stack["variable"], spec, (x, lengths, h, c),
                          want, atol, rtol))
    # the fused cuDNN op's bound is this case's own (4x its fp32 floor, states fed), never the artifacts' errors:
    # an artifact that errs within its tolerance must not loosen the bound of the GPU that should match it
    rows.append(gpu_row(spec, canon, (x, lengths, h, c), want, atol, rtol))
    self_judged = str(judged_by).startswith("converted checkpoint")  # the conversion's own output: no judge
    for row in rows:
        row.setdefault("judge", judged_by if row["passed"] is not None else None)
        row["stack"] = stack["variable"]
        if self_judged and row["passed"] and row.get("judge") == judged_by:
            row.update(passed=None, unjudged=True, note="; ".join(filter(None, [
                row.get("note"), f"agrees with {judged_by.split(' (')[0]}, which is the conversion's own output: "
                                 "the source is gone or changed"])))
        if scale < 1:
            steps = f"{x.shape[1]} step{'s' if x.shape[1] > 1 else ''}"
            row["note"] = "; ".join(filter(None, [row.get("note"), f"{steps}, inputs and states scaled by {scale:g}: "
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
    judge = source_type(manifest["source"]["checkpoint"]).judge  # the source file's own rule, by the registry
    if judge is not None:
        return _call(judge, manifest["source"]["checkpoint"], variable, spec)
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


def case_floor(want: List[Optional[np.ndarray]], got: List[Optional[np.ndarray]], rtol: float = RTOL) -> float:
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


def _copied_row(manifest, out, source):
    """Every variable OUT/checkpoint copied from the source, byte for byte equal to the source's."""
    copied = manifest.get("copied", [])
    try:
        ckpt = Checkpoint(os.path.join(out, "checkpoint"))
        differ = [n for n in copied if n not in ckpt.shapes or
                  np.asarray(ckpt.get(n)).tobytes() != np.asarray(source.get(n)).tobytes()]
    except CudnnPortError as e:
        return dict(failed_row("checkpoint (copied variables)", e), stack="(all)", judge="source")
    return {"artifact": "checkpoint (copied variables)", "stack": "(all)", "max_abs": None, "max_rel": None,
            "passed": not differ, "judge": "source",
            "note": f"{len(copied)} equal to the source" if not differ else f"differ from the source: {differ[:3]}"}


def format_table(report: Dict[str, Any]) -> str:
    lines = [f"{'stack':<28} {'artifact':<40} {'max abs err':>12} {'max rel err':>12}  result", "-" * 104]
    for r in report["rows"]:
        result = "info" if r.get("reported") else "NOT JUDGED" if r.get("unjudged") and r["passed"] is None else \
            "skip" if r["passed"] is None else "pass" if r["passed"] else "FAIL"
        fmt = lambda v: f"{v:12.2e}" if v is not None else f"{'-':>12}"
        lines.append(f"{str(r['stack'])[:28]:<28} {r['artifact'][:40]:<40} {fmt(r['max_abs'])} {fmt(r['max_rel'])}  "
                     f"{result}" + (f"  ({r['note']})" if r.get("note") else ""))
    judges = sorted({r["judge"] for r in report["rows"] if r.get("judge")})
    lines.append(f"tolerance: |err| <= {report['atol']:g} + {report['rtol']:g} * |judge| (rows with their own "
                 f"tolerance say so); judges: {'; '.join(judges) or '-'}")
    unjudged = sum(1 for r in report["rows"] if r.get("unjudged") and r["passed"] is None)
    lines.append("FAILED" if not report["passed"] else f"PASSED ({unjudged} row{'s' if unjudged != 1 else ''} not "
                 "judged)" if unjudged else "PASSED")
    return "\n".join(lines)
