"""Fused cuDNN RNN layers for Keras 3 (TensorFlow backend): :class:`CudnnLSTM`, :class:`CudnnGRU`, and cuDNN's plain
RNN cells :class:`CudnnRNNTanh` and :class:`CudnnRNNRelu` (h' = act(W x + b_W + R h + b_R)).

Each layer holds ONE trainable variable, ``opaque_kernel``: the whole stack (``num_layers`` layers, one or two
directions, optionally an LSTM projection ``num_proj``) in cuDNN's opaque buffer layout (:mod:`cudnn_port.layout`),
plus a small non-trainable ``cudnn_spec`` variable ``[mode (0 lstm, 1 gru, 2 rnn_tanh, 3 rnn_relu), num_layers,
units, input_size, directions(, num_proj)]`` so that a checkpoint of the layer says what its buffer is (``cudnn-port
convert`` then needs no flags), and ``cudnn_platform`` (int32 scalar): 0 until the fused op trains the buffer, then
1 on a CUDA build (cuDNN's layout) or 2 on a ROCm build (MIOpen's layout, which ``cudnn-port convert`` refuses).
Files saved before that variable existed load with it 0.

- On a GPU the stack is one ``tf.raw_ops.CudnnRNNV3`` call (dropout between layers done by cuDNN).
- On a CPU it is the same function of the same buffer in standard TensorFlow ops
  (training: :func:`cudnn_port.tf_train.stack_train`, the export path's arithmetic with a hand-written backward
  pass; inference: :func:`cudnn_port.tf_graph.stack_forward`, the export path itself); gradients flow on both.

Inputs ``[batch, time, features]``. Masks: a right-padded mask (True then False along time) becomes cuDNN's
``sequence_lengths``; any other mask is refused. States are batch-major: ``initial_state=[h, c]`` (LSTM) or
``[h]`` (GRU), h ``[batch, L*D, S]`` and c ``[batch, L*D, units]`` (S = num_proj or units), pseudo-layer
``p = layer * D + direction``; ``return_state`` returns them the same way. ``return_sequences=False`` returns the
last valid output: the top layer's final forward state, concatenated with its final backward state (the backward
output at step 0) when bidirectional.

Initial weights follow Keras' LSTM / GRU defaults per layer and direction: glorot-uniform input kernel
``[I_l, G*H]``, orthogonal recurrent kernel ``[S, G*H]``, zero biases, and 1 on the LSTM forget gate's input bias;
a projection ``[P, H]`` is glorot-uniform too.

>>> import numpy as np
>>> layer = CudnnLSTM(8, num_layers=2, bidirectional=True, return_sequences=True)
>>> tuple(layer(np.zeros((3, 5, 4), "float32")).shape)
(3, 5, 16)
>>> [w.name for w in layer.weights], layer.spec.param_count
(['opaque_kernel', 'cudnn_spec', 'cudnn_platform'], 2560)
"""
from typing import TYPE_CHECKING, Any, ClassVar, Dict, List, Optional, Sequence, Tuple, Union

import keras

from .deps import import_tf
from .initializer import CudnnInitializer
from .layer_inputs import mask_lengths, shared_lengths, swap_first_axes
from .layer_paths import current_judge, current_path
from .stored_spec import MIOPEN, PLATFORM_VARIABLE, SPEC_VARIABLE, spec_to_vector
from .layout import RNNSpec
from .source import BUFFER
from . import tf_graph  # looked up at call time: tests stand in for the fused op (tf_graph.cudnn_forward)
from .tf_train import stack_train

if TYPE_CHECKING:
    import tensorflow as tf


