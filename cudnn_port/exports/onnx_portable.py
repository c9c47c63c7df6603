"""The stack's ONNX nodes in a form whose result does not depend on whether a runtime honours ``sequence_lens``.

onnxruntime honours an LSTM / GRU node's ``sequence_lens``; OpenVINO's CPU plugin (2026.4) does not when the input
shapes are dynamic (ours are: batch and time): it runs every sequence over all T steps, so its outputs past a length
are not zero, its final states are those after step T-1, and its backward direction starts at T-1 instead of at each
sequence's own end (docs/conventions.md). This graph gives the same numbers under both behaviours, and keeps the
fused nodes (LSTM: one per layer and direction; GRU: one per layer):

* GRU (either form of its candidate): x gets one more channel, 1 at padded steps and 0 at valid ones, whose weight
  is +K on the update gate z (K = :data:`PAD_GATE`): at a padded step z = 1 exactly in float32 and
  h = z * h_prev + (1 - z) * n stays as it was, wherever the step falls (after the valid steps going forward, before
  them going backward over all T steps), so the node's own outputs and final h are right; at a valid step the channel
  adds 0 * K = 0, nothing;
* LSTM, whose h moves at a padded step even where c is held: every node runs forward; the backward direction reads
  ``ReverseSequence(x, lengths)`` (each sequence reversed within its own length, the padding left in place) and its
  output is reversed back the same way, so in both behaviours the padded steps come after every valid step of a run
  and cannot change a valid output; final h is the run's output at step length-1 (``GatherElements``); final c
  comes from the padding channel, here +K on the forget gate and -K on the input gate: at a padded step f = 1 and
  i = 0 exactly, so c stays as it was after the last valid step;
* plain RNN (``rnn_tanh`` / ``rnn_relu``: an ONNX ``RNN`` node, ``activations`` Tanh / Relu), which has no gate to
  hold a state: as LSTM, each direction one forward node (the backward one on ``ReverseSequence(x, lengths)``), final
  h the output at step length-1; no padding channel;
* the outputs (of all) are multiplied by the length mask (1 at valid steps, 0 past each length);
* a row of length 0 (one a mask keeps no step of; a stack's own lengths below 1 are refused, :mod:`.onnx_guard`):
  the nodes run it for one step (``sequence_lens`` = max(length, 1)), so no runtime sees a length of 0 or a step
  index of -1 (OpenVINO 2024.6's GatherElements read memory outside its input for -1: values up to 1e27; and
  onnxruntime gave final h zeros, not h0). That step is padding to the channel and the mask, so the row's outputs
  are zeros and its GRU h and LSTM c stay h0 / c0; one ``Where`` sets the LSTM's and plain RNN's final h to h0
  (zeros without one): a row of no step ends in its initial states, as the reference and Keras' loop leave it.

:func:`plain_lstm_inputs` undoes the extra channel for onnxruntime-only rewrites (int8), where ``sequence_lens`` holds.
"""
import functools
from typing import TYPE_CHECKING, Any, Callable, List, Optional, Tuple

import numpy as np

from ..gates import CUDNN_ORDER, ONNX_GRU, ONNX_LSTM, ONNX_RNN, reorder
from .onnx_passes import OWN_X
from .onnx_scan import SEQUENCE_FUNCTIONS

if TYPE_CHECKING:
    from ..canonical import CanonicalRNN
    import onnx

PAD_GATE = 1.0e4  # sigmoid(+-1e4 + any pre-activation within +-1e3) is exactly 1 / 0 in float32
PAD_SUFFIX = "_with_pad"  # names the Concat that adds the padding channel to a node's x
ONNX_ORDER = {"lstm": ONNX_LSTM, "gru": ONNX_GRU, "rnn_tanh": ONNX_RNN, "rnn_relu": ONNX_RNN}


