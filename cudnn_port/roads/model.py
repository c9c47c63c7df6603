"""Export a Keras model built with :mod:`cudnn_port.layers` for CPU use: the library call after training.

    cudnn_port.export(model, "out/")          # or: cudnn-port convert model.keras out/

writes, for the whole model (embeddings, dense heads and every fused layer), built in a temporary sibling and
renamed into place (:mod:`cudnn_port.outdir`):

- ``OUT/saved_model/``: signature ``serving_default`` over the model's inputs (named as the model names them)
  returning ``output_0`` ... ``output_{n-1}``, traced with every fused layer on its CPU path (standard ops): no
  Cudnn op, loads and runs on a CPU-only TensorFlow;
- ``OUT/frozen_graph.pb``: the same, variables frozen into constants, for TF1-style sessions: placeholders named
  as the inputs, outputs ``output_0:0`` ...;
- ``OUT/model.onnx``: tf2onnx for the rest of the model, each fused layer as fused ONNX LSTM / GRU nodes (the model
  is traced with the cuDNN op, whose frozen params the ONNX handler unpacks; nothing runs it); dynamic dimensions
  named ``batch`` and ``time``;
- every whole-model artifact takes an input an Embedding reads as int32 ids (float ids, Keras' default dtype) or as
  the model's ``keras.Input`` states them; ``ids_dtype`` (int32, int64 or float32) chooses for all of them
  (:mod:`cudnn_port.keras_models.model_inputs`);
- ``OUT/model.tflite``: TensorFlow's TFLite converter for the rest of the model, each fused layer spliced in as this
  project's builtin TFLite ops (:mod:`cudnn_port.exports.tflite_model`): no Flex or custom op; signature
  ``serving_default`` with the same input and output names. Where the converter cannot express some other layer
  with builtin ops, a warning says so and only the per-layer ``.tflite`` files are written;
- ``OUT/checkpoint/``: the model's variables, each fused layer's buffer as per-layer tensors of ``style`` (Keras
  LSTM / GRU names by default; TF1 names for a layer with projection, which Keras cannot hold), the rest copied;
- ``OUT/layers/<layer>/``: each fused layer alone as ``convert`` writes a stack (``saved_model/`` with the
  ``with_initial_state`` signature, ``frozen_graph.pb``, ``model.onnx``, ``model.tflite``, ``model_stateful.tflite``):
  step functions for decoding;
- ``OUT/keras/model.keras``: the model as given (fused layers, or stock Keras LSTM / GRU / Bidirectional layers,
  which :mod:`cudnn_port.keras_models.stock_keras` turned into fused ones for the artifacts), so that ``verify`` can
  rebuild the judge when the original file is gone;
- ``OUT/model_parity.json``: the whole model's outputs from each artifact against an independent judge (the model
  as given, each fused layer's stack computed by the NumPy reference, :mod:`cudnn_port.judging.stock`) on seeded
  inputs;
- ``OUT/task.json``: the model's task (:mod:`cudnn_port.judging.tasks`), when a ``task.json`` lies beside the ``.keras``
  file, with its data embedded: ``verify`` measures the int8 model's cost on it;
- with ``quantize="int8"``: ``OUT/model_int8.onnx`` and ``OUT/layers/<layer>/model_int8.onnx``;
- ``OUT/manifest.json``.

A parity failure raises :class:`~cudnn_port.errors.ParityError` and leaves no OUT (``keep_failed=True`` keeps it,
and the error names its report).
"""
import os
from typing import TYPE_CHECKING, Callable, List, Optional, Sequence

import numpy as np

from ..deps import available
from ..errors import CudnnPortError, ParityError, short
from ..manifest import Manifest, warn
from ..manifest_records import ModelLayerRecord, ParityRecord, PrecisionRecord, StreamRecord, TensorSpecRecord
from ..outdir import OutputFolder, finish
from ..paths import sha256
from ..judging.parity import ATOL, RTOL, write_report
from ..formats.jobs import ModelJob, Outputs, layer_formats, write_road
from ..formats.keras import write_whole_model
from .int8 import quantize_outputs, refuse_nothing_to_quantize
from .buffers import prepare_stacks
from .model_signature import output_keys, signature_specs, traced
from .stack import write_stacks
from ..judging.tasks import TASK, load_task
from ..keras_models.model_inputs import check_ids_dtype, declared_batch, to_records
from ..progress import Progress, say_to
from ..judging.model_rows import precision_row, whole_model_run
from ..judging.torch_program import JUDGE as PROGRAM_JUDGE, program_rows
from ..keras_models.precision import float32_policy, float32_twin
from ..quiet import library_call
from ..readers import translated_from
from ..readers.keras_model import KerasModelSource, load_model_file
from ..readers.torch_program import PROGRAM_FORMAT, SCRIPT_FORMAT, axis_roles, is_program, program_input_names, \
    renamed_inputs, translate
