"""``onnx``: one fused ONNX ``LSTM`` / ``GRU`` node per layer with ``sequence_lens`` wired
(:mod:`cudnn_port.exports.onnx`), as two models: OUT/model.onnx takes ``inputs`` and ``sequence_lengths`` only (zero
initial states), OUT/model_stateful.onnx also takes ``initial_h`` (and ``initial_c``) as required inputs, for
streaming. Run by onnxruntime, and by OpenVINO where it is installed (:mod:`cudnn_port.exports.openvino`). ONNX's
LSTM has no projection, so a projected stack has no ONNX form."""
import copy
import os
from . import Artifact, Derived, Format, NotWritten, Road, Runtime
from ..exports import io_names, onnx as onnx_export
from ..exports.onnx import cannot_hold, first_refusal
from ..exports.onnx_guard import guard_sequence_nodes
from ..exports.onnx_tf import name_dynamic_dims, write_graph_onnx
from ..exports.openvino import compile_onnx, open_onnx
from ..exports.quantize import NothingToQuantize, quantize_onnx
from ..exports.runners import onnx_session
from ..graphs.frozen import open_frozen
from ..graphs.nodes import onnx_signature, signature_names
from ..graphs.onnx_parts import cut_runner, foreign_part, write_signature_onnx
from ..graphs.layout_choice import choose_layouts, unknown_layouts
from ..graphs.layouts import LayoutUnknown
from ..graphs.reach import gpu_selected
from ..manifest import warn
from .jobs import Outputs


def _write(job, paths):
    for key, states in (("onnx", False), ("onnx_stateful", True)):
        if key in paths:
            onnx_export.write_onnx(job.canon, paths[key], name=job.name, states=states)


def _open_onnxruntime(path, job):
    session = onnx_session(path)
    names_out = list(io_names(job.spec)[1])
    return lambda feeds: Outputs.of_stack(session.run(names_out, feeds))


def _open_openvino(path, job):
    run = open_onnx(path, job.spec)
    return lambda feeds: Outputs.of_stack(run(feeds))


def _cannot_hold(spec):
    return cannot_hold(spec)


def _write_model(job, paths):
    """The whole model traced on the fused op (the "lean" trace: no sequence lengths where a layer has no mask),
    through tf2onnx with fused ONNX LSTM / GRU nodes for the fused layers;
    inputs as the model names them, outputs ``output_0`` ..."""
    # lazy: Keras, loaded on first use (import cudnn_port stays light)
    from ..layers import fused_layers

    refused = first_refusal((layer.name, layer.spec) for layer in fused_layers(job.model))
    if refused:
        raise NotWritten(f"fused layer {refused}")
    fused = job.frozen("lean")
    names_in, names_out = [t.name for t in fused.inputs], [t.name for t in fused.outputs]
    renames = dict(zip(names_in, job.input_names))
    renames.update(zip(names_out, Outputs.traced_names(len(names_out))))
    specs = {layer.opaque_kernel.numpy().astype("float32").tobytes(): layer.spec for layer in fused_layers(job.model)}
    model = write_graph_onnx(fused.graph.as_graph_def(), names_in, names_out, None, renames, specs)
    # output_2 before output_10, so that session.run(None, ...) returns them in the model's order
    ordered = [copy.deepcopy(value) for value in sorted(model.graph.output, key=lambda v: Outputs.number(v.name))]
    del model.graph.output[:]
    model.graph.output.extend(ordered)
    name_dynamic_dims(model, paths["onnx"], job.axes)


def _open_model(path, job):
    session = onnx_session(path)
    return lambda feeds: Outputs.of_model(session.run([f"output_{i}" for i in range(job.count)],
                                                      {name: feeds[name] for name in job.input_names}))


def _open_model_openvino(path, job):
    """The whole model's ONNX in OpenVINO's CPU plugin, computing in float32."""
    compiled = compile_onnx(path)

    def run(feeds):
        result = compiled({name: feeds[name] for name in job.input_names})
        return Outputs.of_model([result[compiled.output(f"output_{i}")] for i in range(job.count)])

    return run


def _write_graph(job, paths):
    """The graph road's model.onnx: the serving signature (or the only one) through tf2onnx with fused ONNX LSTM /
    GRU nodes in place of the cuDNN nodes; NotWritten where ONNX cannot hold it."""
    refused = first_refusal((n.name, n.spec) for n in job.nodes)
    if refused:
        raise NotWritten(f"node {refused}")
    signature = onnx_signature(job.proto)
    if signature is None:
        names = signature_names(job.proto)
        raise NotWritten(f"the SavedModel has no serving_default signature and {len(names)} others "
                         f"({', '.join(names) or 'none'}), so which one ONNX should hold is not known")
    job.say(f"model.onnx from signature {signature} (fused ONNX LSTM/GRU nodes in place of cuDNN nodes)")
    chosen = {}
    with foreign_part("saved_model" in job.written), job.user_graph("write ONNX for"):
        try:
            with gpu_selected(job.source, job.reordered) as selected:  # tf_keras: its cuDNN path
                part = write_signature_onnx(selected, paths["onnx"], signature)
        except LayoutUnknown:  # the graph cannot tell a GPU alternative's gate layout: the original's outputs do
            chosen = _chosen_by_original(job, signature)
            with gpu_selected(job.source, job.reordered, chosen) as selected:
                part = write_signature_onnx(selected, paths["onnx"], signature)
    guard_file(paths["onnx"])  # onnxruntime's LSTM / GRU kernels end the process on an empty batch
    if part:  # raw text: the numeric part
        warn(job.manifest, job.say, part["onnx_part"])
    gathered = [key for key in job.reordered if chosen.get(key, True) is not None]  # chosen as cuDNN's: none
    if gathered:
        job.say(f"{len(gathered)} cuDNN node(s) had params Keras built in another gate layout (traced on a "
                "build without CUDA, or on ROCm); gathered into cuDNN's (manifest: params_reordered)")
    return dict(onnx_signature=signature, **part)


