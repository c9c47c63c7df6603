"""TFLite model of one stack, builtin ops only (no Flex op), written as a flatbuffer (:mod:`.tflite_fb`).

Interface (batch and time dynamic: ``resize_tensor_input`` then ``allocate_tensors``)::

    model.tflite           inputs [B, T, I] float32, sequence_lengths [B] int32
    model_stateful.tflite  the same and initial_h [L*D, B, S], initial_c [L*D, B, H] (LSTM)
    -> outputs [B, T, D*S] (zero past each length), final_h [L*D, B, S], final_c [L*D, B, H] (LSTM)

Graph, x_0 = inputs, valid[b, t] = t < length_b, pad = 1 - valid, last[b, t] = (t == length_b - 1)::

    for layer l, direction d (p = l*D + d):
        x = x_l, or REVERSE_SEQUENCE(x_l, lengths) for the backward direction (each sequence's valid part reversed)
        LSTM: y = UNIDIRECTIONAL_SEQUENCE_LSTM(CONCATENATION(x, pad), W, R, b_W + b_R, projection, h, c)
              (time-major, between TRANSPOSEs: batch-major, the op steps each sequence alone, 3-6x slower at B=32)
              h, c: variable tensors set from initial_h[p], initial_c[p] (GATHER) at the start of every call
              pad's column of W adds -BIG to gate i and +BIG to gate f past each length: i = 0, f = 1 (in float32),
              so c stays at its value at length - 1 (the op itself runs over all T steps: it takes no lengths)
        GRU:  y, h = WHILE(t < T) of builtin ops: one step of cuDNN's GRU, h kept past each length (SELECT_V2)
              (:mod:`.tflite_loop`; so is an LSTM or RNN whose functions no fused op applies, :func:`fused_op`,
              its c kept as h is)
        RNN:  y = UNIDIRECTIONAL_SEQUENCE_RNN(x, W, R, b_W + b_R, h), fused TANH or RELU (rnn_tanh / rnn_relu), h a
              variable tensor as for LSTM; the op runs over all T steps, and a padded step comes after every valid one
        LSTM, RNN: final_h[p] = SUM(y * last, time), final_c[p] = c after the op;  a loop: its h (and c)
        y = REVERSE_SEQUENCE(y, lengths) for the backward direction
    x_{l+1} = CONCATENATION(y over directions) * valid

So outputs, final_h and final_c follow cuDNN's semantics on ragged batches too (docs/conventions.md, section 2).
Run through the SignatureDef ``serving_default``, which resizes the inputs itself::

    from ai_edge_litert.interpreter import Interpreter
    step = Interpreter("OUT/model_stateful.tflite").get_signature_runner("serving_default")
    result = step(inputs=x, sequence_lengths=lengths, initial_h=h, initial_c=c)   # {"outputs", "final_h", "final_c"}
"""
from typing import TYPE_CHECKING, Optional

import numpy as np

from ..gates import CUDNN_ORDER
from .tflite_fb import FlatModel
from .tflite_loop import loop_layer

if TYPE_CHECKING:
    from ..canonical import CanonicalRNN
    from ..layout import RNNSpec

BIG = 1.0e4  # |pre-activation| past each length: sigmoid(-BIG) = 0 and sigmoid(BIG) = 1 in float32
TANH = 4  # ActivationFunctionType.TANH
RELU = 1  # ActivationFunctionType.RELU
LSTM_ACTIVATIONS = {"tanh": TANH, "relu": RELU}  # the fused LSTM's cell function; its gates are sigmoid
RNN_ACTIVATIONS = {"tanh": TANH, "relu": RELU, "linear": 0}  # the fused RNN's function (0: NONE)


def cannot_hold(spec: "RNNSpec") -> Optional[str]:
    """Why TFLite's builtin ops hold no exact form of a stack of ``spec``: None, every cell has one (a fused op where
    it applies the cell's functions, :func:`fused_op`, else a loop of builtin ops, :mod:`.tflite_loop`); kept as the
    format registry's question."""
    return None


def fused_op(spec: "RNNSpec") -> bool:
    """Whether a fused TFLite op computes ``spec``'s cell: an LSTM of :data:`LSTM_ACTIVATIONS` with sigmoid gates
    (ActivationFunctionType has no sigmoid), a plain RNN of :data:`RNN_ACTIVATIONS`; never a GRU."""
    if spec.mode == "lstm":
        return spec.activation in LSTM_ACTIVATIONS and spec.recurrent_activation == "sigmoid"
    return spec.is_rnn and spec.activation in RNN_ACTIVATIONS


LENGTHS_GUARD = "sequence_lengths_refused: each length must be in [1, time]"  # the op failing on such lengths
BATCH_GUARD = "empty_batch_refused: batch must be at least 1"  # the op failing on an empty batch
SIGNATURE = "serving_default"  # interpreter.get_signature_runner("serving_default")(inputs=..., sequence_lengths=...)


