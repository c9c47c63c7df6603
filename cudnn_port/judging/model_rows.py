"""verify's rows for whole graphs: a converted SavedModel source, and a whole Keras model's export."""
import os
from typing import TYPE_CHECKING, Any, Callable, Dict, List, NamedTuple, Optional, Tuple
import json

import numpy as np

from ..deps import import_tf
from .graph_inputs import could_not_run, masking_values, text_inputs, token_vocabularies
from .parity import EMPTY_ROW, PAD_FROM, compare, failed_row, model_feeds, sample_inputs
from . import cudnn_api
from ..exports.runners import onnx_session
from .tasks import task_row
from ..formats import derived_keys
from ..formats.jobs import ModelJob
from ..layer_paths import judged_by
from ..model_inputs import as_model_takes, from_records
from ..precision import float32_policy, float32_twin
from ..readers import loads_as_keras, translated_from
from ..readers.keras_model import load_model_file
from ..stock_fused import DIRECTIONS
from ..stock_keras import rewrite, unwrapped
from ..streaming_model import streaming_twin
from ..formats.jobs import GraphCheck
from .artifact_rows import graph_artifact_rows, model_artifact_rows
from .int8 import FLOOR_MAX, FLOOR_MEAN, K_MAX, K_MEAN, LSTM_SETTINGS, ideal_int8_forward, infer_settings, quantized
from .keras_weights import stock_stack
from .original import computes_in_float16, original_judge
from .stock import ReferenceStack, model_judge, model_outputs
from ..formats.keras import WHOLE_MODEL

