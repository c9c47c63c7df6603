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
import os
from typing import TYPE_CHECKING, Any, Dict, List, Optional

import numpy as np

from .errors import CudnnPortError
from .manifest import MANIFEST, load_manifest
from .judging.parity import ATOL, RTOL, failed_row, write_report
from .paths import sha256
from .progress import Progress, say_to
from .checkpoint import Checkpoint
from .exports.runners import loads_shared
from .graphs.trust import check_out
from .judging.keras2_model import JUDGE as KERAS2_JUDGE, rebuilt_model_row
from .judging.model_rows import keras_model_rows, saved_model_rows
from .judging.stack_case import judge_stack
from .judging.torch_program import program_rows
from .judging.source_place import locate
from .quiet import library_call
from .readers import open_source

if TYPE_CHECKING:
    from .manifest import Manifest

REPORT = "parity.json"


def file_rows(out: str, manifest: "Manifest") -> List[Dict[str, Any]]:
    """One row: every listed file present with its sha256, no unlisted file; a symbolic link or a name outside OUT
    fails it (OUT is never written through links)."""
    listed = manifest.files
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
    prefix, files = manifest.source.checkpoint, manifest.source.files
    base = prefix if os.path.isdir(prefix) else os.path.dirname(prefix)
    try:
        return bool(files) and all(sha256(os.path.join(base, name)) == digest for name, digest in files.items())
    except OSError:
        return False


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
    elif "keras" in manifest.model_artifacts:  # a Keras 2 .h5 rebuilt whole in Keras 3
        say("keras/model.keras: the rebuilt whole model")
        report["rows"].append(dict(rebuilt_model_row(manifest, out, unchanged, seed, atol, rtol),
                                   stack="(whole model)", judge=KERAS2_JUDGE))
    source, judged_by = _judge_source(manifest, out, unchanged)
    for stack in manifest.stacks:
        report["rows"] += judge_stack(manifest, out, stack, source, judged_by, atol, rtol, seed, batch, steps, say)
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
    path, words = manifest.source.checkpoint, "source buffer"
    if not unchanged:
        copy = os.path.join(out, manifest.model_artifacts.get("keras", ""))
        if manifest.road != "model" or not os.path.isfile(copy):
            return None, None
        path, words = copy, "buffer in OUT/keras/model.keras (source unavailable)"
    modes = {s.spec.mode for s in manifest.stacks} & {"rnn_tanh", "rnn_relu"}
    try:  # an nn.RNN whose file leaves tanh or relu to --mode: the mode convert was given
        return open_source(path, mode=modes.pop() if len(modes) == 1 else None), words
    except CudnnPortError:
        return None, None



def _copied_row(manifest, out, source):
    """Every variable OUT/checkpoint copied from the source, byte for byte equal to the source's."""
    copied = manifest.copied or []
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
