"""``onnx``: one fused ONNX ``LSTM`` / ``GRU`` node per layer with ``sequence_lens`` wired
(:mod:`cudnn_port.exports.onnx`), as two models: OUT/model.onnx takes ``inputs`` and ``sequence_lengths`` only (zero
initial states), OUT/model_stateful.onnx also takes ``initial_h`` (and ``initial_c``) as required inputs, for
streaming. Run by onnxruntime, and by OpenVINO where it is installed (:mod:`cudnn_port.exports.openvino`). ONNX's
LSTM has no projection, so a projected stack has no ONNX form."""
from . import Artifact, Format, Runtime


def _write(canon, paths, *, name, options):
    from ..exports import onnx as onnx_export

    for key, states in (("onnx", False), ("onnx_stateful", True)):
        if key in paths:
            onnx_export.write_onnx(canon, paths[key], name=name, states=states)


def _open_onnxruntime(path, spec):
    from ..exports import io_names
    from ..exports.runners import onnx_session

    session = onnx_session(path)
    names_out = list(io_names(spec)[1])

    def run(feeds):
        values = session.run(names_out, feeds)
        return list(values) + [None] * (3 - len(values))

    return run


def _open_openvino(path, spec):
    from ..exports.openvino import open_onnx

    return open_onnx(path, spec)


def _cannot_hold(spec):
    return "ONNX's LSTM has no projection" if spec.num_proj else None


FORMAT = Format(name="onnx", help="OUT/model.onnx and OUT/model_stateful.onnx (states as inputs), fused ONNX "
                                  "LSTM/GRU nodes",
                artifacts=(Artifact("onnx", "model{suffix}.onnx", states="none", label="onnx"),
                           Artifact("onnx_stateful", "model_stateful{suffix}.onnx", states="required",
                                    label="onnx_stateful")),
                write=_write, runtimes=(Runtime("onnxruntime", _open_onnxruntime, needs=("onnxruntime",)),
                                        Runtime("openvino", _open_openvino, needs=("openvino",))),
                cannot_hold=_cannot_hold, needs=("onnx", "onnxruntime"), default=True, order=50)
