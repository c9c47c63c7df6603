"""``onnx``: one fused ONNX ``LSTM`` / ``GRU`` node per layer with ``sequence_lens`` wired
(:mod:`cudnn_port.exports.onnx`), as two models: OUT/model.onnx takes ``inputs`` and ``sequence_lengths`` only (zero
initial states), OUT/model_stateful.onnx also takes ``initial_h`` (and ``initial_c``) as required inputs, for
streaming. Run by onnxruntime, and by OpenVINO where it is installed (:mod:`cudnn_port.exports.openvino`). ONNX's
LSTM has no projection, so a projected stack has no ONNX form."""
from . import Artifact, Derived, Format, NotWritten, Road, Runtime


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


def _write_model(job, paths):
    """The whole model traced on the fused op, through tf2onnx with fused ONNX LSTM / GRU nodes for the fused layers;
    inputs as the model names them, outputs ``output_0`` ..."""
    from ..exports.onnx_tf import name_dynamic_dims, write_graph_onnx
    from ..layers import fused_layers

    projected = [layer.name for layer in fused_layers(job.model) if layer.num_proj]
    if projected:
        raise NotWritten(f"fused layer {projected[0]} has a projection, which ONNX's LSTM cannot hold")
    fused = job.frozen("cudnn")
    names_in, names_out = [t.name for t in fused.inputs], [t.name for t in fused.outputs]
    renames = dict(zip(names_in, job.input_names))
    renames.update(zip(names_out, [f"output_{i}" for i in range(len(names_out))]))
    name_dynamic_dims(write_graph_onnx(fused.graph.as_graph_def(), names_in, names_out, None, renames), paths["onnx"])


def _open_model(path, job):
    from ..exports.runners import onnx_session

    session = onnx_session(path)
    return lambda feeds: session.run([f"output_{i}" for i in range(job.count)],
                                     {name: feeds[name] for name in job.input_names})


def _open_model_openvino(path, job):
    """The whole model's ONNX in OpenVINO's CPU plugin, computing in float32."""
    from ..exports.openvino import compile_onnx

    compiled = compile_onnx(path)

    def run(feeds):
        result = compiled({name: feeds[name] for name in job.input_names})
        return [result[compiled.output(f"output_{i}")] for i in range(job.count)]

    return run


def _write_graph(job, paths):
    from ..graphs.convert import write_graph_onnx_artifact

    return write_graph_onnx_artifact(job, paths["onnx"])


def _write_int8(src, dst):
    from ..exports.quantize import NothingToQuantize, quantize_onnx

    try:
        return quantize_onnx(src, dst)
    except NothingToQuantize as e:
        raise NotWritten(e.why) from None


FORMAT = Format(name="onnx", help="OUT/model.onnx and OUT/model_stateful.onnx (states as inputs), fused ONNX "
                                  "LSTM/GRU nodes",
                artifacts=(Artifact("onnx", "model{suffix}.onnx", states="none", label="onnx"),
                           Artifact("onnx_stateful", "model_stateful{suffix}.onnx", states="required",
                                    label="onnx_stateful")),
                write=_write, runtimes=(Runtime("onnxruntime", _open_onnxruntime, needs=("onnxruntime",)),
                                        Runtime("openvino", _open_openvino, needs=("openvino",))),
                cannot_hold=_cannot_hold, needs=("onnx", "onnxruntime"), default=True, order=50,
                model=Road((Artifact("onnx", "model.onnx"),), _write_model, _open_model, "onnx (onnxruntime)",
                           ("onnxruntime",), more=(("onnx (openvino f32)", _open_model_openvino, ("openvino",)),)),
                graph=Road((Artifact("onnx", "model.onnx"),), _write_graph),
                derived=(Derived("int8", "_int8", ("onnx", "onnx_stateful"), _write_int8),))
