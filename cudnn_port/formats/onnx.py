"""``onnx``: OUT/model.onnx, one fused ONNX ``LSTM`` / ``GRU`` node per layer with ``sequence_lens`` wired
(:mod:`cudnn_port.exports.onnx`); run by onnxruntime (and OpenVINO where installed). ONNX's LSTM has no projection,
so a projected stack has no ONNX form."""
from . import Artifact, Format, Runtime


def _write(canon, paths, *, name, options):
    from ..exports import onnx as onnx_export

    onnx_export.write_onnx(canon, paths["onnx"], name=name)


def _open_onnxruntime(path, spec):
    from ..exports import io_names
    from ..exports.runners import onnx_session

    session = onnx_session(path)
    names_out = list(io_names(spec)[1])

    def run(feeds):
        values = session.run(names_out, feeds)
        return list(values) + [None] * (3 - len(values))

    return run


def _cannot_hold(spec):
    return "ONNX's LSTM has no projection" if spec.num_proj else None


FORMAT = Format(name="onnx", help="OUT/model.onnx, fused ONNX LSTM/GRU nodes",
                artifacts=(Artifact("onnx", "model{suffix}.onnx", states="optional", label="onnx"),),
                write=_write, runtimes=(Runtime("onnxruntime", _open_onnxruntime, needs=("onnxruntime",)),),
                cannot_hold=_cannot_hold, needs=("onnx", "onnxruntime"), default=True, order=50)
