"""The variables a fused layer (:mod:`cudnn_port.layers`) stores beside its buffer, and their codec: ``cudnn_spec``,
the spec as ``[mode 0-3, layers, units, input size, directions 1|2]`` (and, for an LSTM with projection, a sixth
entry, the projection size), and ``cudnn_platform``, the layout its fused op used for the buffer."""
from typing import List

import numpy as np

from .errors import CudnnPortError
from .layout import RNNSpec, own_activation

SPEC_VARIABLE = "cudnn_spec"  # written beside the buffer by cudnn_port.layers: [mode, layers, units, input, dirs]
MODE_IDS = {"lstm": 0, "gru": 1, "rnn_tanh": 2, "rnn_relu": 3}
# the eighth entry: RNNSpec.activation; the ninth: RNNSpec.recurrent_activation (ids fixed once written)
ACTIVATION_IDS = {"tanh": 0, "relu": 1, "sigmoid": 2, "hard_sigmoid": 3, "linear": 4, "softsign": 5, "softplus": 6,
                  "elu": 7, "silu": 8, "gelu": 9, "selu": 10, "relu6": 11, "leaky_relu": 12, "exponential": 13,
                  "mish": 14, "hard_silu": 15, "log_sigmoid": 16, "tanh_shrink": 17, "hard_tanh": 18, "celu": 19,
                  "hard_shrink": 20, "soft_shrink": 21, "sparse_plus": 22, "sparse_sigmoid": 23, "squareplus": 24,
                  "softmax": 25, "log_softmax": 26, "sparsemax": 27}
FUSED_CLASS_NAMES = {"lstm": "CudnnLSTM", "gru": "CudnnGRU", "rnn_tanh": "CudnnRNNTanh", "rnn_relu": "CudnnRNNRelu"}
# written beside the buffer by cudnn_port.layers when its fused op runs: the layout that op used for the buffer
# (docs/conventions.md, section 6). 0: the fused op never ran (the layer's own cuDNN layout), 1: CUDA / cuDNN,
# 2: ROCm / MIOpen, whose LSTM gate order and buffer layout are not cuDNN's.
PLATFORM_VARIABLE = "cudnn_platform"
MIOPEN = 2


def spec_from_vector(vector: np.ndarray, dtype: str = "float32", name: str = SPEC_VARIABLE) -> RNNSpec:
    """The RNNSpec stored in a ``cudnn_spec`` variable: ``[mode 0-3, layers, units, input size, directions 1|2]``
    and, for an LSTM with projection, a sixth entry, the projection size; a seventh, 1, marks a reset-before GRU, and
    an eighth names the activation (:data:`ACTIVATION_IDS`) where either differs from cuDNN's cell, and a ninth the
    gates' function where it is not sigmoid."""
    values = np.asarray(vector).reshape(-1)
    problem = f"{name} holds {values.tolist()[:8]}, which is not a spec ([mode 0-3, layers, units, input size, " \
              "directions 1|2, projection]); pass the spec flags"
    if values.dtype.kind not in "iu" or values.size not in (5, 6, 7, 8, 9):
        raise CudnnPortError(problem)
    mode, layers, units, input_size, dirs, proj, before, act, gates = (
        int(v) for v in list(values) + [0] * (8 - values.size) + [ACTIVATION_IDS["sigmoid"]] * (values.size < 9))
    activations = {i: a for a, i in ACTIVATION_IDS.items()}
    modes = {i: m for m, i in MODE_IDS.items()}
    if mode not in modes or dirs not in (1, 2) or act not in activations or gates not in activations:
        raise CudnnPortError(problem)
    try:
        return RNNSpec(modes[mode], layers, units, input_size, dirs == 2, dtype, num_proj=proj,
                       reset_after=before != 1, activation=activations[act] if values.size >= 8 else None,
                       recurrent_activation=activations[gates])
    except CudnnPortError:
        raise CudnnPortError(problem) from None


def spec_to_vector(spec: RNNSpec) -> List[int]:
    """What a fused layer stores in its ``cudnn_spec`` variable for ``spec`` (five entries without projection, as
    always; six with; eight for a reset-before GRU or another activation: projection, reset-before, activation; nine
    where the gates are not sigmoid)."""
    vector = [MODE_IDS[spec.mode], spec.num_layers, spec.num_units, spec.input_size, spec.num_dirs]
    activation = spec.activation or own_activation(spec.mode)  # RNNSpec has filled in its mode's own already
    if spec.recurrent_activation != "sigmoid":
        return vector + [spec.num_proj, int(not spec.reset_after), ACTIVATION_IDS[activation],
                         ACTIVATION_IDS[spec.recurrent_activation]]
    if not spec.reset_after or activation != own_activation(spec.mode):
        return vector + [spec.num_proj, int(not spec.reset_after), ACTIVATION_IDS[activation]]
    return vector + [spec.num_proj] if spec.num_proj else vector
