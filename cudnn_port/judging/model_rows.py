"""verify's rows for whole graphs: a converted SavedModel source, and a whole Keras model's export. The feeds
they draw are :mod:`.signature_feeds`'s; a whole model's int8 ONNX row is :mod:`.int8_model`'s."""
import os
from typing import TYPE_CHECKING, Any, Callable, Dict, List, NamedTuple, Optional, Sequence, Tuple
import json

import numpy as np

from ..deps import import_tf
from .graph_inputs import could_not_run
from .parity import compare, failed_row, model_feeds
from ..exports.runners import onnx_session
from .tasks import task_row
from ..formats import derived_keys
from ..formats.jobs import ModelJob
from ..keras_models.model_inputs import from_records
from ..keras_models.precision import float32_policy, float32_twin
from ..readers import loads_as_keras, translated_from
from ..readers.keras_model import load_model_file
from ..keras_models.streaming_model import streaming_twin
from ..formats.jobs import GraphCheck
from .artifact_rows import graph_artifact_rows, model_artifact_rows
from .int8_model import int8_model_row
from .original import computes_in_float16, original_judge
from .signature_feeds import signature_feeds, valid_steps
from .stock import model_judge
from ..formats.keras import WHOLE_MODEL

if TYPE_CHECKING:
    from ..manifest import Manifest
    import keras


def saved_model_rows(manifest: "Manifest", out: str, atol: float, rtol: float, seed: int, unchanged: bool,
                     say: Callable[[str], None]) -> List[Dict[str, Any]]:
    """A converted SavedModel: every signature runs on CPU and is judged against the original's same signature,
    endpoint by endpoint (:func:`.original.original_judge`: the original run on CPU, each cuDNN node it calls
    computed by the NumPy reference, where it can run and is ``unchanged`` since the conversion checked it); then
    every other artifact of the graph road runs the serving signature (manifest ``onnx_signature``) through its
    format's runtime (:func:`.artifact_rows.graph_artifact_rows`) against the original's outputs. Where the
    original cannot judge, the rows say why and are ``unjudged`` (verify fails them unless the user accepts
    unjudged rows): the artifacts are then only compared with the converted SavedModel, a self-consistency check
    that fails a disagreement and never passes an agreement. Inputs take what the model accepts
    (:func:`.signature_feeds.signature_feeds`); one that raises is a failed row saying why in one line
    (:func:`could_not_run`)."""
    arts = manifest.model_artifacts
    rows: List[Dict[str, Any]] = []
    if "saved_model" not in arts:
        return rows
    job = GraphCheck(out, manifest, manifest.onnx_signature or "serving_default")
    try:
        loaded = job.saved_model(os.path.join(out, arts["saved_model"]))
    except Exception as e:  # noqa: BLE001 (a SavedModel that does not load is a failed check)
        return [dict(could_not_run("saved_model", "loading it", e), stack="(whole graph)", judge=None)]
    serving: Optional[Tuple[str, Dict[str, np.ndarray], Optional[Dict[str, Any]], Optional[Dict[str, Any]]]]
    serving, judge = None, "the original SavedModel" + (", each cuDNN node by the NumPy reference"
                                                         if manifest.nodes else "")
    for name in sorted(loaded.signatures):
        say(f"saved_model: signature {name}")
        feeds, note, original, said = _judged_feeds(manifest, name, loaded.signatures[name], seed, unchanged)
        results: Optional[Dict[str, np.ndarray]]
        try:
            results = {k: v.numpy() for k, v in loaded.signatures[name](**feeds).items()}
        except Exception as e:  # noqa: BLE001
            row, results, original = dict(could_not_run(f"saved_model [{name}]", "TensorFlow", e), judge=None), None, \
                None
        else:
            row = dict(_against(f"saved_model [{name}]", results, original, atol, rtol), judge=judge) \
                if original is not None else dict(said[0], judge=None)
            row["note"] = "; ".join(filter(None, ["runs on CPU" + note, row.get("note")]))
        if name == job.signature or serving is None:
            serving = (name, feeds, results, original)
        rows.append(dict(row, stack="(whole graph)"))
    if serving is None:
        return rows
    job.signature, feeds, want, original = serving
    if want is None:
        return rows
    if original is not None:
        half = computes_in_float16(manifest.source.checkpoint)
        valid = None if manifest.nodes else valid_steps(feeds)
        return rows + [dict(r, stack="(whole graph)", judge=judge)
                       for r in graph_artifact_rows(job, feeds, original, "saved_model", atol, rtol, say, half,
                                                    valid)]
    return rows + [dict(_self_consistency(r), stack="(whole graph)", judge="OUT/saved_model (self-consistency only)")
                   for r in graph_artifact_rows(job, feeds, want, "saved_model", atol, rtol, say)]