def _chosen_by_original(job, signature):
    """{"function/node": perm or None} of the GPU alternatives whose layout only the original's outputs tell
    (:func:`~cudnn_port.graphs.layout_choice.choose_layouts`), each said and recorded in the manifest's
    ``params_reordered``."""
    if job.original is None:
        raise NotWritten("the gate layout of a GPU alternative's params is not known, and no original runs to tell it")
    picked = choose_layouts(job.source, signature, unknown_layouts(job.source), lambda: job.original(signature),
                            job.say)
    for key, (name, _) in picked.items():
        job.reordered[key] = f"params in {name}: cuDNN's layout gathered from it (the one gate layout whose " \
                             "model.onnx computes the original's outputs; the graph cannot tell)"
        job.say(f"{key}: its params are in {name} (chosen by the original's outputs)")
    return {key: perm for key, (_, perm) in picked.items()}


def guard_file(path: str) -> None:
    """The model.onnx at ``path`` with a guard in front of each sequence node (:func:`.onnx_guard.
    guard_sequence_nodes`: the signature's dimensions do not say which is the batch), checked and saved again."""
    # lazy: onnx, loaded on first use (import cudnn_port stays light)
    import onnx

    model = onnx.load(str(path))
    if guard_sequence_nodes(model.graph):
        onnx.checker.check_model(model)
        onnx.save(model, str(path))


F16_ATOL, F16_RTOL = 2e-3, 1e-2  # the least tolerance for float16 outputs: about two float16 steps


def _open_graph(path, job):
    """The rewritten graph's model.onnx in onnxruntime, fed the signature's inputs; a numeric-part model (manifest
    ``onnx_input``: a raw-text signature whose string ops stay in TensorFlow) is fed the token ids that OUT's own
    preprocessing computes from the same strings (in frozen_graph.pb where it is there, else in OUT/saved_model)."""
    session, manifest = onnx_session(path), job.manifest
    names = [o.name for o in session.get_outputs()]
    floor = (F16_ATOL, F16_RTOL) if _computes_in_float16(path) else (0.0, 0.0)  # granted only by the source's
    cut = manifest.onnx_input
    token_ids = _token_ids(job, cut) if cut else None

    def run(feeds):
        if cut:
            feeds = {cut.name: token_ids(feeds)}
        values = session.run(names, {i.name: feeds[i.name] for i in session.get_inputs()})
        fed = f"fed {cut.name} from {', '.join(cut.computed_from)}" if cut else ""
        return Outputs(dict(zip(names, values)), fed, *floor)

    return run


def _token_ids(job, cut):
    """``ids(feeds)``: the tensor the numeric part starts from, computed by OUT's TensorFlow graph from the
    signature's inputs (the graph loaded once)."""
    arts, name = job.manifest.model_artifacts, cut.replaces
    if "graphdef" in arts:
        run = open_frozen(os.path.join(job.out, arts["graphdef"]), job.manifest.graphdef_nodes, [name])
        return lambda feeds: run(feeds)[name]
    run = cut_runner(os.path.join(job.out, arts["saved_model"]), job.signature, name)
    return lambda feeds: run(feeds)[0]


def _computes_in_float16(path) -> bool:
    """Whether the ONNX model at ``path`` casts to float16 or holds float16 weights (a Keras mixed_float16 graph:
    the ONNX runs its fused nodes in float32, TensorFlow each op in float16; they differ by a few float16 steps)."""
    # lazy: onnx, loaded on first use (import cudnn_port stays light)
    import onnx

    graph = onnx.load(path, load_external_data=False).graph
    f16 = onnx.TensorProto.FLOAT16
    return any(t.data_type == f16 for t in graph.initializer) or any(
        node.op_type == "Cast" and any(a.name == "to" and a.i == f16 for a in node.attribute) for node in graph.node)


def _write_int8(src, dst):
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
                cannot_hold=_cannot_hold, needs=("onnx", "onnxruntime", "tf2onnx"), default=True, order=50,
                model=Road((Artifact("onnx", "model.onnx"),), _write_model, _open_model, "onnx (onnxruntime)",
                           ("onnxruntime",), more=(("onnx (openvino f32)", _open_model_openvino, ("openvino",)),)),
                graph=Road((Artifact("onnx", "model.onnx"),), _write_graph, _open_graph, "onnx (onnxruntime)",
                           ("onnxruntime",)),
                derived=(Derived("int8", "_int8", ("onnx", "onnx_stateful"), _write_int8, ("onnxruntime",),
                                 needs=("onnxruntime",)),))