class CudnnRNN(keras.layers.Layer):
    """The fused layers' common base (see the module docstring); use :class:`CudnnLSTM`, :class:`CudnnGRU`,
    :class:`CudnnRNNTanh` or :class:`CudnnRNNRelu`."""

    mode: ClassVar[str] = ""  # each fused class's RNNSpec.mode (lstm, gru, rnn_tanh, rnn_relu); the base has none

    def __init__(self, units, num_layers=1, bidirectional=False, dropout=0.0, return_sequences=False,
                 return_state=False, seed=None, num_proj=0, reset_after=True, activation=None,
                 recurrent_activation="sigmoid", **kwargs):
        super().__init__(**kwargs)
        if not reset_after and self.mode != "gru":
            raise ValueError(f"Received reset_after=False for {type(self).__name__}; only a GRU has a reset gate")
        self.reset_after = bool(reset_after)
        # None: the cell's own (RNNSpec.activation); a keras.activations function by its name
        self.activation = getattr(activation, "__name__", activation)
        # the gates' function (RNNSpec.recurrent_activation), by name (keras.activations.hard_sigmoid's too)
        self.recurrent_activation = str(getattr(recurrent_activation, "__name__", recurrent_activation))
        if units < 1 or num_layers < 1:
            raise ValueError(f"Received units={units}, num_layers={num_layers}, expected both >= 1")
        if not 0.0 <= dropout < 1.0:
            raise ValueError(f"Received dropout={dropout}, expected 0 <= dropout < 1")
        if num_proj and (self.mode != "lstm" or not 0 < num_proj < units):
            raise ValueError(f"Received num_proj={num_proj}, expected 0 < num_proj < units={units} (LSTM only)")
        self.num_proj = int(num_proj or 0)
        self.units, self.num_layers, self.bidirectional = int(units), int(num_layers), bool(bidirectional)
        self.dropout, self.return_sequences, self.return_state = float(dropout), return_sequences, return_state
        self.seed = seed
        self.supports_masking = True
        self.spec = None
        self._dropout_seed = keras.random.SeedGenerator(seed) if dropout else None

    @property
    def num_dirs(self) -> int:
        return 2 if self.bidirectional else 1

    @property
    def num_states(self) -> int:
        """States per pseudo-layer: h and c for LSTM, h for GRU and the plain RNNs."""
        return 2 if self.mode == "lstm" else 1

    def build(self, input_shape: Tuple[Optional[int], ...]) -> None:
        input_size = input_shape[-1]
        if input_size is None:
            raise ValueError(f"Received input shape {input_shape}, expected a known last dimension (features)")
        self.spec = RNNSpec(self.mode, self.num_layers, self.units, int(input_size), self.bidirectional,
                            num_proj=self.num_proj, reset_after=self.reset_after, activation=self.activation,
                            recurrent_activation=self.recurrent_activation)
        self.opaque_kernel = self.add_weight(name=BUFFER, shape=(self.spec.param_count,),
                                             initializer=CudnnInitializer(self.spec, self.seed), trainable=True)
        vector = spec_to_vector(self.spec)
        self.cudnn_spec = self.add_weight(name=SPEC_VARIABLE, shape=(len(vector),), dtype="int32", trainable=False,
                                          initializer=keras.initializers.Constant(vector))
        self.cudnn_platform = self.add_weight(name=PLATFORM_VARIABLE, shape=(), dtype="int32", trainable=False,
                                              initializer="zeros")

    def load_own_variables(self, store: Dict[str, Any]) -> None:
        """As Keras' own, but a file saved before ``cudnn_platform`` existed (two variables) loads, with 0."""
        if len(store.keys()) == 2:
            self.opaque_kernel.assign(store["0"])
            self.cudnn_spec.assign(store["1"])
            return
        super().load_own_variables(store)

    def call(self, inputs: "tf.Tensor", initial_state: "Optional[Sequence[tf.Tensor]]" = None,
             mask: "Optional[tf.Tensor]" = None,
             training: Optional[bool] = None) -> Union["tf.Tensor", List["tf.Tensor"]]:
        tf = import_tf()
        spec, D = self.spec, self.num_dirs
        x = tf.convert_to_tensor(inputs)
        batch, steps = tf.shape(x)[0], tf.shape(x)[1]
        on_gpu = spec.cudnn_computes and tf.config.list_logical_devices("GPU")  # a reset-before GRU: CPU ops only
        path = current_path() or ("cudnn" if on_gpu else "cpu")
        judge = current_judge(self)
        states = self._states(initial_state, batch)
        dropout = self.dropout if training else 0.0
        if path == "lean" and judge is None:
            outputs, h, c = self._lean(x, shared_lengths(mask, steps), states)
        else:
            lengths = mask_lengths(mask, x, steps)
            if judge is not None:
                outputs, h, c = judge(x, lengths, states[0], states[1])
            elif path == "cudnn":
                outputs, h, c = self._cudnn(x, lengths, states, dropout, bool(training))
            else:  # inference without a mask: every sequence full length, which the export path needs no lengths for
                full = mask is None and not training
                outputs, h, c = self._cpu(x, None if full else lengths, states, dropout, bool(training),
                                          block_lstm=full and path == current_path())  # an export's trace
        if self.return_sequences:
            result = outputs
        else:
            top = h[(spec.num_layers - 1) * D:]  # [D, B, H]: forward final state, backward final state
            result = tf.concat(tf.unstack(top, num=D), axis=-1)
        if not self.return_state:
            return result
        return [result] + [swap_first_axes(state) for state in (h, c)[:self.num_states]]

    def _states(self, initial_state, batch):
        """[h0 [L*D, B, S], c0 [L*D, B, H]] (c0 None for GRU); zeros when not given."""
        tf = import_tf()
        count = self.num_states
        if initial_state is None:
            sizes = [self.spec.state_size, self.units][:count]
            return [tf.zeros([self.spec.num_pseudo_layers, batch, n]) for n in sizes] + [None] * (2 - count)
        states = list(initial_state) if isinstance(initial_state, (list, tuple)) else [initial_state]
        if len(states) != count:
            raise ValueError(f"Received {len(states)} initial states, expected {count} for {type(self).__name__} "
                             f"([h{', c' if count == 2 else ''}], h [batch, {self.spec.num_pseudo_layers}, "
                             f"{self.spec.state_size}])")
        states = [swap_first_axes(tf.cast(s, "float32")) for s in states]
        return states + [None] * (2 - count)

    def _cpu(self, x, lengths, states, dropout, training, block_lstm=False):
        """Training (``fit``, a step called with ``training=True``): :func:`~cudnn_port.tf_train.stack_train`, with
        its hand-written backward pass. Otherwise (inference, and what an export traces): the export path's
        :func:`~cudnn_port.tf_graph.stack_forward`, which keeps no per-step activations; gradients still flow
        through it, by autodiff, to the same values. ``block_lstm``: an export's trace of an unmasked layer, whose
        small batches may run as TensorFlow's fused LSTM op (``stack_forward``'s ``block_lstm``; no XLA kernel, so
        never for Keras' own calls, which may compile)."""
        between = None
        if dropout:
            def between(y, layer):
                return keras.random.dropout(y, dropout, seed=self._dropout_seed)

        canon = tf_graph.unpack_tensor(self.spec, self.opaque_kernel.value)
        if training:
            return stack_train(canon, x, lengths, states[0], states[1], between=between)
        return tf_graph.stack_forward(canon, x, lengths, states[0], states[1], between=between,
                                      block_lstm=block_lstm)

    def _cudnn(self, x, lengths, states, dropout, training):
        tf = import_tf()
        if training:  # the fused op trains the buffer in its library's layout: record which (not on export traces)
            self.cudnn_platform.assign(MIOPEN if tf.sysconfig.get_build_info().get("is_rocm_build") else 1)
        return tf_graph.cudnn_forward(self.spec, self.opaque_kernel.value, x, lengths, states[0], states[1],
                             dropout=dropout, seed=self.seed or 0, training=training)

    def _lean(self, x, lengths, states):
        """The "lean" trace (see :func:`~cudnn_port.layer_paths.forced_path`): the stack as one cuDNN op, for a
        graph that is converted, not run: without ``lengths`` (no mask) a time-major CudnnRNNV2, whose ONNX nodes
        then take no ``sequence_lens``."""
        tf = import_tf()
        if lengths is not None or self.num_proj:  # CudnnRNNV2 has no projection
            lengths = mask_lengths(None, x, tf.shape(x)[1]) if lengths is None else lengths
            return tf_graph.cudnn_forward(self.spec, self.opaque_kernel.value, x, lengths, states[0], states[1])
        c0 = states[1] if self.mode == "lstm" else tf.zeros([])
        outputs, h, c, _, _ = tf.raw_ops.CudnnRNNV2(
            input=tf.transpose(tf.cast(x, "float32"), [1, 0, 2]), input_h=states[0], input_c=c0,
            params=self.opaque_kernel.value, rnn_mode=self.mode, input_mode="linear_input",
            direction="bidirectional" if self.bidirectional else "unidirectional", is_training=False)
        return tf.transpose(outputs, [1, 0, 2]), h, c if self.mode == "lstm" else None

    def compute_mask(self, inputs: "tf.Tensor", mask: "Optional[tf.Tensor]" = None) -> Any:
        mask = mask if self.return_sequences else None  # a last-step output has no time axis to mask
        return [mask] + [None] * self.num_states if self.return_state else mask

    def compute_output_shape(self,
                             input_shape: Tuple[Optional[int], ...]) -> Union[Tuple[Any, ...], List[Tuple[Any, ...]]]:
        batch, steps = input_shape[0], input_shape[1]
        width = (self.num_proj or self.units) * self.num_dirs
        main = (batch, steps, width) if self.return_sequences else (batch, width)
        if not self.return_state:
            return main
        states = [(batch, self.num_layers * self.num_dirs, n) for n in (self.num_proj or self.units, self.units)]
        return [main] + states[:self.num_states]

    def get_config(self) -> Dict[str, Any]:
        config = super().get_config()
        config.update(units=self.units, num_layers=self.num_layers, bidirectional=self.bidirectional,
                      dropout=self.dropout, return_sequences=self.return_sequences,
                      return_state=self.return_state, seed=self.seed)
        if self.num_proj:
            config["num_proj"] = self.num_proj
        if not self.reset_after:
            config["reset_after"] = False
        if self.activation is not None:
            config["activation"] = self.activation
        if self.recurrent_activation != "sigmoid":
            config["recurrent_activation"] = self.recurrent_activation
        return config