if TYPE_CHECKING:
    from ..manifest import Manifest
    import keras
    import tensorflow as tf


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
    (:func:`signature_feeds`); one that raises is a failed row saying why in one line (:func:`could_not_run`)."""
    arts, rows = manifest["model_artifacts"], []
    if "saved_model" not in arts:
        return rows
    job = GraphCheck(out, manifest, manifest.get("onnx_signature", "serving_default"))
    try:
        loaded = job.saved_model(os.path.join(out, arts["saved_model"]))
    except Exception as e:  # noqa: BLE001 (a SavedModel that does not load is a failed check)
        return [dict(could_not_run("saved_model", "loading it", e), stack="(whole graph)", judge=None)]
    serving, judge = None, "the original SavedModel" + (", each cuDNN node by the NumPy reference"
                                                         if manifest.get("nodes") else "")
    for name in sorted(loaded.signatures):
        say(f"saved_model: signature {name}")
        feeds, note, original, said = _judged_feeds(manifest, name, loaded.signatures[name], seed, unchanged)
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
    if not serving or serving[2] is None:
        return rows
    job.signature, feeds, want, original = serving
    if original is not None:
        half = computes_in_float16(manifest["source"]["checkpoint"])
        valid = None if manifest.get("nodes") else _valid_steps(feeds)
        return rows + [dict(r, stack="(whole graph)", judge=judge)
                       for r in graph_artifact_rows(job, feeds, original, "saved_model", atol, rtol, say, half,
                                                    valid)]
    return rows + [dict(_self_consistency(r), stack="(whole graph)", judge="OUT/saved_model (self-consistency only)")
                   for r in graph_artifact_rows(job, feeds, want, "saved_model", atol, rtol, say)]


def _judged_feeds(manifest, name, function, seed, unchanged):
    """(feeds, note, the original's outputs or None, rows saying why not) for signature ``name``: the feeds of
    :func:`signature_feeds` with a row of nothing but padding where the original runs it (Keras' cuDNN graphs
    assert that no row is fully masked: there the same feeds without that row, and the note says why); without
    the original to say so, none."""
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


def _valid_steps(feeds: Dict[str, np.ndarray]) -> Optional[Callable[[Dict[str, Any]], Dict[str, Any]]]:
    """Where the original runs the CPU twins of its cuDNN functions (a tf.keras graph), a per-step output past a
    padded row's end is defined twice: the CPU twin repeats the last valid step, cuDNN (and a fused ONNX node)
    writes zeros. ``valid(outputs)``: ``outputs`` with the padded row's steps from ``PAD_FROM`` on (and every step of
    a row of nothing but padding) set to zero in each output ``[batch, time, ...]`` of the padded inputs' batch and
    time, so that both are compared on the valid steps only (final states and a last step are compared whole); None
    where no input was padded."""
    shapes, empty = set(), False
    for v in feeds.values():  # the inputs _right_padded padded: one value (id 0, a Masking value) from PAD_FROM on
        if v.ndim < 2 or v.shape[0] < 2 or v.shape[1] <= PAD_FROM or v.dtype.kind not in "iuf":
            continue
        pad = v[-1, -1].flat[0]
        if np.all(v[-1, PAD_FROM:] == pad) and (v.dtype.kind == "f" or pad == 0):
            shapes.add(v.shape[:2])
            empty |= v.shape[0] > EMPTY_ROW + 1 and bool(np.all(v[EMPTY_ROW] == pad))
    if not shapes:
        return None

    def valid(outputs):
        cut = {}
        for name, value in outputs.items():
            value = np.asarray(value)
            if value.ndim >= 3 and value.shape[:2] in shapes:
                value = value.copy()
                value[-1, PAD_FROM:] = 0
                if empty:
                    value[EMPTY_ROW] = 0
            cut[name] = value
        return cut

    return valid


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


def signature_feeds(function: "tf.types.experimental.ConcreteFunction", seed: int,
                    empty_row: bool = False) -> Tuple[Dict[str, np.ndarray], str]:
    """Seeded inputs for a loaded signature, its fixed dimensions kept: N(0, 1) floats, small integers, and integer
    ids in [1, vocab) of the declared dtype for inputs that index a table (an Embedding), whatever that dtype
    (:func:`~.graph_inputs.token_vocabularies`); then the padding each mask of the graph defines
    (:func:`_right_padded`): the last row of each sequence input holds :data:`PAD_FROM` steps, then padding, and
    (``empty_row``, as verify's judged rows ask) row :data:`EMPTY_ROW` is padding at every step. Padding is id 0
    (a mask_zero Embedding's) and, for float sequences, the scalar the graph compares them with (a Masking layer's
    ``mask_value``, read from the graph: :func:`~.graph_inputs.masking_values`), else zero vectors. Padding only at
    a row's end: a padding step inside a row is a mask that Keras' cuDNN graphs refuse. Returns (feeds, a note
    naming the token inputs and the padded ones)."""
    specs = sorted(function.structured_input_signature[1].items())
    feeds = sample_inputs(specs, seed)
    texts = text_inputs(specs, feeds, seed)  # strings: English sentences
    feeds.update(texts)
    try:
        vocabs = token_vocabularies(function)
    except Exception:  # noqa: BLE001 (an unusual graph: plain inputs, as before)
        vocabs = {}
    try:
        values = masking_values(function)
    except Exception:  # noqa: BLE001 (an unusual graph: zero vectors, as before)
        values = {}
    rng = np.random.default_rng(seed + 1)
    for name, vocab in sorted(vocabs.items()):
        feeds[name] = rng.integers(1, max(vocab or 2, 2), size=feeds[name].shape).astype(feeds[name].dtype)
    ragged = _ragged_inputs(feeds, dict(specs), rng)
    padded, emptied = _right_padded(feeds, set(vocabs), set(texts) | set(ragged) | {f"{n}_1" for n in ragged}, values,
                                    empty_row)
    shown = ", ".join(f"{n} in [1, {max(v or 2, 2)})" for n, v in sorted(vocabs.items()))
    pads = ", ".join(f"{n} (Masking value {values[n]:g})" if n in values else n for n in padded)
    return feeds, (f"; token ids {shown}" if shown else "") + (f"; ragged {', '.join(ragged)}" if ragged else "") + \
        (f"; English sentences for {', '.join(sorted(texts))}" if texts else "") + \
        (f"; the last row of {pads} right-padded from step {PAD_FROM}" + (f", row {EMPTY_ROW} all padding"
                                                                          if emptied else "") +
         " (padding id 0; float steps the graph's Masking value, else zero vectors)" if padded else "")


def _right_padded(feeds, token_inputs, skip, values=None, empty_row=False) -> Tuple[List[str], bool]:
    """Right-pads, in place, the last row of each sequence input: token ids ([batch, time], an input that indexes a
    table) become 0 from step ``PAD_FROM`` on, a mask_zero Embedding's padding; float sequences ([batch, time,
    features]) become ``values[name]`` (the value a Masking layer of the graph compares them with) or zero vectors,
    a Masking layer's default padding; with ``empty_row``, in a batch of three or more, row ``EMPTY_ROW`` becomes
    padding at every step. A masked model then runs a row shorter than the batch, and one with no step, as it does
    in use; a model without masks reads the padding as data. Returns (the names padded, whether a row was emptied)."""
    padded, emptied, values = [], False, values or {}
    for name in sorted(feeds):
        value = feeds[name]
        if name in skip or value.ndim < 2 or value.shape[0] < 2 or value.shape[1] <= PAD_FROM:
            continue
        if (name in token_inputs and value.ndim == 2) or (value.dtype.kind == "f" and value.ndim == 3):
            pad = values.get(name, 0)
            value[-1, PAD_FROM:] = pad
            if empty_row and value.shape[0] > EMPTY_ROW + 1:
                value[EMPTY_ROW] = pad
                emptied = True
            padded.append(name)
    return padded, emptied


def _ragged_inputs(feeds, specs, rng, rows=3, steps=7) -> List[str]:
    """A ragged input (``tf.RaggedTensorSpec``, e.g. tf_keras ``Input(ragged=True)``) reaches a signature as NAME,
    its flat values, and NAME_1, its row splits (int, rank 1); random integers are no valid splits. Gives such
    pairs ``rows`` rows of 1 to ``steps`` values (splits from 0 to the values' length), in place; returns the
    names."""
    found = []
    for name in sorted(feeds):
        base = name[:-2]
        if not (name.endswith("_1") and base in feeds and feeds[name].ndim == 1 and feeds[name].dtype.kind == "i"
                and specs[name].shape[0] is None and specs[base].shape.rank and specs[base].shape[0] is None):
            continue
        lengths = rng.integers(1, steps + 1, size=rows)
        values = feeds[base]
        feeds[base] = (rng.normal(size=(int(lengths.sum()),) + values.shape[1:]).astype(values.dtype)
                       if values.dtype.kind == "f" else np.resize(values, (int(lengths.sum()),) + values.shape[1:]))
        feeds[name] = np.concatenate([[0], np.cumsum(lengths)]).astype(feeds[name].dtype)
        found.append(base)
    return found


def keras_model_rows(manifest: "Manifest", out: str, atol: float, rtol: float, seed: int, unchanged: bool,
                     say: Callable[[str], None]) -> List[Dict[str, Any]]:
    """A whole Keras model's SavedModel, GraphDef and ONNX against the model with each fused layer rebuilt from
    stock Keras layers (from the source .keras file, or from OUT/keras/model.keras when the source is gone); the
    int8 model by its task cost, when OUT holds a task."""
    source = manifest["source"].get("checkpoint", "")
    copy = os.path.join(out, manifest["model_artifacts"].get("keras", WHOLE_MODEL))
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
    if translated_from(manifest["source"].get("format")):  # OUT's keras/model.keras is a .pt2's translation, the
        # conversion's own output: its artifacts are judged by PyTorch's kernels instead (judging.torch_program)
        rows = []
    if policy:
        rows.append(precision_row(original, policy, run))
        judge_name = f"{run.judge}, rebuilt in float32 from the {policy} original ({where})"
    int8 = next((k for k, of in derived_keys("int8").items() if of == "onnx" and k in manifest.model_artifacts), None)
    if int8:
        rows.append(_int8_model_row(out, manifest, names, feeds, want, int8, model, judged))
    if manifest.get("task") and int8 and len(names) == 1:
        with open(os.path.join(out, manifest["task"])) as f:
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
    names = manifest.get("model_inputs") or [t.name.split(":")[0] for t in model.inputs]  # as exported: a reloaded
    specs = from_records(manifest.get("model_input_specs")) or \
        [tf.TensorSpec(t.shape, t.dtype) for t in model.inputs]  # model may name unnamed inputs otherwise
    judge, judge_name = model_judge(model)
    judged = judge_binding(model, names)
    axes = {r["name"]: r["axes"] for r in manifest.get("model_input_specs") or [] if r.get("axes")}
    feeds = model_feeds(model, names, specs, seed, axes=axes)
    try:  # a row of nothing but padding, where the model allows one (its judge runs it to finite outputs)
        want = judge([feeds[n] for n in judged])
        allowed = all(np.all(np.isfinite(w)) for w in want)
    except Exception:  # noqa: BLE001 (e.g. a masked mean over no step: the same feeds without that row)
        allowed = False
    if not allowed:
        feeds = model_feeds(model, names, specs, seed, empty_row=False, axes=axes)
        want = judge([feeds[n] for n in judged])
    job = ModelJob(model, [tf.TensorSpec(s.shape, s.dtype, name=n) for n, s in zip(names, specs)], out, None)
    job.manifest = manifest
    return ModelRun(model_artifact_rows(out, job, feeds, want, atol, rtol, say), judge_name, names, feeds, want,
                    judged)


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


def _int8_model_row(out, manifest, names, feeds, want, key, model, judged):
    """The whole model's int8 ONNX against the fp32 judge's outputs ``want``, with the tolerance of the stacks' int8
    rows (:mod:`cudnn_port.judging.int8`) taken over the whole model: at most 3x the max and 1.5x the mean distance
    from ``want`` of the same model with each int8 LSTM stack computed as an exact int8 implementation rounds
    (:func:`~cudnn_port.judging.int8.ideal_int8_forward`), plus small floors. Its cost on the task is the task's
    row, where OUT holds a task."""
    # lazy: onnx, loaded on first use (import cudnn_port stays light)
    import onnx

    name = "onnx int8 (onnxruntime)"
    path = os.path.join(out, manifest.model_artifacts[key])
    try:
        session = onnx_session(path)
        got = session.run([f"output_{i}" for i in range(len(want))], {n: feeds[n] for n in names})
        ideal = _ideal_int8_model(model, [feeds[n] for n in judged],
                                  dict(LSTM_SETTINGS, **infer_settings(onnx.load(path))))
    except Exception as e:  # noqa: BLE001
        return failed_row(name, e)
    row = compare(name, got, want, np.inf, 0.0)
    errors = [np.abs(np.asarray(g, np.float64) - w) for g, w in zip(got, want)]
    scales = [np.abs(np.asarray(i, np.float64) - w) for i, w in zip(ideal, want)]
    err_max, err_mean = max(float(e.max()) for e in errors), float(np.mean([e.mean() for e in errors]))
    limit_max = K_MAX * max(float(s.max()) for s in scales) + FLOOR_MAX
    limit_mean = K_MEAN * float(np.mean([s.mean() for s in scales])) + FLOOR_MEAN
    passed = bool(np.isfinite(err_max) and err_max <= limit_max and err_mean <= limit_mean)
    return dict(row, passed=passed, max_rel=None, tolerance=limit_max,
                note=f"int8 tolerance: max <= {limit_max:.1e}, mean <= {limit_mean:.1e} (3x / 1.5x the model with "
                     f"exact int8 rounding; error max {err_max:.1e}, mean {err_mean:.1e})")


class _Int8Stack:
    """One fused LSTM stack as an exact int8 implementation computes it (float64), called like the fused layer's
    paths: ``(x, lengths, h0, c0) -> (outputs, h_n, c_n)``."""

    def __init__(self, canon, settings):
        self.canon, self.settings = canon, settings

    def __call__(self, x, lengths, h0, c0):
        tf = import_tf()

        def run(x, lengths, h0, c0):
            return [a.astype(np.float32) for a in ideal_int8_forward(self.canon, x, lengths, h0, c0,
                                                                     **self.settings)]

        y, h, c = tf.numpy_function(run, [x, lengths, h0, c0], [tf.float32] * 3)
        return y, h, c


def _ideal_int8_model(model, inputs, settings):
    """``model``'s outputs with each stack int8 quantizes (:func:`~cudnn_port.judging.int8.quantized`) rounded as
    int8 does and every other fused stack in the float64 reference; ordinary layers are Keras' own. Each stack's
    weights come from the stock layer's own variables (:func:`cudnn_port.judging.keras_weights.stock_stack`) or a
    fused layer's buffer read through the cuDNN API's layout (:mod:`cudnn_port.judging.cudnn_api`), not from the
    buffer the rewrite packed, so that an error of the rewrite cannot widen the tolerance that judges it."""
    with float32_policy():
        fused = rewrite(model, sized=False)  # Keras' own Dense, TimeDistributed...: the judge shares no sized_layers
        judges = {}
        for path, (cell, direction), layer in _fused_by_path(fused):
            spec = layer.spec
            canon = stock_stack(model, path, spec, cell, direction) if path is not None else \
                cudnn_api.canonical(spec, layer.opaque_kernel.numpy())
            judges[id(layer)] = _Int8Stack(canon, {k: settings[k] for k in ("per_channel", "reduce_range")}) \
                if quantized(spec) else ReferenceStack(canon)
        with judged_by(judges):
            return model_outputs(fused(as_model_takes(fused, inputs), training=False))


def _cells_fused(stack, path=()):
    """([k] or [k, j, ...], fused layer) of each cell of a StackedAdapter, nested stacks included."""
    # lazy: Keras, loaded on first use (import cudnn_port stays light)
    from ..stock_adapter import StackedAdapter

    for k, adapter in enumerate(stack.adapters):
        if isinstance(adapter, StackedAdapter):
            yield from _cells_fused(adapter, path + (k,))
        else:
            yield list(path + (k,)), adapter.fused


def _fused_by_path(model, prefix=""):
    """(the stock layer's ``outer/inner`` path, or None for a layer that was fused already, (the cell's index in an
    ``RNN(StackedRNNCells(...))``, the direction of a ``Bidirectional`` of one; each None otherwise), fused layer) of
    each fused layer in ``model`` (a rewritten model: a stock layer's adapter is named as the layer)."""
    # lazy: Keras, loaded on first use (import cudnn_port stays light)
    from ..layers import CudnnRNN
    from ..stock_adapter import StackedAdapter, StackedPairAdapter, StockAdapter

    for layer in getattr(model, "layers", None) or []:
        path, inner = prefix + layer.name, unwrapped(layer)  # Keras' own TimeDistributed around a stack: its name
        wrapped, layer = inner is not layer, inner
        if wrapped and not isinstance(layer, (CudnnRNN, StockAdapter, StackedAdapter, StackedPairAdapter)):
            path = f"{path}/{layer.name}"  # a model inside: td/model/..., as the judge's stock_stack walks it
        if isinstance(layer, StackedPairAdapter):  # each direction a stack of cells, or one plain layer's
            yield from ((path, (cell, way), fused)
                        for way, half in zip(DIRECTIONS, (layer.forward, layer.backward))
                        for cell, fused in (_cells_fused(half) if isinstance(half, StackedAdapter) else
                                            [(None, half.fused)]))
        elif isinstance(layer, StackedAdapter):
            yield from ((path, (cell, None), fused) for cell, fused in _cells_fused(layer))
        elif isinstance(layer, StockAdapter):
            yield path, (None, None), layer.fused
        elif isinstance(layer, CudnnRNN):
            yield None, (None, None), layer
        elif getattr(layer, "layers", None):
            yield from _fused_by_path(layer, f"{path}/")