# a cell's functions (RNNSpec.activation, recurrent_activation) as ONNX sequence-node activations: (name, alpha,
# beta), None where the function takes none; Keras' hard_sigmoid, relu6(x + 3) / 6, is HardSigmoid(1/6, 1/2)
ONNX_FUNCTIONS = {"tanh": ("Tanh", None, None), "relu": ("Relu", None, None), "sigmoid": ("Sigmoid", None, None),
                  "hard_sigmoid": ("HardSigmoid", 1.0 / 6.0, 0.5), "linear": ("Affine", 1.0, 0.0),
                  "softsign": ("Softsign", None, None), "softplus": ("Softplus", None, None), "elu": ("Elu", 1.0, None),
                  "leaky_relu": ("LeakyRelu", 0.2, None), "celu": ("Elu", 1.0, None),  # celu(alpha 1) is elu
                  # names ONNX's sequence ops do not define: cudnn-port's writer puts them on a node that the
                  # Scan pass always expands (exports.onnx_activations.OWN_FUNCTIONS)
                  "silu": ("Silu", None, None), "gelu": ("Gelu", None, None), "selu": ("Selu", None, None),
                  "relu6": ("Relu6", None, None), "exponential": ("Exp", None, None), "mish": ("Mish", None, None),
                  "hard_silu": ("HardSwish", None, None), "log_sigmoid": ("LogSigmoid", None, None),
                  "tanh_shrink": ("TanhShrink", None, None), "hard_tanh": ("HardTanh", None, None),
                  "hard_shrink": ("HardShrink", None, None), "soft_shrink": ("SoftShrink", None, None),
                  "sparse_plus": ("SparsePlus", None, None), "squareplus": ("Squareplus", None, None),
                  "softmax": ("Softmax", None, None), "log_softmax": ("LogSoftmax", None, None),
                  "sparsemax": ("Sparsemax", None, None),
                  "sparse_sigmoid": ("HardSigmoid", 0.5, 0.5)}  # clip((x + 1) / 2, 0, 1)


def fused_node(spec: "Any", directions: int) -> Tuple[str, dict]:
    """The ONNX op of ``spec``'s cell and its attributes for a node of ``directions`` (1 or 2) directions:
    ``LSTM``; ``GRU`` with ``linear_before_reset=1`` (cuDNN's reset-after form; 0 for the reset-before GRU); ``RNN``
    with ``activations`` [its function] per direction; a cell whose functions are not cuDNN's (RNNSpec.activation,
    recurrent_activation) gets ``activations`` [gates, cell(, cell)] per direction (:data:`ONNX_FUNCTIONS`, with
    ``activation_alpha`` / ``activation_beta`` in order for those that take them). Functions OpenVINO's sequence
    ops do not run are made Scan loops once the graph is whole (:mod:`.onnx_scan`)."""
    attrs = dict(hidden_size=spec.num_units, direction="bidirectional" if directions == 2 else "forward")
    fns = [spec.activation] if spec.is_rnn else \
        [spec.recurrent_activation] + [spec.activation] * (2 if spec.mode == "lstm" else 1)
    if spec.is_rnn or fns != ["sigmoid", "tanh", "tanh"][:len(fns)]:
        named = [ONNX_FUNCTIONS[f] for f in fns] * directions
        attrs["activations"] = [name for name, _, _ in named]
        for key, column in (("activation_alpha", [alpha for _, alpha, _ in named]),
                            ("activation_beta", [beta for _, _, beta in named])):
            values = [float(v) for v in column if v is not None]
            if values:
                attrs[key] = values
    if spec.mode == "gru":  # 0 for a reset-before GRU (Keras' reset_after=False)
        return "GRU", dict(attrs, linear_before_reset=int(spec.reset_after))
    return ("RNN" if spec.is_rnn else "LSTM"), attrs


def scan_form(spec: "Any") -> bool:
    """Whether ``spec``'s nodes become Scan loops (:mod:`.onnx_scan`): a function of the cell's is none of
    :data:`~cudnn_port.exports.onnx_scan.SEQUENCE_FUNCTIONS`, or its gates are not sigmoid."""
    return any(name not in SEQUENCE_FUNCTIONS for name in fused_node(spec, 1)[1].get("activations", [])) or \
        (not spec.is_rnn and spec.recurrent_activation != "sigmoid")


