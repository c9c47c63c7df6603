"""Parity report: every artifact of a convert output against the NumPy reference of cuDNN's math.

The judge's weights come from the source buffer when the source checkpoint is still where the manifest says
and its files hash the same; otherwise from OUT/checkpoint (the report says which). Inputs are seeded random
batches with ragged lengths (including 1 and the full length) and non-zero initial states.

Where TensorFlow sees a GPU, the fused cuDNN op itself (one ``CudnnRNNV3`` call on the same buffer) is one more
row; elsewhere that row says it was skipped.

An element passes when ``|artifact - reference| <= atol + rtol * |reference|``.

    report = verify("out/")            # also writes out/parity.json
    assert report["passed"]
"""
import json
import os

import numpy as np

from . import reference
from .checkpoint import Checkpoint, sha256
from .errors import CudnnPortError
from .exports import io_names
from .exports.runners import RUNNERS
from .layout import RNNSpec, unpack
from .readers import open_source
from .targets import reader

ATOL, RTOL = 1e-5, 1e-4


def load_manifest(out):
    path = os.path.join(os.fspath(out), "manifest.json")
    try:
        with open(path) as f:
            manifest = json.load(f)
    except (OSError, ValueError):
        manifest = None
    if not isinstance(manifest, dict) or manifest.get("tool") != "cudnn-port":
        raise CudnnPortError(f"{out} is not a cudnn-port output (no readable manifest.json of ours); "
                             "run cudnn-port convert CKPT OUT first and verify OUT")
    return manifest


def sample_batch(spec, batch=4, steps=9, seed=0):
    """Seeded inputs: x [B, T, I], lengths with 1 and T among them, initial_h / initial_c [L*D, B, H]."""
    rng = np.random.default_rng(seed)
    x = rng.normal(size=(batch, steps, spec.input_size)).astype(np.float32)
    lengths = np.concatenate([[steps, 1], rng.integers(1, steps + 1, size=max(0, batch - 2))])[:batch].astype(np.int32)
    x[np.arange(steps)[None, :] >= lengths[:, None]] = 0.0
    shape = (spec.num_pseudo_layers, batch, spec.num_units)
    return x, lengths, (rng.normal(size=shape) * 0.5).astype(np.float32), (rng.normal(size=shape) * 0.5).astype(np.float32)


def _judge_canon(manifest, out, stack, spec):
    source = manifest["source"]
    prefix = source["checkpoint"]
    try:
        unchanged = bool(source["files"]) and all(sha256(os.path.join(os.path.dirname(prefix), name)) == digest
                                                  for name, digest in source["files"].items())
    except OSError:
        unchanged = False
    if unchanged:
        return unpack(spec, open_source(prefix).get(stack["variable"])), "source buffer"
    return converted_canon(manifest, out, stack, spec), "converted checkpoint (source unavailable)"


def converted_canon(manifest, out, stack, spec):
    """The stack as read back from OUT/checkpoint by the style's own reader."""
    ckpt = Checkpoint(os.path.join(out, "checkpoint"))
    tensors = {name: ckpt.get(name) for name in stack["targets"]}
    return reader(manifest["style"], stack.get("scheme")).read(tensors, stack["prefix"], spec)


def _compare(name, got, want, atol, rtol, note=""):
    rows_abs, rows_rel, ok = [], [], True
    for g, w in zip(got, want):
        if w is None:
            continue
        g, w = np.asarray(g, np.float64), np.asarray(w, np.float64)
        if g.shape != w.shape:
            return {"artifact": name, "max_abs": None, "max_rel": None, "passed": False,
                    "note": f"shape {list(g.shape)} vs reference {list(w.shape)}"}
        diff = np.abs(g - w)
        ok &= bool(np.all(diff <= atol + rtol * np.abs(w)))
        rows_abs.append(float(diff.max(initial=0.0)))
        big = np.abs(w) > atol
        rows_rel.append(float((diff[big] / np.abs(w[big])).max(initial=0.0)))
    return {"artifact": name, "max_abs": max(rows_abs), "max_rel": max(rows_rel), "passed": ok, "note": note}