from ..keras_models.stock_keras import rewrite
from ..keras_models.streaming_model import streaming_twin

if TYPE_CHECKING:
    import keras

PARITY = "model_parity.json"


def export(model: "keras.Model", out: "os.PathLike[str] | str", *, style: Optional[str] = None, force: bool = False,
           progress: Optional[Progress] = None, seed: int = 0, path: Optional[str] = None, xla: bool = False,
           quantize: Optional[str] = None, keep_failed: bool = False, formats: Optional[Sequence[str]] = None,
           ids_dtype: Optional[str] = None, verbose: bool = False) -> Manifest:
    """Write the CPU artifacts of ``model`` (a built Keras model holding fused or stock LSTM / GRU layers) to ``out``;
    returns the manifest. See the module docstring for what is written. ``path``: the ``.keras`` file the model
    came from, if any (recorded and hashed in the manifest). ``xla=True``: each layer's SavedModel XLA-compiled
    (see :mod:`cudnn_port.exports.tensorflow`). ``quantize="int8"``: int8 ONNX models next to the fp32 ones
    (:mod:`cudnn_port.exports.quantize`). ``formats``: write (and check) only these of :func:`whole_model_formats`
    (the checkpoint and ``keras/model.keras``, the judge's copy, are always written). ``ids_dtype``: the dtype every
    artifact takes for an input an Embedding reads, int32, int64 or float32 (default: int32 where the model records
    float ids, else the model's own). A mixed-precision model gets
    float32 artifacts, judged by the model in float32 (:mod:`cudnn_port.keras_models.precision`). Only cudnn-port's
    own words reach stderr during the call; ``verbose=True`` lets the libraries' through. Raises
    :class:`~cudnn_port.errors.ParityError` if an artifact disagrees with the judge."""
    with library_call(verbose), float32_policy():  # new layers compute in float32 whatever the script's policy
        return _export(model, out, style=style, force=force, progress=progress, seed=seed, path=path, xla=xla,
                       quantize=quantize, keep_failed=keep_failed, formats=formats, ids_dtype=ids_dtype)


def _export_program(path, out, **options):
    """A ``torch.export`` program (``.pt2``) translated into a Keras model
    (:func:`cudnn_port.readers.torch_program.translate`), exported whole as :func:`export` does; the manifest names
    the source a PyTorch program. Its parity adds PyTorch's own kernels as a judge where torch is installed
    (:mod:`cudnn_port.judging.torch_program`, at two lengths other than the exported one): a translation that
    computes otherwise raises :class:`~cudnn_port.errors.ParityError`."""
    with float32_policy():
        model = translate(os.fspath(path))
        return _export(model, out, source_format=PROGRAM_FORMAT if is_program(os.fspath(path)) else SCRIPT_FORMAT,
                       path=os.fspath(path), seed=0, axes=axis_roles(os.fspath(path), model),
                       program_names=program_input_names(os.fspath(path)), **options)


def whole_model_formats() -> List[str]:
    """The ``--formats`` a whole Keras model takes: the checkpoint and every format on the whole-model road."""
    return layer_formats()


