"""ONNX model of one stack: one fused ``LSTM`` / ``GRU`` node per layer (no Loop or Scan), ``sequence_lens`` wired.

Graph, with x batch-major as in every artifact::

    X_0 = Transpose(inputs, [1, 0, 2])                                  [T, B, I]
    for layer l:
        Y, Y_h[, Y_c] = LSTM|GRU(X_l, W_l, R_l, B_l, sequence_lengths, initial_h[lD:(l+1)D][, initial_c[...]])
        X_{l+1} = Reshape(Transpose(Y, [0, 2, 1, 3]), [0, 0, -1])     [T, D, B, H] -> [T, B, D*H]
    outputs = Transpose(X_L, [1, 0, 2]);  final_h = Concat(Y_h over layers)

Weights: LSTM gates i, o, f, c (``gates.ONNX_LSTM``), ``B = [b_W, b_R]``; GRU gates z, r, h with
``linear_before_reset=1`` (cuDNN's reset-after form). Written with IR version 8 / opset 17, which onnxruntime
accepts. ``initial_h`` / ``initial_c`` are required inputs here: pass zeros for a fresh start.
"""
import numpy as np

from ..gates import CUDNN_ORDER, ONNX_GRU, ONNX_LSTM, reorder
from . import io_names

OPSET = 17
IR_VERSION = 8


def _weights(canon, layer):
    spec = canon.spec
    dst = ONNX_LSTM if spec.mode == "lstm" else ONNX_GRU
    src = CUDNN_ORDER[spec.mode]
    W, R, B = [], [], []
    for direction in range(spec.num_dirs):
        p = canon.layer(layer, direction)
        W.append(reorder(np.asarray(p.W), src, dst).reshape(-1, p.W.shape[2]))
        R.append(reorder(np.asarray(p.R), src, dst).reshape(-1, spec.num_units))
        B.append(np.concatenate([reorder(np.asarray(p.b_W), src, dst).reshape(-1),
                                 reorder(np.asarray(p.b_R), src, dst).reshape(-1)]))
    return [np.stack(a).astype(np.float32) for a in (W, R, B)]


def build_model(canon, name="rnn"):
    import onnx
    from onnx import TensorProto, helper, numpy_helper

    spec = canon.spec
    H, D, is_lstm = spec.num_units, spec.num_dirs, spec.mode == "lstm"
    state_shape = [spec.num_pseudo_layers, "batch", H]
    graph_inputs = [helper.make_tensor_value_info("inputs", TensorProto.FLOAT, ["batch", "time", spec.input_size]),
                    helper.make_tensor_value_info("sequence_lengths", TensorProto.INT32, ["batch"]),
                    helper.make_tensor_value_info("initial_h", TensorProto.FLOAT, state_shape)]
    if is_lstm:
        graph_inputs.append(helper.make_tensor_value_info("initial_c", TensorProto.FLOAT, state_shape))
    nodes = [helper.make_node("Transpose", ["inputs"], ["x_0"], perm=[1, 0, 2])]
    inits = [numpy_helper.from_array(np.array([0, 0, -1], np.int64), "flatten_dirs"),
             numpy_helper.from_array(np.array([0], np.int64), "axis_0")]
    finals_h, finals_c = [], []
    for layer in range(spec.num_layers):
        W, R, B = _weights(canon, layer)
        inits += [numpy_helper.from_array(a, f"{n}_{layer}") for n, a in (("W", W), ("R", R), ("B", B))]
        inits += [numpy_helper.from_array(np.array([layer * D], np.int64), f"start_{layer}"),
                  numpy_helper.from_array(np.array([(layer + 1) * D], np.int64), f"end_{layer}")]
        states = []
        for s in (["initial_h", "initial_c"] if is_lstm else ["initial_h"]):
            nodes.append(helper.make_node("Slice", [s, f"start_{layer}", f"end_{layer}", "axis_0"], [f"{s}_{layer}"]))
            states.append(f"{s}_{layer}")
        outs = [f"y_{layer}", f"y_h_{layer}"] + ([f"y_c_{layer}"] if is_lstm else [])
        attrs = dict(hidden_size=H, direction="bidirectional" if D == 2 else "forward")
        if not is_lstm:
            attrs["linear_before_reset"] = 1
        nodes.append(helper.make_node("LSTM" if is_lstm else "GRU",
                                      [f"x_{layer}", f"W_{layer}", f"R_{layer}", f"B_{layer}", "sequence_lengths"]
                                      + states, outs, name=f"{spec.mode}_{layer}", **attrs))
        nodes.append(helper.make_node("Transpose", [f"y_{layer}"], [f"y_t_{layer}"], perm=[0, 2, 1, 3]))
        nodes.append(helper.make_node("Reshape", [f"y_t_{layer}", "flatten_dirs"], [f"x_{layer + 1}"]))
        finals_h.append(f"y_h_{layer}")
        if is_lstm:
            finals_c.append(f"y_c_{layer}")
    nodes.append(helper.make_node("Transpose", [f"x_{spec.num_layers}"], ["outputs"], perm=[1, 0, 2]))
    nodes.append(helper.make_node("Concat", finals_h, ["final_h"], axis=0))
    graph_outputs = [helper.make_tensor_value_info("outputs", TensorProto.FLOAT, ["batch", "time", D * H]),
                     helper.make_tensor_value_info("final_h", TensorProto.FLOAT, state_shape)]
    if is_lstm:
        nodes.append(helper.make_node("Concat", finals_c, ["final_c"], axis=0))
        graph_outputs.append(helper.make_tensor_value_info("final_c", TensorProto.FLOAT, state_shape))
    graph = helper.make_graph(nodes, name, graph_inputs, graph_outputs, initializer=inits)
    model = helper.make_model(graph, producer_name="cudnn-port", opset_imports=[helper.make_opsetid("", OPSET)])
    model.ir_version = IR_VERSION
    onnx.checker.check_model(model)
    assert [i.name for i in graph_inputs] == list(io_names(spec)[0])
    return model


def write_onnx(canon, path, name="rnn"):
    import onnx

    onnx.save(build_model(canon, name), str(path))