class _Graph:
    """The main subgraph of one model and the tensors every layer shares."""

    def __init__(self, spec, stateful, guard_lengths=True):
        self.spec, self.model = spec, FlatModel()
        g = self.g = self.model.subgraph("main")
        S, H, LD = spec.state_size, spec.num_units, spec.num_pseudo_layers
        self.x = g.tensor("inputs", "float32", [-1, -1, spec.input_size])
        self.lengths = g.tensor("sequence_lengths", "int32", [-1])
        g.inputs = [self.x, self.lengths]
        shape = g.op("SHAPE", [self.x], "input_shape", dtype="int32", options="ShapeOptions", outType=2)
        i32 = lambda name, v: g.const(name, np.asarray(v, np.int32))
        self.i32 = i32
        self.T = g.op("STRIDED_SLICE", [shape, i32("one_1", [1]), i32("two_1", [2]), i32("one_1b", [1])], "time",
                      dtype="int32", options="StridedSliceOptions", shrinkAxisMask=1)
        batch = g.op("STRIDED_SLICE", [shape, i32("zero_1", [0]), i32("one_1c", [1]), i32("one_1d", [1])], "batch",
                     dtype="int32", options="StridedSliceOptions")
        self.batch_time = g.op("STRIDED_SLICE", [shape, i32("zero_1b", [0]), i32("two_1b", [2]),
                                                 i32("one_1e", [1])], "batch_time", dtype="int32",
                               options="StridedSliceOptions")
        self.swap = i32("swap_batch_time", [1, 0, 2])
        if guard_lengths:  # a stack's own file; inside a whole model a mask may leave a row no step (length 0)
            self.lengths = self._checked_lengths(batch)
        steps = g.op("RANGE", [i32("zero", 0), self.T, i32("one", 1)], "steps", dtype="int32")
        row = g.op("RESHAPE", [steps, i32("row_shape", [1, -1])], "steps_row", dtype="int32")
        column = g.op("RESHAPE", [self.lengths, i32("column_shape", [-1, 1])], "lengths_column", dtype="int32")
        self.valid_b = g.op("EXPAND_DIMS", [g.op("LESS", [row, column], "valid_2d", dtype="bool"), i32("axis2", 2)],
                            "valid_bool", dtype="bool")
        self.valid = g.op("CAST", [self.valid_b], "valid")
        self.pad = g.op("SUB", [g.const("one_f", np.ones(1, np.float32)), self.valid], "pad",
                        options="SubOptions")
        # last[b, t] = (t + 1 == length_b): the step counts move, not lengths' column, which LiteRT may compute in
        # place in lengths' own memory (a SUB on it changed the lengths a later REVERSE_SEQUENCE read: measured)
        next_step = g.op("ADD", [row, i32("one_2d", [[1]])], "next_step", dtype="int32", options="AddOptions")
        self.last = g.op("CAST", [g.op("EXPAND_DIMS", [g.op("EQUAL", [next_step, column], "last_2d", dtype="bool"),
                                                       i32("axis2b", 2)], "last_bool", dtype="bool")], "last")
        self.states = {}
        for label, width in (("initial_h", S), ("initial_c", H))[:2 if spec.mode == "lstm" else 1]:
            if stateful:
                self.states[label] = g.tensor(label, "float32", [LD, -1, width])
                g.inputs.append(self.states[label])
            else:
                dims = g.op("CONCATENATION", [i32(f"{label}_ld", [LD]), batch, i32(f"{label}_w", [width])],
                            f"{label}_shape", dtype="int32", options="ConcatenationOptions", axis=0)
                self.states[label] = g.op("FILL", [dims, g.const(f"{label}_zero", np.float32(0))], label)

    def _checked_lengths(self, batch) -> int:
        """``sequence_lengths`` through a check that each lies in [1, T]: else a GATHER out of bounds fails (a
        catchable error, at the op writing ``sequence_lengths_refused...``; every size stays known when LiteRT
        prepares the model, see :mod:`.tflite_model`) instead of an answer cuDNN does not define
        (LiteRT returned final_h all zeros past T, and for length 0 other final states than ONNX's runtimes). An
        empty batch fails the same way, at the op writing ``empty_batch_refused...``, before any op that steps
        the batch runs: LiteRT 2.3 ended the process (SIGSEGV) in the fused sequence ops at batch 0."""
        g, i32 = self.g, self.i32
        empty = g.op("EQUAL", [batch, i32("batch_floor", [0])], "batch_is_zero", dtype="bool")
        empty_index = g.op("CAST", [empty], "empty_batch_probe_index", dtype="int32")
        refused = g.op("GATHER", [i32("probe_b", [0]), empty_index], BATCH_GUARD, dtype="int32",
                       options="GatherOptions", axis=0)  # [1]: 0, or out of bounds at batch 0
        self.lengths = g.op("ADD", [self.lengths, refused], "sequence_lengths_batch_checked", dtype="int32",
                            options="AddOptions")
        below = g.op("REDUCE_ANY", [g.op("LESS", [self.lengths, i32("length_floor", 1)], "length_below_one",
                                         dtype="bool"), i32("lengths_axis", [0])], "any_below_one", dtype="bool",
                     options="ReducerOptions")
        beyond = g.op("REDUCE_ANY", [g.op("GREATER", [self.lengths, self.T], "length_beyond_time", dtype="bool"),
                                     i32("lengths_axis_b", [0])], "any_beyond_time", dtype="bool",
                      options="ReducerOptions")
        bad = g.op("LOGICAL_OR", [below, beyond], "lengths_out_of_range", dtype="bool")
        index = g.op("SELECT_V2", [bad, i32("out_of_bounds", 1), i32("in_bounds", 0)], "lengths_probe_index",
                     dtype="int32")
        zero = g.op("GATHER", [i32("probe", [0]), index], LENGTHS_GUARD, dtype="int32", options="GatherOptions",
                    axis=0)
        return g.op("ADD", [self.lengths, zero], "sequence_lengths_checked", dtype="int32", options="AddOptions")

    def state(self, label, p, width, variable=False) -> int:
        """initial_h[p] or initial_c[p], [B, width]: a variable tensor where a fused op updates it in place."""
        out = self.g.tensor(f"{label}_{p}", "float32", [-1, width], variable=variable)
        return self.g.op("GATHER", [self.states[label], self.i32(f"{label}_index_{p}", p)], out,
                         options="GatherOptions", axis=0)

    def reverse(self, x, name) -> int:
        return self.g.op("REVERSE_SEQUENCE", [x, self.lengths], name, options="ReverseSequenceOptions", seqDim=1,
                         batchDim=0)

    def final(self, y, p) -> int:
        """y [B, T, S] at each sequence's last valid step: [B, S] (exact: one 1 and zeros summed)."""
        g = self.g
        return g.op("SUM", [g.op("MUL", [y, self.last], f"y_last_{p}", options="MulOptions"),
                            self.i32(f"time_axis_{p}", [1])], f"final_h_{p}", options="ReducerOptions")


