"""OpenVINO as a runtime of the ONNX models (``pip install openvino``; the ``[openvino]`` extra).

OpenVINO reads ``model.onnx`` / ``model_stateful.onnx`` as they are (their dynamic batch and time kept). On a CPU
with AVX512-BF16 or AMX its CPU plugin computes in bfloat16 unless told otherwise, which moves the outputs of the
benchmark stacks by 3e-3 to 1.6e-2; :func:`compile_onnx` asks for float32 (``INFERENCE_PRECISION_HINT``), as every
other runtime of this project computes.
"""
import os
from typing import TYPE_CHECKING, Callable
from . import io_names
from ..deps import optional
from .artifact_check import check_artifact

if TYPE_CHECKING:
    import openvino as ov
    from ..layout import RNNSpec


def compile_onnx(path: str, precision: str = "f32") -> "ov.CompiledModel":
    """An OpenVINO CPU ``CompiledModel`` of the ONNX model at ``path``, computing in ``precision`` ("f32" or
    "bf16")."""
    check_artifact(path)
    ov = optional("openvino", "running ONNX models in OpenVINO")
    core = ov.Core()
    return core.compile_model(core.read_model(os.fspath(path)), "CPU", {"INFERENCE_PRECISION_HINT": precision})


def open_onnx(path: str, spec: "RNNSpec", precision: str = "f32") -> Callable:
    """``run(feeds) -> [outputs, final_h, final_c or None]`` of a stack's ONNX model at ``path`` in OpenVINO."""
    compiled = compile_onnx(path, precision)
    request = compiled.create_infer_request()
    names_out = list(io_names(spec)[1])

    def run(feeds):
        result = request.infer({k: v for k, v in feeds.items()})
        values = [result[compiled.output(n)].copy() for n in names_out]
        return values + [None] * (3 - len(values))

    return run