def _runners(manifest, out, stack, spec):
    """(artifact name, callable(x, lengths, h, c) -> (outputs, final_h, final_c)) for what OUT holds."""
    arts = stack["artifacts"]
    names_in, _ = io_names(spec)

    def feeds(x, lengths, h, c):
        return dict(zip(names_in, (x, lengths, h, c)))

    def checkpoint_cpu_graph(x, lengths, h, c):
        import tensorflow as tf

        from .tf_graph import stack_forward

        canon = converted_canon(manifest, out, stack, spec)
        fn = tf.function(lambda *a: stack_forward(canon, *a), autograph=False)
        return [None if t is None else t.numpy() for t in fn(x, lengths, h, c if spec.mode == "lstm" else None)]

    yield "checkpoint (TF CPU graph)", checkpoint_cpu_graph
    labels = {"saved_model": "saved_model", "graphdef": "graphdef", "onnx": "onnx (onnxruntime)"}
    for kind, label in labels.items():
        if kind in arts:
            def run(x, lengths, h, c, kind=kind):
                return RUNNERS[kind](os.path.join(out, arts[kind]), spec)(feeds(x, lengths, h, c))

            yield label, run


def verify(out, atol=ATOL, rtol=RTOL, seed=0, batch=4, steps=9, progress=None):
    """Check every artifact of convert output ``out``; write ``out/parity.json``; return the report dict."""
    out = os.fspath(out)
    manifest = load_manifest(out)
    say = progress or (lambda message: None)
    report = {"out": os.path.abspath(out), "atol": atol, "rtol": rtol, "seed": seed, "batch": batch, "steps": steps,
              "rows": [], "passed": True}
    if manifest.get("kind") in ("saved_model", "keras_model"):
        report["rows"] = _graph_rows(manifest, out, atol, rtol, seed, batch, steps, say)
        report["passed"] = all(r["passed"] for r in report["rows"])
    for stack in manifest["stacks"]:
        spec = RNNSpec(**stack["spec"])
        canon, judged_by = _judge_canon(manifest, out, stack, spec)
        x, lengths, h, c = sample_batch(spec, batch, steps, seed)
        want = reference.forward(canon, x, lengths, h, c)
        for name, run in _runners(manifest, out, stack, spec):
            say(f"{stack['variable']}: {name}")
            try:
                row = _compare(name, run(x, lengths, h, c), want, atol, rtol)
            except Exception as e:  # an artifact that fails to load or run is a failed check, not a crash
                row = failed_row(name, e)
            row.update(stack=stack["variable"], judge=judged_by)
            report["rows"].append(row)
            report["passed"] &= row["passed"]
        gpu = _gpu_row(stack, spec, canon, (x, lengths, h, c), atol, rtol)
        gpu["judge"] = judged_by if gpu["passed"] is not None else None
        report["rows"].append(gpu)
        report["passed"] &= gpu["passed"] is not False
    tmp = os.path.join(out, ".parity.json.tmp")
    with open(tmp, "w") as f:
        json.dump(report, f, indent=2)
    os.replace(tmp, os.path.join(out, "parity.json"))
    return report


def sample_inputs(named_specs, seed=0, batch=3, steps=7, pad_last=False):
    """Seeded feeds for (name, TensorSpec) pairs, drawn in the order given: floats N(0, 1), integers in [1, 4)
    (token ids, lengths); unknown dims ``batch`` first and ``steps`` after. ``pad_last``: the last row is zero from
    step 2 on (right padding, to exercise masks)."""
    rng = np.random.default_rng(seed)
    feeds = {}
    for name, spec in named_specs:
        shape = [d if d is not None else (batch if i == 0 else steps) for i, d in enumerate(spec.shape.as_list())]
        if spec.dtype.is_floating:
            value = rng.normal(size=shape).astype(spec.dtype.as_numpy_dtype)
        else:
            value = rng.integers(1, 4, size=shape).astype(spec.dtype.as_numpy_dtype)
        if pad_last and len(shape) >= 2 and shape[0] > 1:
            value[-1, 2:] = 0
        feeds[name] = value
    return feeds


def failed_row(name, error):
    """The report row of an artifact that failed to load or run: a failed check, not a crash."""
    text = str(error)
    return {"artifact": name, "max_abs": None, "max_rel": None, "passed": False,
            "note": f"{type(error).__name__}: {text.splitlines()[0] if text else ''}"}


