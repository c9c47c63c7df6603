"""``convert``: which kind of source this is, and the module that converts it.

    manifest = convert("train/model.ckpt", "out/", style="tf1")   # checkpoint or Keras 2 .h5: stack by stack
    manifest = convert("exported/", "out/")                       # SavedModel with cuDNN nodes: cudnn_port.roads.graph
    manifest = convert("model.keras", "out/")                     # model with fused layers: cudnn_port.roads.model

It checks the arguments every road shares, classifies the source (:func:`cudnn_port.readers.source_type`) and hands
it to its road's driver (:mod:`cudnn_port.roads`): :func:`cudnn_port.roads.stack.convert_stacks`, the whole model's
exporter, :func:`cudnn_port.roads.graph.convert_saved_model`. Each builds OUT whole or not at all.
"""
import os
from typing import TYPE_CHECKING, Callable, Iterable, Optional

from .deps import require
from .errors import CudnnPortError, short
from .keras_models.model_inputs import IDS_ONLY
from .roads.graph import convert_saved_model
from . import formats as registry
from .roads.buffers import given_flags
from .roads.stack import convert_stacks
from .readers import source_type
from .targets import STYLES
from .progress import say_to
from .checkpoint import resolve_prefix
from .quiet import library_call

if TYPE_CHECKING:
    from .manifest import Manifest

def convert(source: "os.PathLike[str] | str", out: "os.PathLike[str] | str", *, style: Optional[str] = None,
            formats: Optional[Iterable[str]] = None, variable: Optional[str] = None, mode: Optional[str] = None,
            num_layers: Optional[int] = None, num_units: Optional[int] = None, input_size: Optional[int] = None,
            bidirectional: Optional[bool] = None, num_proj: Optional[int] = None, force: bool = False,
            drop_optimizer_slots: bool = False, allow_nonfinite: bool = False, prefer_buffer: bool = False,
            xla: bool = False, quantize: Optional[str] = None, keep_failed: bool = False, trust_source: bool = False,
            ids_dtype: Optional[str] = None, progress: Optional[Callable[[str], None]] = None,
            verbose: bool = False) -> "Manifest":
    """Convert every cuDNN stack of ``source`` and write the artifacts under ``out``; returns the manifest.

    ``source``: a TensorFlow checkpoint (prefix, ``.index`` or folder; default style tf1), a Keras 2 ``.h5`` file
    with CuDNNLSTM / CuDNNGRU layers (default style keras; with the keras format a full-model file is also rebuilt
    whole in Keras 3 as ``out/keras/model.keras``), a PyTorch file holding ``nn.LSTM`` / ``nn.GRU`` / ``nn.RNN``
    modules (any kind ``torch.save`` or ``torch.jit.save`` writes, or safetensors; read as data, nothing in it runs;
    default style pytorch; ``mode`` settles an ``nn.RNN``'s tanh or relu where the file does not), a ``torch.export``
    program (``.pt2``: the whole model, its graph translated into a Keras model and exported like one,
    :mod:`cudnn_port.readers.torch_program`), a SavedModel folder holding cuDNN nodes, or a Keras 3 model file
    (``.keras``, or ``model.save("m.h5")``) of stock LSTM / GRU / Bidirectional layers or :mod:`cudnn_port.layers`
    (exported whole, see :func:`cudnn_port.export`).

    Writes ``out/checkpoint/`` (name-based; ``tf.train.latest_checkpoint`` finds it; other variables copied
    unchanged), the artifacts in ``formats`` (``keras``: ``out/keras/<stack>.keras``; ``pytorch``:
    ``out/pytorch/<stack>.safetensors``; ``saved_model``: ``out/saved_model/``; ``graphdef``:
    ``out/frozen_graph.pb``; ``onnx``: ``out/model.onnx``; with several stacks the last three get a ``_<stack>``
    suffix) and ``out/manifest.json``. The spec arguments (``mode`` ... ``num_proj``) settle a bare buffer whose
    size fits several specs. ``xla=True`` compiles the SavedModels' forward pass with XLA (see
    :mod:`cudnn_port.exports.tensorflow`); ``quantize="int8"`` also writes int8 ONNX models (``.keras`` sources);
    ``ids_dtype`` (``int32``, ``int64`` or ``float32``; Keras 3 model files only) is the dtype every artifact takes
    for an input an Embedding reads (:mod:`cudnn_port.keras_models.model_inputs`).
    A SavedModel's graph must be pure computation (:mod:`cudnn_port.graphs.allowlist`); ``trust_source=True``
    runs one that is not. ``progress(message)`` receives progress lines. Bad input raises
    :class:`~cudnn_port.errors.CudnnPortError` (nothing written); a whole-model export whose parity check fails raises
    :class:`~cudnn_port.errors.ParityError`. Only cudnn-port's own words reach stderr during the call
    (:func:`cudnn_port.quiet.library_call`); ``verbose=True`` lets TensorFlow's and the other libraries' through.
    """
    args = dict(locals())
    del args["verbose"]
    with library_call(verbose):
        return _convert(**args)


def _convert(source, out, *, style, formats, variable, mode, num_layers, num_units, input_size, bidirectional,
             num_proj, force, drop_optimizer_slots, allow_nonfinite, prefer_buffer, xla, quantize, keep_failed,
             trust_source, ids_dtype, progress):
    say = say_to(progress)
    if style is not None and style not in STYLES:
        raise CudnnPortError(f"unknown style {short(style, 40)!r}; choose one of {', '.join(STYLES)}")
    formats = None if formats is None else registry.check_names(formats)
    if quantize is not None and quantize not in registry.derived_names():
        raise CudnnPortError(f"unknown quantization {short(quantize, 40)!r}; choose "
                             f"{', '.join(registry.derived_names())}")
    flags = dict(mode=mode, num_layers=num_layers, num_units=num_units, input_size=input_size,
                 bidirectional=bidirectional, num_proj=num_proj)
    found = source_type(source)
    road = found.road
    if road == "stack" and not os.path.lexists(source):  # a checkpoint prefix, or nothing: said before heavy imports
        resolve_prefix(source)
    require("tensorflow", *registry.needs(formats or registry.default_formats(), quantize), purpose="convert")
    given = given_flags(flags)
    if (given and not found.spec_flags) or (variable and road != "stack"):
        raise CudnnPortError(f"{(given or ['--variable'])[0]} applies only to a bare buffer in a checkpoint; a "
                             f"{found.words} states every spec, so leave the spec flags out")
    if ids_dtype is not None and road != "model":
        raise CudnnPortError(IDS_ONLY)
    if road == "graph":
        if quantize:
            raise CudnnPortError("--quantize applies to .keras models and checkpoints, not to a SavedModel source")
        return convert_saved_model(os.fspath(source), out, formats, force, say, trust_source)
    if road == "model":  # a whole model: its kind's exporter
        spec = {"flags": flags} if found.spec_flags else {}  # a kind whose file may hold bare stacks settles them
        return found.named("export")(source, out, style=style, force=force, xla=xla, quantize=quantize,
                                     keep_failed=keep_failed, progress=progress, formats=formats, ids_dtype=ids_dtype,
                                     **spec)
    return convert_stacks(os.fspath(source), out, style=style, formats=formats, variable=variable, flags=flags,
                          force=force, drop_optimizer_slots=drop_optimizer_slots, allow_nonfinite=allow_nonfinite,
                          prefer_buffer=prefer_buffer, xla=xla, quantize=quantize, say=say)
