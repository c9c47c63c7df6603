"""Opt-in int8 ONNX (``convert --quantize int8``): onnxruntime dynamic quantization of the float32 exports.

:func:`quantize_onnx` rewrites each ``LSTM`` node as ``com.microsoft:DynamicQuantizeLSTM``: W and R stored as
symmetric int8, x and h quantized to uint8 on the fly, biases kept float32. Inputs, outputs, ``sequence_lens`` and
the initial states are kept; the padding channel of the portable graph (:mod:`cudnn_port.exports.onnx_portable`)
is dropped first (int8 runs in onnxruntime only, which honours ``sequence_lens``). On request (``matmul=True``) it
also rewrites each ``MatMul`` with a constant B (a Dense head) as ``DynamicQuantizeLinear`` + ``MatMulInteger``, in a
second pass with its own settings.

Settings, and why (onnxruntime 1.31):

* LSTM: ``per_channel=True, reduce_range=True``, i.e. one scale per (direction, gate, unit) row and 7-bit weights
  (+-64). On AVX2 CPUs without VNNI, onnxruntime's u8s8 GEMM adds pairs of uint8 x int8 products in int16
  (``vpmaddubsw``), and 255 * 127 * 2 overflows int16 while 255 * 64 * 2 does not. So 8-bit weights saturate there:
  per channel (every row reaches +-127) gives 2-10x the error of exact int8 (char LM loss +226%); per tensor saturates
  on small or light-tailed weight tensors (the trained tagger: 9.8x the exact-int8 error; 47 of 108 small random
  stacks fail verify's int8 rule, none with 7 bits). 7-bit per channel cannot saturate: its error is that of exact
  int8 rounding (0.85-1.10x on every model measured), on CPUs with and without VNNI, at the same speed. On a CPU
  with AVX512-VNNI, where nothing saturates, 8-bit per channel would have 0.69x the error of 7-bit (benchmark stack
  at batch 32, mean 1.7e-3 vs 2.5e-3) at the same speed; a model file does not know the CPU that will run it, so
  it keeps the 7 bits that are safe on both.
  ``weight_type`` does not reach LSTM nodes (onnxruntime always writes int8 there), and DynamicQuantizeLSTM
  rejects a non-zero weight zero point at run time, so weights must be symmetric.
* MatMul: off by default (for the models measured, a small head's int8 buys no time and adds error: tagger mean
  logit error 0.011 -> 0.018, char LM loss +0.3%); when on, ``reduce_range=True`` for the same saturation reason
  (8-bit int8 MatMul weights doubled the tagger's logit error).
* GRU: onnxruntime has no int8 GRU kernel (no ``DynamicQuantizeGRU``); ``quantize_dynamic`` leaves GRU nodes
  float32. A model with no LSTM node is refused: its "int8" file would be the float32 model.
* Embedding ``Gather`` and 8-bit ``Transpose`` rewrites are left out (``op_types_to_quantize`` is explicit).

``python bench/bench_exports.py`` measures int8 against fp32 on the benchmark BiLSTM (2 layers, input 256, hidden
512, 100 steps): 2.10-2.56x the speed at batch 1 and 3.08-3.23x at batch 32 on a 2-core CPU with AVX512-VNNI
(1.87-1.98x and 1.62-1.80x on one with AVX2 only), and the bundled char LM's loss (+0.15%). How ``verify`` judges
int8 models: :mod:`cudnn_port.judging.int8`.
"""
import os
import tempfile
from collections import Counter
from typing import Any, Dict, Optional, Union
import inspect
import logging

from ..deps import optional
from ..errors import CudnnPortError
from .onnx_portable import plain_lstm_inputs

LSTM_SETTINGS = dict(per_channel=True, reduce_range=True)
MATMUL_SETTINGS = dict(per_channel=False, reduce_range=True)
QUANTIZED_OPS = {"LSTM": "DynamicQuantizeLSTM", "MatMul": "MatMulInteger"}


def _value_infos(values):
    return [(v.name, v.type.tensor_type.elem_type,
             [d.dim_param or d.dim_value for d in v.type.tensor_type.shape.dim]) for v in values]


def _quantize_pass(src, dst, op_type, settings):
    # lazy: onnxruntime, loaded on first use (import cudnn_port stays light)
    from onnxruntime.quantization import QuantType, quantize_dynamic

    extra = {}
    if "optimize_model" in inspect.signature(quantize_dynamic).parameters:  # onnxruntime < 1.16 optimised the
        extra["optimize_model"] = False  # graph first, which wrote attributes its own DynamicQuantizeLSTM rejects
    quantize_dynamic(src, dst, op_types_to_quantize=[op_type], weight_type=QuantType.QInt8,
                     per_channel=settings["per_channel"], reduce_range=settings["reduce_range"],
                     extra_options={"MatMulConstBOnly": True, "WeightSymmetric": True}, **extra)


class NothingToQuantize(CudnnPortError):
    """An ONNX model with no LSTM node: its "int8" file would be the float32 model. ``why`` says what it holds."""

    def __init__(self, path: str, why: str) -> None:
        super().__init__(f"{path}: nothing to quantize to int8 ({why}); use the float32 model")
        self.why = why