def layer_weights(canon: "CanonicalRNN", layer: int, dtype: type = np.float32) -> List[np.ndarray]:
    """W [D, G*H, I_l], R [D, G*H, H], B [D, 2*G*H] of one layer in ONNX gate order. With ``canon`` unpacked from
    ``np.arange(param_count)`` and ``dtype`` int64: the position in params each weight comes from."""
    spec = canon.spec
    dst, src = ONNX_ORDER[spec.mode], CUDNN_ORDER[spec.mode]
    W, R, B = [], [], []
    for direction in range(spec.num_dirs):
        p = canon.layer(layer, direction)
        W.append(reorder(np.asarray(p.W), src, dst).reshape(-1, p.W.shape[2]))
        R.append(reorder(np.asarray(p.R), src, dst).reshape(-1, spec.num_units))
        B.append(np.concatenate([reorder(np.asarray(p.b_W), src, dst).reshape(-1),
                                 reorder(np.asarray(p.b_R), src, dst).reshape(-1)]))
    return [np.stack(a).astype(dtype) for a in (W, R, B)]


def _direction_weights(canon, layer, direction):
    return [a[direction:direction + 1] for a in layer_weights(canon, layer)]


def _with_pad_channel(W, mode="lstm"):
    """W [D, G*H, I] -> [D, G*H, I+1]: the padding channel's weight: LSTM +K on f and -K on i (ONNX gate order i, o,
    f, c); GRU +K on z (order z, r, h), so that h = z * h_prev + (1 - z) * n stays h_prev exactly."""
    gates = ONNX_LSTM if mode == "lstm" else ONNX_GRU
    H = W.shape[1] // len(gates)
    column = np.zeros((W.shape[0], W.shape[1], 1), W.dtype)
    for gate, value in (("f", PAD_GATE), ("i", -PAD_GATE)) if mode == "lstm" else (("z", PAD_GATE),):
        column[:, gates.index(gate) * H:(gates.index(gate) + 1) * H] = value
    return np.concatenate([W, column], axis=2)


def _padded_weights(canon, layer, direction, weights, node, const, i64, p, tag):
    """Names of W (with the padding channel), R, B of one layer (``direction`` None: both directions, [D, ...]) or of
    one direction of it ([1, ...]): constants, or from ``weights(layer)`` (tensors computed in the graph), sliced to
    the direction and W concatenated with the channel's constant column."""
    mode, pad = canon.spec.mode, not canon.spec.is_rnn  # a plain RNN gets no padding channel
    if weights is None:
        W, R, B = layer_weights(canon, layer) if direction is None else _direction_weights(canon, layer, direction)
        return [const(f"{p}{n}_{tag}", a) for n, a in zip("WRB", (_with_pad_channel(W, mode) if pad else W, R, B))]
    names = list(weights(layer))
    if direction is not None and canon.spec.num_dirs == 2:
        names = [node("Slice", [t, i64(f"start_{direction}", [direction]), i64(f"end_{direction}", [direction + 1]),
                                i64("axis_0", [0])], [f"{p}{n}_{tag}_direction"]) for n, t in zip("WRB", names)]
    if not pad:
        return names
    count = 1 if direction is not None else canon.spec.num_dirs
    gates = len(ONNX_LSTM if mode == "lstm" else ONNX_GRU)
    column = _with_pad_channel(np.zeros((count, gates * canon.spec.num_units, 0), np.float32), mode)
    names[0] = node("Concat", [names[0], const(f"{p}W_{tag}_pad_column", column)], [f"{p}W_{tag}{PAD_SUFFIX}"],
                    axis=2)
    return names