def _judged_feeds(manifest, name, function, seed, unchanged):
    """(feeds, note, the original's outputs or None, rows saying why not) for signature ``name``: the feeds of
    :func:`.signature_feeds.signature_feeds` with a row of nothing but padding where the original runs it (Keras'
    cuDNN graphs assert that no row is fully masked: there the same feeds without that row, and the note says why);
    without the original to say so, none."""
    feeds, note = signature_feeds(function, seed, empty_row=True)
    original, said = original_judge(manifest, name, feeds, unchanged)
    if original is not None:
        return feeds, note, original, said
    refused = bool(said) and said[0].get("ran") is False  # it ran, and raised
    feeds, plain = signature_feeds(function, seed)
    if plain == note:  # no row was emptied: the original's answer stands
        return feeds, note, original, said
    original, said = original_judge(manifest, name, feeds, unchanged)
    if refused and original is not None:
        plain += "; no row of only padding: the original refuses one"
    return feeds, plain, original, said



def _against(row: str, got: Dict[str, np.ndarray], want: Dict[str, np.ndarray], atol: float,
             rtol: float) -> Dict[str, Any]:
    """``got`` against the judge's ``want`` ({output name: array}), output by output."""
    names = sorted(want)
    if set(got) != set(names):
        return {"artifact": row, "max_abs": None, "max_rel": None, "passed": False,
                "note": f"outputs {sorted(got)}, the judge's {names}"}
    return compare(row, [got[n] for n in names], [want[n] for n in names], atol, rtol)


def _self_consistency(row: Dict[str, Any], what: str = "OUT/saved_model") -> Dict[str, Any]:
    """An artifact's row against the conversion's own output ``what``: a disagreement fails; an agreement is not a
    pass (the conversion cannot vouch for itself), only ``unjudged``."""
    if row["passed"] is not True:
        return row
    return dict(row, passed=None, unjudged=True, note="; ".join(filter(None, [
        row.get("note"), f"not judged: agrees with {what}, a self-consistency check, not a judge"])))



def keras_model_rows(manifest: "Manifest", out: str, atol: float, rtol: float, seed: int, unchanged: bool,
                     say: Callable[[str], None]) -> List[Dict[str, Any]]:
    """A whole Keras model's SavedModel, GraphDef and ONNX against the model with each fused layer rebuilt from
    stock Keras layers (from the source .keras file, or from OUT/keras/model.keras when the source is gone); the
    int8 model by its task cost, when OUT holds a task."""
    source = manifest.source.checkpoint
    copy = os.path.join(out, manifest.model_artifacts.get("keras", WHOLE_MODEL))
    path, where = (source, "the source") if unchanged and os.path.isfile(source) and \
        loads_as_keras(source) else (copy, "OUT/keras/model.keras")  # a .pt2: its translation
    try:
        original = load_model_file(path)
        with float32_policy():
            model, policy = float32_twin(original)
            model = streaming_twin(model)[0]  # stateful layers: states in and out, as exported
    except Exception as e:  # noqa: BLE001 (a model that does not load is a failed check)
        return [dict(failed_row(f"whole model ({where})", e), stack="(whole model)", judge=None)]
    run = whole_model_run(out, manifest, model, seed, atol, rtol, say)
    rows, names, feeds, want, judged = run.rows, run.names, run.feeds, run.want, run.judged
    judge_name = f"{run.judge} ({where})"
    if translated_from(manifest.source.format):  # OUT's keras/model.keras is a .pt2's translation, the
        # conversion's own output: its artifacts are judged by PyTorch's kernels instead (judging.torch_program)
        rows = []
    if policy:
        rows.append(precision_row(original, policy, run))
        judge_name = f"{run.judge}, rebuilt in float32 from the {policy} original ({where})"
    int8 = next((k for k, of in derived_keys("int8").items() if of == "onnx" and k in manifest.model_artifacts), None)
    if int8:
        rows.append(int8_model_row(out, manifest, names, feeds, want, int8, model, judged))
    if manifest.task and int8 and len(names) == 1:
        with open(os.path.join(out, manifest.task)) as f:
            task = json.load(f)
        say("task: fp32 and int8 ONNX")
        runs = [onnx_session(os.path.join(out, manifest.model_artifacts[k])) for k in ("onnx", int8)]
        try:
            rows.append(task_row(task, *(lambda ids, s=s: s.run(["output_0"], {names[0]: ids})[0] for s in runs)))
        except Exception as e:  # noqa: BLE001
            rows.append(failed_row("task: next-token loss", e))
    return [dict(r, stack="(whole model)", judge=judge_name) for r in rows]


