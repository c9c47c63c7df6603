"""Judges: components that compute what an artifact should, sharing no code path with the artifacts themselves.

The artifacts run :mod:`cudnn_port.tf_graph` (TensorFlow ops) or ONNX nodes written by :mod:`cudnn_port.exports`.
Their judges are the NumPy reference (:mod:`cudnn_port.reference`) and stock components loading the converted
weights by name, as users load them.
"""
from typing import TYPE_CHECKING, Any, Callable, Dict, List, Optional, Tuple

import numpy as np

from .. import reference
from ..deps import import_tf
from ..layer_paths import judged_by
from ..keras_models.model_inputs import as_model_takes
from ..targets.tf1 import cell_scope
from .cudnn_api import canonical

if TYPE_CHECKING:
    from ..layout import RNNSpec
    import keras


class ReferenceStack:
    """One fused layer's stack computed by the NumPy reference, float64. Called like the fused layer's own paths:
    ``(x [B, T, I], lengths [B], h0 [L*D, B, S], c0) -> (outputs, h_n, c_n)``."""

    def __init__(self, canon):
        self.canon = canon

    def __call__(self, x, lengths, h0, c0):
        tf = import_tf()
        lstm = self.canon.spec.mode == "lstm"

        def run(x, lengths, h0, c0):
            y, h, c = reference.forward(self.canon, x, lengths, h0, c0 if lstm else None)
            return [a.astype(np.float32) for a in (y, h, c if lstm else h)]

        y, h, c = tf.numpy_function(run, [x, lengths, h0, c0 if lstm else h0], [tf.float32] * 3)
        return y, h, (c if lstm else None)


def model_outputs(result: Any) -> List[np.ndarray]:
    """A model call's result as a list of NumPy arrays: one tensor, a list, or a dict of them (in sorted key order, as
    Keras flattens it and the artifacts' ``output_0`` ... follow)."""
    # lazy: Keras, loaded on first use (import cudnn_port stays light)
    import keras

    return [np.asarray(r) for r in keras.tree.flatten(result)]


def model_judge(model: "keras.Model") -> Tuple[Callable, str]:
    """(callable(list of inputs) -> list of arrays, its name): ``model`` with every fused layer's stack computed by
    the NumPy reference on its buffer read through the cuDNN API's statement of the layout
    (:mod:`cudnn_port.judging.cudnn_api`), sharing no code with the fused layers' own paths (cudnn_port.tf_graph),
    the layout every writer reads buffers by (cudnn_port.layout) or the Keras target (cudnn_port.targets.keras)."""
    # lazy: Keras, loaded on first use (import cudnn_port stays light)
    from ..layers import fused_layers

    judges = {id(layer): ReferenceStack(canonical(layer.spec, layer.opaque_kernel.numpy()))
              for layer in fused_layers(model)}

    def run(inputs):
        with judged_by(judges):
            return model_outputs(model(as_model_takes(model, inputs), training=False))

    if not judges:  # a model of stock Keras layers: the judge is Keras' own computation of it
        return run, "the original model's own Keras outputs"
    return run, "the model with each fused layer's stack computed by the NumPy reference (buffer read by the cuDNN API)"