def _export(model, out, *, style, force, progress, seed, path, xla, quantize, keep_failed, formats, ids_dtype,
            source_format=None, axes=None, program_names=None):
    if not model.built:  # a Sequential with no keras.Input, never called nor fit: no weights yet
        raise CudnnPortError(f"model {model.name!r} is not built, so it has no weights to export; give it a "
                             "keras.Input, or call or fit it once, before export")
    check_ids_dtype(ids_dtype)
    _refuse_bad_values(model)
    say = say_to(progress)
    chosen = _chosen_formats(formats, quantize)
    original = model
    judged, policy = float32_twin(model)  # a mixed-precision model's artifacts compute in float32: so does the judge
    judged, stream_dicts = streaming_twin(judged)  # stateful layers: states in, states out
    streams = [StreamRecord.of(record) for record in stream_dicts]
    for record in streams:
        if record.given_initial_state:
            say(f"stateful layer {record.layer}: given initial_state by the model, which Keras starts every call "
                "from, so it computes as a stateless layer (no state inputs of its own)")
            continue
        say(f"stateful layer {record.layer}: exported as a streaming model, its states are inputs "
            f"{', '.join(record.state_inputs)} and outputs {', '.join(record.state_outputs or [])} (zeros start a "
            "stream; feed each call's final states into the next)")
    model = rewrite(judged, say)  # stock LSTM / GRU fused; the model as given is saved, and (in float32) judges
    specs, input_warnings = signature_specs(model, ids_dtype)
    folder = OutputFolder(out, force=force, sources=[path] if path else [])
    source = KerasModelSource(model, os.path.abspath(path) if path else None, original=judged)
    if source_format:
        source.format = source_format
    stacks = prepare_stacks(source, say=say)
    if quantize:  # before any export runs: only an LSTM stack without projection has an int8 form
        refuse_nothing_to_quantize(s.spec for s in stacks)
    style = style or ("tf1" if any(s.spec.num_proj for s in stacks) else "keras")

    def write(tmp):
        manifest = write_stacks(source, stacks, tmp, style=style, formats=chosen, layer_dir="layers", xla=xla,
                                say=say, batch=declared_batch(original))
        manifest.road = "model"
        manifest.model_inputs = [s.name for s in specs]  # the names every whole-model artifact takes
        inputs = manifest.model_input_specs = [TensorSpecRecord.of(r) for r in to_records(specs)]
        for record in inputs if program_names else []:
            record.program_name = program_names[record.name]  # a .pt2's argument, as PyTorch's kernels take it
        if streams:
            manifest.streaming = streams
        for message in input_warnings + [renamed_inputs(program_names or {})]:
            if message:
                warn(manifest, say, message)
        if path:
            manifest.source.files = {os.path.basename(path): sha256(path)}
        job = ModelJob(model, specs, tmp, lambda on: traced(model, specs, on), manifest=manifest,
                       batch=declared_batch(original), axes=axes)
        manifest.model_artifacts = write_road("model", job, tmp, manifest, say, formats=chosen)
        if formats is not None:
            manifest.not_asked_for = [f for f in whole_model_formats() if f not in chosen]
        manifest.model_layers = [ModelLayerRecord.of(dict(source.layer_of(s.variable), spec=s.spec.to_dict(),
                                                          stack=s.variable)) for s in stacks]
        outputs = job.traced("cpu").structured_outputs
        manifest.model_output_specs = [TensorSpecRecord(name=k, dtype=v.dtype.name, shape=v.shape.as_list())
                                       for k, v in sorted(outputs.items(), key=lambda kv: Outputs.number(kv[0]))]
        for record, key in zip(manifest.model_output_specs, output_keys(original)):
            record.key = key  # a dict of outputs: output_0 ... are its values in sorted key order
        for record in inputs + manifest.model_output_specs if axes else []:
            record.axes = axes.get(record.name)  # where the batch is not first (time-major inputs)
        write_whole_model(tmp, lambda where: original.save(where), manifest, say)
        task = load_task(path) if path else None
        if task:
            write_report(os.path.join(tmp, TASK), task)
            manifest.task = TASK
        if quantize:
            quantize_outputs(manifest, tmp, say)
        parity = manifest.parity = _parity(job, judged, seed, say, original if policy else None, policy)
        if not parity.passed and not keep_failed:
            raise ParityError(_failure(parity, "nothing was written; pass keep_failed=True "
                                       "(--keep-failed) to keep the output for inspection"), parity.to_dict())
        return finish(manifest, tmp)

    manifest = folder.build(write, say)
    if not manifest.parity.passed:
        report = os.path.join(folder.out, PARITY)
        raise ParityError(_failure(manifest.parity, f"the output was kept; see {report}"), manifest.parity.to_dict(),
                          report)
    return manifest


def _refuse_bad_values(model):
    """Refuse, before any export, what every artifact would fail on only after all were written: an input of
    complex dtype (no runtime's recurrent op takes one; Keras' own LSTM fails on it too) and a weight holding NaN or
    Inf (every artifact and the judge then compute NaN, and parity fails at the end of the export)."""
    for tensor in getattr(model, "inputs", None) or []:
        dtype = str(getattr(tensor.dtype, "name", tensor.dtype))
        if dtype.startswith("complex"):
            raise CudnnPortError(f"input {short(tensor.name.split(':')[0])!r} is {dtype}, which no artifact takes "
                                 "(recurrent ops compute in real numbers); give the model a float32 keras.Input "
                                 "with the real and imaginary parts as features")
    for variable in model.weights:
        value = np.asarray(variable.numpy() if hasattr(variable, "numpy") else variable)
        if value.dtype.kind in "fc" and not np.isfinite(value).all():
            bad = int(value.size - np.isfinite(value).sum())
            name = getattr(variable, "path", None) or variable.name
            raise CudnnPortError(f"weight {short(name)!r} holds {bad} NaN/Inf value{'s' if bad > 1 else ''}, so no "
                                 "artifact can match the model; the training run diverged: save the model from a "
                                 "checkpoint before it did")


