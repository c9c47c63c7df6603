"""The fused layers' initialiser: Keras' LSTM / GRU defaults written straight into cuDNN's buffer layout, block by
block of :meth:`cudnn_port.layout.RNNSpec.blocks`."""
from typing import Any, Dict

import keras
import numpy as np

from .deps import import_tf
from .layout import RNNSpec


class CudnnInitializer(keras.initializers.Initializer):
    """Keras' LSTM / GRU default initialisation, written straight into cuDNN's buffer layout."""

    def __init__(self, spec: "RNNSpec", seed: "int | None" = None) -> None:
        self.spec, self.seed = spec, seed

    def __call__(self, shape: Any, dtype: Any = None) -> Any:
        tf = import_tf()
        spec = self.spec
        G, H, S = spec.num_gates, spec.num_units, spec.state_size
        seed = keras.random.SeedGenerator(self.seed) if self.seed is not None else None
        pieces = []
        for block in spec.blocks():  # in buffer order
            width = block.shape[-1]
            if block.kind == "W":  # Keras' kernel [I_l, G*H]: gate g's block kernel[:, g*H:(g+1)*H] is W_g.T
                kernel = keras.initializers.GlorotUniform(seed=seed)((width, G * H))
                piece = tf.transpose(tf.reshape(kernel, [width, G, H]), [1, 2, 0])
            elif block.kind == "R":  # Keras' recurrent kernel [S, G*H], orthogonal
                recurrent = keras.initializers.Orthogonal(seed=seed)((S, G * H))
                piece = tf.transpose(tf.reshape(recurrent, [S, G, H]), [1, 2, 0])
            elif block.kind == "P":
                piece = tf.transpose(keras.initializers.GlorotUniform(seed=seed)((H, S)))
            else:
                bias = np.zeros((G, H), "float32")
                if spec.mode == "lstm" and block.kind == "b_W":
                    bias[1] = 1.0  # unit forget bias, on b_W only: b_W + b_R is what Keras' single bias holds
                piece = tf.constant(bias)
            pieces.append(tf.reshape(tf.cast(piece, "float32"), [-1]))
        return tf.cast(tf.concat(pieces, axis=0), dtype or "float32")

    def get_config(self) -> Dict[str, Any]:
        return {"seed": self.seed}