def quantize_onnx(src_path: str, dst_path: str, lstm: Optional[Dict[str, bool]] = None,
                  matmul: Union[bool, Dict[str, Any]] = False) -> Dict[str, Any]:
    """Write the int8 model of the float32 ONNX model at ``src_path`` to ``dst_path``; return a report dict.

    ``lstm``: settings for LSTM nodes (default :data:`LSTM_SETTINGS`); ``matmul``: False (default) to keep MatMul
    nodes float32, True for :data:`MATMUL_SETTINGS`, or a settings dict. Raises CudnnPortError when nothing would be
    quantized (e.g. a GRU stack) or when the result lost an input or output of the source.
    """
    # lazy: onnx, loaded on first use (import cudnn_port stays light)
    import onnx

    onnxruntime = optional("onnxruntime", "int8 quantization")

    lstm = dict(LSTM_SETTINGS, **(lstm or {}))
    matmul_settings = dict(MATMUL_SETTINGS, **(matmul if isinstance(matmul, dict) else {})) if matmul else None
    src_path, dst_path = os.fspath(src_path), os.fspath(dst_path)
    source = onnx.load(src_path)
    plain = plain_lstm_inputs(source)  # the padding channel's +-K would swamp its rows' int8 scales
    before = Counter(n.op_type for n in source.graph.node)
    if not before["LSTM"]:
        others = [f"{before[k]} {k} node(s)" for k in ("GRU", "RNN") if before[k]]
        why = (f"{', '.join(others)}: onnxruntime has no int8 GRU or RNN kernel, so quantize_dynamic would leave them "
               "float32" if others else
               f"{before['Scan']} Scan loop(s) (cells of activations no fused node runs everywhere, "
               "exports.onnx_scan), which quantize_dynamic leaves float32" if before["Scan"] else "no LSTM node")
        raise NothingToQuantize(src_path, why)
    passes = [("LSTM", lstm)] + ([("MatMul", matmul_settings)] if matmul_settings and before["MatMul"] else [])
    quiet = logging.getLogger()
    level, quiet.level = quiet.level, logging.ERROR  # quantize_dynamic warns to run its pre-processing
    try:
        with tempfile.TemporaryDirectory() as tmp:
            current = src_path
            if plain:
                current = os.path.join(tmp, "plain.onnx")
                onnx.save(source, current)
            for i, (op_type, settings) in enumerate(passes):
                step = os.path.join(tmp, f"pass{i}.onnx")
                _quantize_pass(current, step, op_type, settings)
                current = step
            result = onnx.load(current)
    finally:
        quiet.level = level
    after = Counter(n.op_type for n in result.graph.node)
    for kind, values, want in (("inputs", result.graph.input, source.graph.input),
                               ("outputs", result.graph.output, source.graph.output)):
        if _value_infos(values) != _value_infos(want):
            raise CudnnPortError(f"int8 model of {src_path}: its {kind} {_value_infos(values)} differ from the "
                                 f"source's {_value_infos(want)}")
    _check_lstm_wiring(source, result)
    if not any(o.domain == "com.microsoft" for o in result.opset_import):  # onnxruntime < 1.16 left it out
        result.opset_import.append(onnx.helper.make_opsetid("com.microsoft", 1))
    del result.graph.value_info[:]  # quantize_dynamic's shape inference of every tensor: hints, no part of the model
    onnx.checker.check_model(result)
    tmp_path = dst_path + ".tmp"
    onnx.save(result, tmp_path)
    os.replace(tmp_path, dst_path)
    warnings = []
    for kind in ("GRU", "RNN"):
        if before[kind]:
            warnings.append(f"{before[kind]} {kind} node(s) stay float32: onnxruntime has no int8 {kind} kernel")
    if after["MatMul"]:
        warnings.append(f"{after['MatMul']} MatMul node(s) stay float32 (non-constant B, or matmul=False)")
    size_src, size_dst = os.path.getsize(src_path), os.path.getsize(dst_path)
    return {"src": src_path, "dst": dst_path, "onnxruntime": onnxruntime.__version__,
            "settings": {"LSTM": lstm, "MatMul": matmul_settings}, "bytes": {"float32": size_src, "int8": size_dst},
            "size_ratio": size_src / size_dst,
            "quantized": {op: before[op] - after[op] for op in QUANTIZED_OPS if before[op] - after[op]},
            "float32_left": {op: after[op] for op in ("LSTM", "GRU", "MatMul") if after[op]},
            "ir_version": result.ir_version, "opsets": {o.domain or "ai.onnx": o.version for o in result.opset_import},
            "warnings": warnings}


def _check_lstm_wiring(source, result):
    """Each DynamicQuantizeLSTM reads the X, B, sequence_lens and initial states its LSTM read (or what an Identity
    or Cast between them read, where the quantizer's clean-up dropped one that changed nothing)."""
    # by all outputs: Y alone is "" on each LSTM whose sequences nothing reads (two such nodes were confused)
    lstm = {tuple(n.output): n for n in source.graph.node if n.op_type == "LSTM"}
    producer = {out: n for n in source.graph.node for out in n.output}
    for node in result.graph.node:
        if node.op_type != "DynamicQuantizeLSTM":
            continue
        old = list(lstm[tuple(node.output)].input) + [""] * 8
        new = list(node.input)
        for i, label in ((0, "X"), (3, "B"), (4, "sequence_lens"), (5, "initial_h"), (6, "initial_c")):
            before = producer.get(old[i])
            same = new[i] == old[i] or (before is not None and before.op_type in ("Cast", "Identity")
                                        and new[i] == before.input[0])
            if not same:
                raise CudnnPortError(f"int8 node {node.name}: input {label} is {new[i]!r}, its LSTM read {old[i]!r}")