def portable_stack_graph(canon: "CanonicalRNN", x: str, lengths: str, h0: Optional[str], c0: Optional[str],
                         node: Callable[..., Any],
                         const: Callable[[str, np.ndarray], str], prefix: str = "",
                         weights: Optional[Callable[[int], Tuple[str, str, str]]] = None
                         ) -> Tuple[str, str, Optional[str]]:
    """Like :func:`cudnn_port.exports.onnx.stack_graph` (same arguments and results, ``weights`` included;
    ``lengths`` [B] int32 is required), in the form described in the module docstring."""
    spec = canon.spec
    H, D, is_lstm = spec.num_units, spec.num_dirs, spec.mode == "lstm"
    op, attrs = fused_node(spec, 1)
    p, made = prefix, {}
    if weights is not None:  # each layer's tensors made once, though both directions of an LSTM layer read them
        weights = functools.lru_cache(maxsize=None)(weights)

    def i64(name, values):  # an int64 constant, made once per name
        if name not in made:
            made[name] = const(f"{p}{name}", np.array(values, np.int64))
        return made[name]

    lens64 = node("Cast", [lengths], [f"{p}lengths_i64"], to=7)
    # the zero-length guard (module docstring): the nodes run each row for max(length, 1) steps
    runs = node("Max", [lengths, const(f"{p}one_i32", np.array([1], np.int32))], [f"{p}runs"])
    steps = node("Range", [i64("range_start", 0), node("Gather", [node("Shape", [x], [f"{p}x_shape"]),
                                                                  i64("time_axis", 0)], [f"{p}time"], axis=0),
                           i64("range_delta", 1)], [f"{p}steps"])
    valid = node("Less", [node("Unsqueeze", [steps, i64("axis_1", [1])], [f"{p}steps_t1"]),
                          node("Unsqueeze", [lens64, i64("axis_0", [0])], [f"{p}lengths_1b"])], [f"{p}valid"])
    mask = node("Unsqueeze", [node("Cast", [valid], [f"{p}valid_f"], to=1), i64("axis_2", [2])], [f"{p}mask"])
    pad = None if spec.is_rnn else node("Unsqueeze", [node("Cast", [node("Not", [valid], [f"{p}padded"])],
                                                               [f"{p}padded_f"], to=1), i64("axis_2", [2])],
                                        [f"{p}pad_channel"])
    if spec.mode == "gru":
        return _gru_layers(canon, x, runs, h0, pad, mask, node, const, i64, p, weights)
    runs64 = node("Cast", [runs], [f"{p}runs_i64"], to=7)
    last = node("Unsqueeze", [node("Sub", [runs64, i64("one", 1)], [f"{p}last_step"]), i64("axes_0_2", [0, 2])],
                [f"{p}last_1b1"])
    batch = node("Gather", [node("Shape", [lengths], [f"{p}lengths_shape"]), i64("zero", [0])], [f"{p}batch"], axis=0)
    last = node("Expand", [last, node("Concat", [i64("one_1", [1]), batch, i64("units", [H])], [f"{p}last_shape"],
                                      axis=0)], [f"{p}last_index"])
    finals_h, finals_c = [], []
    for layer in range(spec.num_layers):
        ys = []
        for direction in range(D):
            tag = f"{layer}_{direction}" if D == 2 else f"{layer}"
            pseudo = layer * D + direction
            xd = x if direction == 0 else node("ReverseSequence", [x, runs64], [f"{p}x_rev_{tag}"], batch_axis=1,
                                                 time_axis=0)
            xd = xd if pad is None else node("Concat", [xd, pad], [f"{p}x_{tag}{PAD_SUFFIX}"], axis=2)
            names = _padded_weights(canon, layer, direction, weights, node, const, i64, p, tag)
            states = []
            for label, state in (("h0", h0), ("c0", c0)) if is_lstm else (("h0", h0),):
                if state is not None:
                    states.append(node("Slice", [state, i64(f"start_{pseudo}", [pseudo]),
                                                 i64(f"end_{pseudo}", [pseudo + 1]), i64("axis_0", [0])],
                                       [f"{p}{label}_{tag}"]))
            outs = [f"{p}y_{tag}", f"{p}y_h_{tag}"] + ([f"{p}y_c_{tag}"] if is_lstm else [])
            node(op, [xd] + names + [runs] + states, outs, **attrs)
            y = node("Squeeze", [outs[0], i64("axis_1", [1])], [f"{p}y_sq_{tag}"])  # [T, B, H]
            finals_h.append(node("GatherElements", [y, last], [f"{p}h_n_{tag}"], axis=0))
            if is_lstm:
                finals_c.append(outs[2])
            if direction == 1:
                y = node("ReverseSequence", [y, runs64], [f"{p}y_rev_{tag}"], batch_axis=1, time_axis=0)
            ys.append(y)
        x = ys[0] if D == 1 else node("Concat", ys, [f"{p}x_{layer + 1}"], axis=2)
    x = node("Mul", [x, mask], [f"{p}y_masked"])
    final_h = node("Concat", finals_h, [f"{p}h_n_run"], axis=0)
    # a row of length 0 ends in h0 (or zeros): one Where over [L*D, B, H]; its c already is c0 (the padding channel)
    empty = node("Unsqueeze", [node("Less", [lens64, i64("one_1", [1])], [f"{p}empty"]), i64("axes_0_2", [0, 2])],
                 [f"{p}empty_1b1"])
    start = h0 if h0 is not None else const(f"{p}h_n_zero", np.zeros((1, 1, 1), np.float32))
    final_h = node("Where", [empty, start, final_h], [f"{p}h_n"])
    final_c = node("Concat", finals_c, [f"{p}c_n"], axis=0) if is_lstm else None
    return x, final_h, final_c