# ------------------------------------------------------------------------------------------------ one stack
def tf1_cells(spec: "RNNSpec", prefix: str, ckpt_dir: str, x: np.ndarray, lengths: np.ndarray,
              h_0: np.ndarray, c_0: Optional[np.ndarray], legacy: bool = False) -> List[Optional[np.ndarray]]:
    """Restore TF1 cell variables by name (``tf.compat.v1.train.Saver``) and run them like ``dynamic_rnn`` /
    ``stack_bidirectional_dynamic_rnn`` over a right-padded batch: LSTM through ``BlockLSTM`` (the kernel of
    ``LSTMBlockFusedCell`` / ``CudnnCompatibleLSTMCell``: gates i, c, f, o, ``forget_bias=0``), a projected LSTM and
    the GRU and the plain RNNs through their cells' math (``LSTMCell(num_proj)``, ``CudnnCompatibleGRUCell``,
    ``BasicRNNCell``). ``legacy``: the older
    ``{prefix}/multi_rnn_cell/...`` names. x [B, T, I], lengths [B], h_0 [L*D, B, S], c_0 [L*D, B, H]. Returns
    [outputs [B, T, D*S], h_n, c_n or None]."""
    tf = import_tf()
    H, S, D, T = spec.num_units, spec.state_size, spec.num_dirs, x.shape[1]
    graph = tf.Graph()
    with graph.as_default():
        v1 = tf.compat.v1
        lens = tf.constant(np.asarray(lengths).astype(np.int64))
        valid = tf.transpose(tf.sequence_mask(lens, T, dtype=tf.float32))[:, :, None]  # [T, B, 1]
        restore, h_list, c_list = [], [], []
        layer_in = tf.transpose(tf.constant(x), [1, 0, 2])  # time-major [T, B, I]

        def var(name, shape):
            restore.append(v1.get_variable(name, shape, use_resource=False))
            return restore[-1]

        for layer in range(spec.num_layers):
            outs = []
            for direction in range(D):
                p = layer * D + direction
                scope = cell_scope(prefix, spec, layer, direction, legacy)
                width = spec.layer_input_size(layer)
                inp = tf.reverse_sequence(layer_in, lens, seq_axis=0, batch_axis=1) if direction else layer_in
                h0, c0 = tf.constant(h_0[p]), tf.constant(c_0[p]) if c_0 is not None else None
                if spec.mode == "lstm" and not spec.num_proj:
                    kernel, bias, zeros = var(f"{scope}/kernel", [width + H, 4 * H]), var(f"{scope}/bias", [4 * H]), \
                        tf.zeros([H])
                    _, cs, _, _, _, _, h = tf.raw_ops.BlockLSTM(
                        seq_len_max=tf.constant(T, tf.int64), x=inp, cs_prev=c0, h_prev=h0, w=kernel, wci=zeros,
                        wcf=zeros, wco=zeros, b=bias, forget_bias=0.0, cell_clip=-1.0, use_peephole=False)
                elif spec.mode == "lstm":  # LSTMCell(num_proj=P, forget_bias=0): i, j, f, o = split([x, m] W + b)
                    kernel, bias = var(f"{scope}/kernel", [width + S, 4 * H]), var(f"{scope}/bias", [4 * H])
                    proj = var(f"{scope}/projection/kernel", [H, S])
                    m, c, steps, cells = h0, c0, [], []
                    mask = tf.reverse_sequence(valid, lens, seq_axis=0, batch_axis=1) if direction else valid
                    for t in range(T):
                        i, j, f, o = tf.split(tf.matmul(tf.concat([inp[t], m], 1), kernel) + bias, 4, axis=1)
                        c_new = tf.sigmoid(f) * c + tf.sigmoid(i) * tf.tanh(j)
                        m_new = tf.matmul(tf.sigmoid(o) * tf.tanh(c_new), proj)
                        m, c = mask[t] * m_new + (1 - mask[t]) * m, mask[t] * c_new + (1 - mask[t]) * c
                        steps.append(m)
                        cells.append(c)
                    h, cs = tf.stack(steps), tf.stack(cells)
                elif spec.is_rnn:  # BasicRNNCell(activation=tanh / relu): h = act([x, h] W + b)
                    kernel, bias = var(f"{scope}/kernel", [width + H, H]), var(f"{scope}/bias", [H])
                    act = tf.nn.relu if spec.mode == "rnn_relu" else tf.tanh
                    steps, state = [], h0
                    mask = tf.reverse_sequence(valid, lens, seq_axis=0, batch_axis=1) if direction else valid
                    for t in range(T):
                        new = act(tf.matmul(tf.concat([inp[t], state], 1), kernel) + bias)
                        state = mask[t] * new + (1 - mask[t]) * state
                        steps.append(state)
                    h, cs = tf.stack(steps), None
                else:  # CudnnCompatibleGRUCell
                    names = ["gates/kernel", "gates/bias", "candidate/input_projection/kernel",
                             "candidate/input_projection/bias", "candidate/hidden_projection/kernel",
                             "candidate/hidden_projection/bias"]
                    shapes = [[width + H, 2 * H], [2 * H], [width, H], [H], [H, H], [H]]
                    gk, gb, ik, ib, hk, hb = [var(f"{scope}/{n}", s) for n, s in zip(names, shapes)]
                    steps, state = [], h0
                    mask = tf.reverse_sequence(valid, lens, seq_axis=0, batch_axis=1) if direction else valid
                    for t in range(T):
                        r, u = tf.split(tf.sigmoid(tf.matmul(tf.concat([inp[t], state], 1), gk) + gb), 2, axis=1)
                        cand = tf.tanh(tf.matmul(inp[t], ik) + ib + r * (tf.matmul(state, hk) + hb))
                        state = mask[t] * (u * state + (1 - u) * cand) + (1 - mask[t]) * state
                        steps.append(state)
                    h, cs = tf.stack(steps), None
                last = tf.stack([tf.clip_by_value(lens - 1, 0, T), tf.range(x.shape[0], dtype=tf.int64)], 1)
                h_list.append(tf.gather_nd(h, last))  # the state at step length-1 of this (reversed) sequence
                if cs is not None:
                    c_list.append(tf.gather_nd(cs, last))
                if direction:
                    h = tf.reverse_sequence(h, lens, seq_axis=0, batch_axis=1)
                outs.append(h * valid)
            layer_in = tf.concat(outs, axis=2)
        outputs = tf.transpose(layer_in, [1, 0, 2])
        saver = v1.train.Saver(var_list=restore)
        with v1.Session(graph=graph) as sess:
            saver.restore(sess, tf.train.latest_checkpoint(ckpt_dir))
            fetched = sess.run([outputs, tf.stack(h_list)] + ([tf.stack(c_list)] if c_list else []))
    return fetched + ([None] if not c_list else [])