def _lstm(graph, canon, x, layer, direction):
    """One fused UNIDIRECTIONAL_SEQUENCE_LSTM over x [B, T, I_l]: (y [B, T, S], final_h [B, S], final_c [B, H])."""
    g, spec, p = graph.g, graph.spec, layer * graph.spec.num_dirs + direction
    params, H, S = canon.layer(layer, direction), spec.num_units, spec.state_size
    steer = np.zeros((4, H, 1), np.float32)
    steer[CUDNN_ORDER["lstm"].index("i")], steer[CUDNN_ORDER["lstm"].index("f")] = -BIG, BIG
    W = np.concatenate([np.asarray(params.W, np.float32), steer], axis=2)
    bias = np.asarray(params.b_W, np.float32) + np.asarray(params.b_R, np.float32)
    name = f"lstm_{layer}_{direction}"
    gates = [g.const(f"{name}/W_{gate}", W[k]) for k, gate in enumerate(CUDNN_ORDER["lstm"])]
    recurrent = [g.const(f"{name}/R_{gate}", np.asarray(params.R[k], np.float32))
                 for k, gate in enumerate(CUDNN_ORDER["lstm"])]
    biases = [g.const(f"{name}/b_{gate}", bias[k]) for k, gate in enumerate(CUDNN_ORDER["lstm"])]
    projection = g.const(f"{name}/P", np.asarray(params.P, np.float32)) if spec.num_proj else -1
    h = graph.state("initial_h", p, S, variable=True)
    c = graph.state("initial_c", p, H, variable=True)
    x_pad = g.op("CONCATENATION", [x, graph.pad], f"{name}/x_pad", options="ConcatenationOptions", axis=2)
    # inputs: x, 4 input weights, 4 recurrent weights, 3 peepholes, 4 biases, projection (weights, bias),
    # output state, cell state, 4 layer-norm weights (TFLite's order of gates is cuDNN's: i, f, c, o)
    # time-major: the op then steps the whole batch at once (batch-major, it runs each sequence on its own)
    x_pad = g.op("TRANSPOSE", [x_pad, graph.swap], f"{name}/x_time_major")
    y = g.op("UNIDIRECTIONAL_SEQUENCE_LSTM", [x_pad] + gates + recurrent + [-1] * 3 + biases +
             [projection, -1, h, c] + [-1] * 4, f"{name}/y_time_major", options="UnidirectionalSequenceLSTMOptions",
             fusedActivationFunction=LSTM_ACTIVATIONS[spec.activation], timeMajor=True)
    y = g.op("TRANSPOSE", [y, graph.swap], f"{name}/y")
    # c is updated in place; adding 0 * sum(y) orders its read after the op for runtimes that schedule by data
    # edges (XNNPACK's partitions), and is exact (y is finite)
    after = g.op("MUL", [g.op("SUM", [y, graph.i32(f"{name}/all_axes", [0, 1, 2])], f"{name}/y_sum",
                               options="ReducerOptions"), g.const(f"{name}/zero", np.float32(0))], f"{name}/after",
                 options="MulOptions")
    final_c = g.op("ADD", [c, after], f"{name}/final_c", options="AddOptions")
    return y, graph.final(y, p), final_c