def _chosen_formats(formats, quantize):
    """The formats a whole-model export writes: all of :func:`whole_model_formats`, or those asked for (refused in
    one line: a name no whole model has; int8 without onnx)."""
    every = whole_model_formats()
    if formats is None:
        return every
    formats = list(formats)
    unknown = [f for f in formats if f not in every]
    if unknown:
        raise CudnnPortError(f"--formats {unknown[0]} does not apply to a whole Keras model; choose from "
                             f"{', '.join(every)}")
    if quantize and "onnx" not in formats:
        raise CudnnPortError("--quantize int8 quantizes the ONNX models, but --formats leaves onnx out")
    return [f for f in every if f in formats or f == "checkpoint"]


def _failure(parity, what):
    failed = [row[0] for row in parity.rows if row[2] is False]
    return f"whole-model parity FAILED for {', '.join(failed)}; {what}"


def _parity(job, judged, seed, say, mixed=None, policy=None):
    """Each whole-model artifact's outputs against the stock-Keras judge of ``judged`` (the model as given, in
    float32) on the inputs verify draws (:func:`cudnn_port.judging.model_rows.whole_model_run`); writes
    model_parity.json (``cudnn-port verify OUT`` writes its own parity.json). ``mixed``: the model as given when it
    computes in ``policy`` (mixed precision): its distance to the judge is reported, not judged."""
    run = whole_model_run(job.tmp, job.manifest, judged, seed, ATOL, RTOL, say)
    rows, judge_name = run.rows, run.judge
    if translated_from(job.manifest.source.format):  # a .pt2: PyTorch's kernels judge the translation too
        if available("torch"):
            rows, judge_name = rows + program_rows(job.manifest, job.tmp, ATOL, RTOL, seed, True, say), \
                f"{judge_name}; {PROGRAM_JUDGE}"
        else:
            warn(job.manifest, say, "PyTorch is not installed, so the translation of the program was not judged by "
                 "PyTorch's kernels; cudnn-port verify OUT judges it where torch is installed")
    for row in rows:
        if row["passed"] is None:  # a runtime that is not installed: said in the summary, not a failure
            warn(job.manifest, say, f"{row['artifact']} not checked: {row['note'].replace('skipped: ', '', 1)}")
    if mixed is not None:
        rows, judge_name = rows + [precision_row(mixed, policy, run)], f"{judge_name}, rebuilt in float32"
        job.manifest.precision = PrecisionRecord(policy=policy, artifacts="float32", judge="the model in float32",
                                                 max_abs_to_original=rows[-1]["max_abs"])
    report = {"judge": judge_name, "atol": ATOL, "rtol": RTOL, "seed": seed, "rows": rows,
              "passed": all(r["passed"] is not False for r in rows)}
    write_report(os.path.join(job.tmp, PARITY), report)
    return ParityRecord(passed=report["passed"], judge=judge_name,
                        rows=[(r["artifact"], r["max_abs"], r["passed"]) for r in rows])


def export_keras_file(path: "os.PathLike[str] | str", out: "os.PathLike[str] | str", style: Optional[str] = None,
                      force: bool = False, progress: Optional[Callable[[str], None]] = None, xla: bool = False,
                      quantize: Optional[str] = None, keep_failed: bool = False,
                      formats: Optional[Sequence[str]] = None, ids_dtype: Optional[str] = None) -> Manifest:
    """``cudnn-port convert model.keras OUT``: load the saved model (with cudnn_port's layers known) and export."""
    return export(load_model_file(path), out, style=style, force=force, progress=progress, path=os.fspath(path),
                  xla=xla, quantize=quantize, keep_failed=keep_failed, formats=formats, ids_dtype=ids_dtype)


def export_program_file(path: "os.PathLike[str] | str", out: "os.PathLike[str] | str", style: Optional[str] = None,
                        force: bool = False, progress: Optional[Callable[[str], None]] = None, xla: bool = False,
                        quantize: Optional[str] = None, keep_failed: bool = False,
                        formats: Optional[Sequence[str]] = None, ids_dtype: Optional[str] = None) -> Manifest:
    """``cudnn-port convert model.pt2 OUT``: the ``torch.export`` program translated into a Keras model, exported
    whole (see :func:`_export_program`)."""
    return _export_program(path, out, style=style, force=force, progress=progress, xla=xla, quantize=quantize,
                           keep_failed=keep_failed, formats=formats, ids_dtype=ids_dtype)