def keras_layers(spec: "RNNSpec", tensors: Dict[str, np.ndarray], scope: Callable[[int, int], str], x: np.ndarray,
                 lengths: np.ndarray, h_0: np.ndarray,
                 c_0: Optional[np.ndarray]) -> List[Optional[np.ndarray]]:
    """Stock Keras ``LSTM`` / ``GRU(reset_after=True)`` / ``SimpleRNN`` layers holding
    ``tensors[f"{scope(l, d)}/kernel"]`` etc.
    (Keras' own names and layouts), run over a right-padded batch with a mask and initial states; the backward
    direction is ``go_backwards=True`` as ``Bidirectional`` builds it. Returns [outputs, h_n, c_n or None]."""
    # lazy: Keras, loaded on first use (import cudnn_port stays light)
    import keras

    mask = np.arange(x.shape[1])[None, :] < np.asarray(lengths)[:, None]
    layer_in, h_n, c_n = x, [], []
    for layer in range(spec.num_layers):
        outs = []
        for direction in range(spec.num_dirs):
            p = layer * spec.num_dirs + direction
            kwargs: Dict[str, Any] = dict(return_sequences=True, return_state=True, go_backwards=bool(direction),
                                          zero_output_for_mask=True)
            if spec.is_rnn:
                rnn = keras.layers.SimpleRNN(spec.num_units, activation=spec.activation, **kwargs)
            else:
                kwargs.update(activation=spec.activation, recurrent_activation=spec.recurrent_activation)
                rnn = keras.layers.LSTM(spec.num_units, **kwargs) if spec.mode == "lstm" else \
                    keras.layers.GRU(spec.num_units, reset_after=spec.reset_after, **kwargs)
            if spec.mode == "lstm":
                assert c_0 is not None  # an LSTM's judge is given its initial cell states
                states = [h_0[p], c_0[p]]
            else:
                states = [h_0[p]]
            result = rnn(layer_in, mask=mask, initial_state=states)  # builds, then runs with zero weights
            rnn.set_weights([tensors[f"{scope(layer, direction)}/{v}"] for v in ("kernel", "recurrent_kernel", "bias")])
            result = [np.asarray(t) for t in rnn(layer_in, mask=mask, initial_state=states)]
            outs.append(result[0][:, ::-1] if direction else result[0])  # go_backwards emits reversed time
            h_n.append(result[1])
            if spec.mode == "lstm":
                c_n.append(result[2])
        layer_in = np.concatenate(outs, axis=-1) * mask[..., None]
    return [layer_in, np.stack(h_n), np.stack(c_n) if c_n else None]