def _graph_rows(manifest, out, atol, rtol, seed, batch, steps, say):
    """A converted SavedModel: every signature runs on CPU with finite outputs, and the ONNX model agrees with
    the serving signature. (The NumPy reference judges the replacement of each node in the test suite; a whole
    graph has no reference here.)"""
    import tensorflow as tf

    arts, rows = manifest["model_artifacts"], []
    if "saved_model" not in arts:
        return rows
    loaded = tf.saved_model.load(os.path.join(out, arts["saved_model"]))
    serving = None
    for name in sorted(loaded.signatures):
        say(f"saved_model: signature {name}")
        fn = loaded.signatures[name]
        feeds = sample_inputs(sorted(fn.structured_input_signature[1].items()), seed, batch, steps)
        try:
            results = {k: v.numpy() for k, v in fn(**feeds).items()}
            finite = all(np.isfinite(v).all() for v in results.values() if v.dtype.kind == "f")
            row = {"artifact": f"saved_model [{name}]", "max_abs": None, "max_rel": None, "passed": finite,
                   "note": "runs on CPU" + ("" if finite else "; NaN/Inf in its outputs")}
        except Exception as e:
            row = failed_row(f"saved_model [{name}]", e)
            results = None
        if name == "serving_default" or serving is None:
            serving = (feeds, results)
        rows.append(dict(row, stack="(whole graph)", judge=None))
    if "onnx" in arts and serving and serving[1] is not None:
        import onnxruntime as ort

        say("onnx: against the SavedModel")
        feeds, want = serving
        try:
            session = ort.InferenceSession(os.path.join(out, arts["onnx"]), providers=["CPUExecutionProvider"])
            got = session.run([o.name for o in session.get_outputs()], feeds)
            names = [o.name for o in session.get_outputs()]
            row = _compare("onnx (onnxruntime)", got, [want[n] for n in names], atol, rtol)
        except Exception as e:
            row = failed_row("onnx (onnxruntime)", e)
        rows.append(dict(row, stack="(whole graph)", judge="the converted SavedModel"))
    return rows


def _gpu_row(stack, spec, canon=None, batch=None, atol=ATOL, rtol=RTOL):
    """The fused cuDNN op itself (one CudnnRNNV3 call on the source's buffer), where TensorFlow sees a GPU;
    on CPU the row says it was skipped."""
    row = {"artifact": "cudnn (GPU)", "max_abs": None, "max_rel": None, "passed": None,
           "stack": stack["variable"], "judge": None}
    try:
        import tensorflow as tf

        gpus = tf.config.list_logical_devices("GPU")
    except ImportError:
        gpus = []
    if not gpus or canon is None:
        return dict(row, note="skipped: TensorFlow sees no GPU")
    from .layout import pack
    from .tf_graph import cudnn_forward

    x, lengths, h, c = batch
    try:
        with tf.device(gpus[0].name):
            got = cudnn_forward(spec, tf.constant(pack(canon).astype("float32")), x, lengths, h,
                                c if spec.mode == "lstm" else None)
        result = _compare("cudnn (GPU)", [None if t is None else t.numpy() for t in got],
                          reference.forward(canon, x, lengths, h, c), atol, rtol)
    except Exception as e:  # a GPU that cannot run the op is a failed check, not a crash
        result = failed_row("cudnn (GPU)", e)
    return dict(row, **result)


def format_table(report):
    lines = [f"{'stack':<28} {'artifact':<28} {'max abs err':>12} {'max rel err':>12}  result",
             "-" * 92]
    for r in report["rows"]:
        result = "skip" if r["passed"] is None else "pass" if r["passed"] else "FAIL"
        fmt = lambda v: f"{v:12.2e}" if v is not None else f"{'-':>12}"  # noqa: E731
        lines.append(f"{r['stack']:<28} {r['artifact']:<28} {fmt(r['max_abs'])} {fmt(r['max_rel'])}  {result}"
                     + (f"  ({r['note']})" if r.get("note") else ""))
    graph = [r["judge"] for r in report["rows"] if r.get("judge") and r["stack"] == "(whole graph)"]
    stacks = [r["judge"] for r in report["rows"] if r.get("judge") and r["stack"] != "(whole graph)"]
    parts = [f"whole graph: {graph[0]}"] if graph else []
    parts += [f"NumPy reference on {stacks[0]} weights"] if stacks else []
    judge = "; ".join(parts) or "-"
    lines.append(f"tolerance: |err| <= {report['atol']:g} + {report['rtol']:g} * |reference|; judge: {judge}")
    lines.append("PASSED" if report["passed"] else "FAILED")
    return "\n".join(lines)