class ModelRun(NamedTuple):
    """A whole model's artifacts run on one draw of inputs: the rows, the judge's name, its input names, the feeds
    and the judge's outputs."""
    rows: List[Dict[str, Any]]
    judge: str
    names: List[str]
    feeds: Dict[str, np.ndarray]
    want: List[np.ndarray]
    judged: List[str]  # the feeds' names in the order of the judge's model.inputs (:func:`judge_binding`)

    def judge_inputs(self) -> List[np.ndarray]:
        """The feeds, one per input of the judging model, bound by name."""
        return [self.feeds[n] for n in self.judged]


def whole_model_run(out: str, manifest: "Manifest", model: Any, seed: int, atol: float, rtol: float,
                    say: Callable[[str], None]) -> ModelRun:
    """Every whole-model artifact of ``out`` (each through its format's runtime,
    :func:`.artifact_rows.model_artifact_rows`) against ``model`` with each fused layer's stack computed by the
    NumPy reference (:func:`.stock.model_judge`), on seeded inputs padded as the model defines padding (a row of
    only padding where the judge runs one; :func:`.parity.model_feeds`), and ids in each Embedding's range for the
    inputs an Embedding reads; the judge takes each input by its own name (:func:`judge_binding`). The one
    whole-model check: export's parity and verify's rows both run it."""
    tf = import_tf()
    names = manifest.model_inputs or [t.name.split(":")[0] for t in model.inputs]  # as exported: a reloaded
    specs = from_records(manifest.model_input_specs) or \
        [tf.TensorSpec(t.shape, t.dtype) for t in model.inputs]  # model may name unnamed inputs otherwise
    judge, judge_name = model_judge(model)
    judged = judge_binding(model, names)
    axes: Dict[str, Sequence[Optional[str]]] = {r.name: r.axes for r in manifest.model_input_specs or [] if r.axes}
    feeds = model_feeds(model, names, specs, seed, axes=axes)
    try:  # a row of nothing but padding, where the model allows one (its judge runs it to finite outputs)
        want = judge([feeds[n] for n in judged])
        allowed = all(np.all(np.isfinite(w)) for w in want)
    except Exception:  # noqa: BLE001 (e.g. a masked mean over no step: the same feeds without that row)
        allowed = False
    if not allowed:
        feeds = model_feeds(model, names, specs, seed, empty_row=False, axes=axes)
        want = judge([feeds[n] for n in judged])
    job = ModelJob(model, [tf.TensorSpec(s.shape, s.dtype, name=n) for n, s in zip(names, specs)], out, _traces_nothing,
                   manifest=manifest, count=len(want))
    return ModelRun(model_artifact_rows(out, job, feeds, want, atol, rtol, say), judge_name, names, feeds, want,
                    judged)


def _traces_nothing(path: str) -> Any:
    """The trace of a :class:`ModelJob` whose artifacts are written: their runtimes run the files, nothing traces."""
    raise RuntimeError(f"the artifacts are written: nothing traces the model on the {path!r} path while judging them")


def judge_binding(model: Any, names: List[str]) -> List[str]:
    """``names`` (the inputs the artifacts take, as the manifest records them) in the order of ``model.inputs``,
    each matched by the judging model's own input name, so that the judge takes each feed by its name, not by the
    manifest's order (an export that bound its inputs in another order than the model's is judged by the model's).
    Positional only where the model's names are not those (a model whose inputs Keras named otherwise on reload)."""
    own = [t.name.split(":")[0] for t in model.inputs]
    return own if sorted(own) == sorted(names) else list(names)


def precision_row(original: "keras.Model", policy: str, run: ModelRun) -> Dict[str, Any]:
    """The distance from the judge (the model in float32, which every artifact matches) to ``original``'s own
    outputs in ``policy`` (mixed precision) on the same inputs: reported, not judged (``passed`` None); the
    original computes in half precision, the artifacts in float32."""
    name = f"original in {policy} (reported)"
    try:
        got = model_judge(original)[0](run.judge_inputs())
    except Exception as e:  # noqa: BLE001
        return dict(failed_row(name, e), passed=None)
    row = compare(name, got, run.want, np.inf, 0.0)
    half = policy.split("_")[-1]
    return dict(row, passed=None, reported=True, max_rel=None, note=f"the original computes in {half}, the artifacts "
                "in float32: its distance to them is its own rounding, reported and not judged")
