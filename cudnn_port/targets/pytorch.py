"""PyTorch ``nn.LSTM`` / ``nn.GRU`` / ``nn.RNN`` state_dict (gate order = cuDNN's; biases kept separate)::

    weight_ih_l{k}[_reverse] [G*H, I_l] = vstack_g(W_g)    weight_hh_l{k}[_reverse] [G*H, S] = vstack_g(R_g)
    bias_ih_l{k}[_reverse]   [G*H]      = b_W              bias_hh_l{k}[_reverse]   [G*H]    = b_R
    weight_hr_l{k}[_reverse] [P, H]     = Proj             (LSTM with projection: nn.LSTM(proj_size=P))

In a checkpoint the keys sit under the buffer's scope (``{prefix}/weight_ih_l0``); in the safetensors file
written by :func:`save_file` they are bare, as ``load_state_dict`` wants them.
"""
from typing import TYPE_CHECKING, Dict, Sequence

import numpy as np

from ..canonical import CanonicalRNN, LayerParams
from ..errors import UnsupportedError
from .common import join, write_all

if TYPE_CHECKING:
    from ..layout import RNNSpec

KEYS = (("W", "weight_ih"), ("R", "weight_hh"), ("b_W", "bias_ih"), ("b_R", "bias_hh"))


def _suffix(layer, direction):
    return f"_l{layer}" + ("_reverse" if direction else "")


def write_layer(spec: "RNNSpec", prefix: str, layer: int, direction: int, p: LayerParams,
                slot: bool = False) -> Dict[str, np.ndarray]:
    if not spec.cudnn_computes:
        raise UnsupportedError(f"a {spec.describe()} has no PyTorch module (nn.LSTM / nn.GRU compute cuDNN's cells: "
                               "reset-after GRU, tanh); use --style keras")
    out = {join(prefix, key + _suffix(layer, direction)): getattr(p, kind).reshape(-1, *getattr(p, kind).shape[2:])
           for kind, key in KEYS}
    if spec.num_proj:
        out[join(prefix, "weight_hr" + _suffix(layer, direction))] = p.P
    return out


def write(canon: CanonicalRNN, prefix: str, slot: bool = False) -> Dict[str, np.ndarray]:
    return write_all(write_layer, canon, prefix, slot)


def read(tensors: Dict[str, np.ndarray], prefix: str, spec: "RNNSpec") -> CanonicalRNN:
    G, H, layers = spec.num_gates, spec.num_units, []
    for p in range(spec.num_pseudo_layers):
        layer, direction = divmod(p, spec.num_dirs)
        arrays = {kind: np.asarray(tensors[join(prefix, key + _suffix(layer, direction))]) for kind, key in KEYS}
        proj = np.asarray(tensors[join(prefix, "weight_hr" + _suffix(layer, direction))]) if spec.num_proj else None
        layers.append(LayerParams(**{k: v.reshape(G, H, *v.shape[1:]) for k, v in arrays.items()}, P=proj))
    return CanonicalRNN(spec, layers)


def detect(shapes: Dict[str, Sequence[int]], prefix: str) -> None:
    return None


def save_file(canon: CanonicalRNN, path: str) -> None:
    """Write the state_dict as safetensors (contiguous arrays: safetensors writes raw bytes of views)."""
    # lazy: safetensors, loaded on first use (import cudnn_port stays light)
    from safetensors.numpy import save_file as _save

    _save({k: np.ascontiguousarray(v) for k, v in write(canon, "").items()}, str(path),
          metadata={"format": "pt", "mode": canon.spec.mode, "spec": repr(canon.spec.to_dict())})