def _rnn(graph, canon, x, layer, direction):
    """One fused UNIDIRECTIONAL_SEQUENCE_RNN over x [B, T, I_l]: (y [B, T, H], final_h [B, H])."""
    g, spec, p = graph.g, graph.spec, layer * graph.spec.num_dirs + direction
    params, H = canon.layer(layer, direction), spec.num_units
    name = f"rnn_{layer}_{direction}"
    bias = np.asarray(params.b_W[0], np.float32) + np.asarray(params.b_R[0], np.float32)
    h = graph.state("initial_h", p, H, variable=True)
    # inputs: x, input weights [H, I_l], recurrent weights [H, H], bias [H], hidden state (updated in place)
    y = g.op("UNIDIRECTIONAL_SEQUENCE_RNN", [x, g.const(f"{name}/W", np.asarray(params.W[0], np.float32)),
                                             g.const(f"{name}/R", np.asarray(params.R[0], np.float32)),
                                             g.const(f"{name}/bias", bias), h], f"{name}/y",
             options="SequenceRNNOptions", timeMajor=False,
             fusedActivationFunction=RNN_ACTIVATIONS[spec.activation])
    return y, graph.final(y, p)


def build_model(canon: "CanonicalRNN", stateful: bool = False, batch: Optional[int] = None,
                guard_lengths: bool = True) -> bytes:
    """The serialized TFLite model of stack ``canon`` (see the module docstring); ``stateful``: states are inputs;
    ``batch``: the batch its inputs start at until resized (the batch a whole model declares; else 1), so that a
    caller who resizes ``inputs`` and ``sequence_lengths`` to it leaves ``initial_h`` / ``initial_c`` fitting (LiteRT
    refused the fused LSTM otherwise: ``NumElements(output_state) != n_batch * n_output``). ``guard_lengths``: a
    length outside [1, time] fails the call (a stack's file; a whole model's layer takes a mask's length 0)."""
    spec = canon.spec
    graph = _Graph(spec, stateful, guard_lengths)
    if batch:
        for index in graph.g.inputs:  # inputs [B, T, I], sequence_lengths [B], states [L*D, B, S]
            t = graph.g.tensors[index]
            axis = 1 if t.name.startswith("initial_") else 0
            t.shape = [int(batch) if k == axis else d for k, d in enumerate(t.shape)]
    g = graph.g
    x, finals_h, finals_c = graph.x, [], []
    for layer in range(spec.num_layers):
        ys = []
        for direction in range(spec.num_dirs):
            x_in = x if direction == 0 else graph.reverse(x, f"x_reversed_{layer}")
            if not fused_op(spec):  # a GRU, or functions no fused op applies
                y, h_n, c_n = loop_layer(graph, canon, x_in, layer, direction)
            elif spec.mode == "lstm":
                y, h_n, c_n = _lstm(graph, canon, x_in, layer, direction)
            else:
                (y, h_n), c_n = _rnn(graph, canon, x_in, layer, direction), None
            finals_h.append(h_n)
            finals_c += [c_n] if c_n is not None else []
            ys.append(y if direction == 0 else graph.reverse(y, f"y_reversed_{layer}"))
        y = ys[0] if len(ys) == 1 else g.op("CONCATENATION", ys, f"y_{layer}", options="ConcatenationOptions", axis=2)
        x = g.op("MUL", [y, graph.valid], "outputs" if layer == spec.num_layers - 1 else f"x_{layer + 1}",
                 options="MulOptions")
    g.outputs = [x, g.op("PACK", finals_h, "final_h", options="PackOptions", valuesCount=len(finals_h), axis=0)]
    if finals_c:
        g.outputs.append(g.op("PACK", finals_c, "final_c", options="PackOptions", valuesCount=len(finals_c), axis=0))
    graph.model.signature(SIGNATURE)
    return graph.model.serialize()


def write_tflite(canon: "CanonicalRNN", path: str, stateful: bool = False, batch: Optional[int] = None) -> None:
    with open(path, "wb") as f:
        f.write(build_model(canon, stateful, batch))
