"""The derived int8 road (``--quantize int8``): after a stack or whole-model export has written its float32 ONNX
models, each artifact the ONNX format declares a :class:`~cudnn_port.formats.Derived` int8 form of gets it (the
rewrite itself: :mod:`cudnn_port.exports.quantize`), recorded in the manifest under its derived key."""
import os
from typing import TYPE_CHECKING, Callable, Sequence

from ..errors import CudnnPortError, NotWritten
from ..exports.onnx_portable import scan_form
from ..formats import derived
from ..manifest_records import Int8Record

if TYPE_CHECKING:
    from ..layout import RNNSpec
    from ..manifest import Manifest


NOTHING_TO_QUANTIZE = ("--quantize int8 found nothing to quantize: onnxruntime quantizes fused LSTM nodes only (it has "
                       "no int8 GRU or RNN kernel, ONNX has no projected LSTM, and an LSTM of functions OpenVINO's "
                       "fused node does not run is a Scan loop); leave --quantize out")


def refuse_nothing_to_quantize(specs: "Sequence[RNNSpec]") -> None:
    """Before any work: --quantize int8 with no stack it can quantize (only LSTM stacks without projection whose ONNX
    nodes stay fused have an int8 form) is refused."""
    specs = list(specs)
    if specs and not any(s.mode == "lstm" and not s.num_proj and not scan_form(s) for s in specs):
        raise CudnnPortError(NOTHING_TO_QUANTIZE)


def quantize_outputs(manifest: "Manifest", tmp: str, say: Callable[[str], None]) -> None:
    """Write the derived int8 artifact (:class:`cudnn_port.formats.Derived`, declared by the ONNX format) of each
    artifact it derives from in an output being built in ``tmp`` (each LSTM stack's ``model.onnx`` and
    ``model_stateful.onnx``, and the whole model's) and record it in ``manifest`` under its derived key. GRU and
    projected stacks have no int8 form (a warning says so); nothing quantizable at all is an error."""
    written, skipped = [], []
    targets = [(stack.artifacts, f"stack {stack.variable}") for stack in manifest.stacks]
    targets.append((manifest.model_artifacts, "the whole model"))
    for _, form in derived("int8"):
        for artifacts, what, key in ((a, w, k) for a, w in targets for k in form.of if k in a):
            rel = artifacts[key]
            try:
                report = form.write(os.path.join(tmp, rel), os.path.join(tmp, form.path(rel)))
                say(f"wrote {form.path(rel)} (int8)")  # said once written: a GRU stack's file never is
            except NotWritten as e:
                if key == form.of[0]:  # one line per stack, not one per file
                    skipped.append(f"{what}: no int8 model ({e})")
                continue
            artifacts[form.key(key)] = form.path(rel)
            written.append(Int8Record.of({"artifact": form.path(rel), **{k: report[k] for k in (
                "settings", "bytes", "quantized", "float32_left", "warnings")}}))
    if not written:
        raise CudnnPortError(NOTHING_TO_QUANTIZE)
    manifest.int8 = written
    manifest.warnings.extend(skipped)