def plain_lstm_inputs(model: "onnx.ModelProto") -> int:
    """Drop the padding channel of every LSTM node of ``model`` (ModelProto, changed in place): x back to the
    Concat's first input, W back to [D, 4H, I]. For rewrites that only onnxruntime runs (which honours
    ``sequence_lens``, so the channel changes nothing there), such as int8, whose per-row weight scales the
    channel's +-K would swamp. Nodes whose W is computed in the graph keep the channel. Returns the number of
    nodes changed."""
    # lazy: onnx, loaded on first use (import cudnn_port stays light)
    from onnx import numpy_helper

    producer = {out: n for n in model.graph.node for out in n.output}
    inits = {i.name: i for i in model.graph.initializer}
    def source(name):  # through the views onnx_passes.sequence_inputs_apart gives nodes sharing X: Reshape(a, Shape(a))
        view = producer.get(name)
        while view is not None and view.op_type == "Reshape" and producer.get(view.input[1]) is not None and \
                producer[view.input[1]].op_type == "Shape" and producer[view.input[1]].input[0] == view.input[0]:
            name, view = view.input[0], producer.get(view.input[0])
        return name

    changed = 0
    for n in model.graph.node:
        concat = producer.get(source(n.input[0])) if n.op_type == "LSTM" else None
        if (concat is None or concat.op_type != "Concat" or not concat.output[0].endswith(PAD_SUFFIX)
                or n.input[1] not in inits):  # W computed in the graph: the channel stays (and so does float32)
            continue
        W = numpy_helper.to_array(inits[n.input[1]])
        inits[n.input[1]].CopyFrom(numpy_helper.from_array(np.ascontiguousarray(W[:, :, :-1]), n.input[1]))
        n.input[0] = concat.input[0]
        changed += 1
    while True:  # the pad Concats nothing reads now, and the views of them
        used = {i for n in model.graph.node for i in n.input} | {o.name for o in model.graph.output}
        dead = [n for n in model.graph.node if n.output[0] not in used and (
            (n.op_type == "Concat" and n.output[0].endswith(PAD_SUFFIX)) or
            (n.op_type in ("Reshape", "Shape") and n.name.rsplit("/", 1)[-1].startswith(OWN_X)))]
        if not dead:
            return changed
        for n in dead:
            model.graph.node.remove(n)


def _gru_layers(canon, x, lengths, h0, pad, mask, node, const, i64, p, weights):
    """GRU layers of :func:`portable_stack_graph`: one node per layer (bidirectional where the stack is), x with the
    padding channel, whose +K on z makes every padded step leave h exactly as it was, wherever the step falls (after
    the valid steps going forward, before them going backward over all T steps). Final h is the node's own."""
    spec = canon.spec
    D = spec.num_dirs
    op, attrs = fused_node(spec, D)
    flatten = i64("flatten_dirs", [0, 0, -1])
    finals = []
    for layer in range(spec.num_layers):
        names = _padded_weights(canon, layer, None, weights, node, const, i64, p, layer)
        states = [] if h0 is None else [node("Slice", [h0, i64(f"start_{layer}", [layer * D]),
                                                       i64(f"end_{layer}", [(layer + 1) * D]), i64("axis_0", [0])],
                                             [f"{p}h0_{layer}"])]
        xp = node("Concat", [x, pad], [f"{p}x_{layer}{PAD_SUFFIX}"], axis=2)
        outs = [f"{p}y_{layer}", f"{p}y_h_{layer}"]
        node(op, [xp] + names + [lengths] + states, outs, **attrs)
        x = node("Reshape", [node("Transpose", [outs[0]], [f"{p}y_t_{layer}"], perm=[0, 2, 1, 3]), flatten],
                 [f"{p}x_{layer + 1}"])
        finals.append(outs[1])
    return node("Mul", [x, mask], [f"{p}y_masked"]), node("Concat", finals, [f"{p}h_n"], axis=0), None