@keras.saving.register_keras_serializable(package="cudnn_port")
class CudnnLSTM(CudnnRNN):
    """A fused multi-layer, optionally bidirectional LSTM holding one cuDNN buffer (see the module docstring);
    ``num_proj=P`` adds cuDNN's projection (LSTMP): h = Proj @ (o * tanh(c)), P wide."""

    mode = "lstm"


@keras.saving.register_keras_serializable(package="cudnn_port")
class CudnnGRU(CudnnRNN):
    """A fused multi-layer, optionally bidirectional GRU (cuDNN's reset-after form) holding one cuDNN buffer.
    ``reset_after=False``: Keras' reset-before GRU in the same buffer, which cuDNN does not compute: it runs in
    standard TensorFlow ops on every device (how a stock ``GRU(reset_after=False)`` is converted); so does an
    ``activation`` other than tanh (``relu``, ``sigmoid``, ...: ``layout.ACTIVATIONS``) or a ``recurrent_activation``
    other than sigmoid (``hard_sigmoid``), in this layer and in :class:`CudnnLSTM` (and another ``activation`` in
    :class:`CudnnRNNTanh`)."""

    mode = "gru"


@keras.saving.register_keras_serializable(package="cudnn_port")
class CudnnRNNTanh(CudnnRNN):
    """A fused multi-layer, optionally bidirectional plain RNN, h' = tanh(W x + b_W + R h + b_R) (cuDNN's
    ``CUDNN_RNN_TANH``; Keras' ``SimpleRNN``), holding one cuDNN buffer."""

    mode = "rnn_tanh"


@keras.saving.register_keras_serializable(package="cudnn_port")
class CudnnRNNRelu(CudnnRNN):
    """A fused multi-layer, optionally bidirectional plain RNN, h' = max(0, W x + b_W + R h + b_R) (cuDNN's
    ``CUDNN_RNN_RELU``; Keras' ``SimpleRNN(activation="relu")``), holding one cuDNN buffer."""

    mode = "rnn_relu"


FUSED_CLASSES = {"lstm": CudnnLSTM, "gru": CudnnGRU, "rnn_tanh": CudnnRNNTanh, "rnn_relu": CudnnRNNRelu}


def fused_layers(model: keras.Model) -> List[CudnnRNN]:
    """Every :class:`CudnnRNN` inside ``model``, nested models included, in layer order, each once."""
    found, seen = [], set()

    def visit(layer):
        if id(layer) in seen:
            return
        seen.add(id(layer))
        if isinstance(layer, CudnnRNN):
            found.append(layer)
        for child in getattr(layer, "layers", None) or []:
            visit(child)

    visit(model)
    return found
