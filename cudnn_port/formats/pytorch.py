"""``pytorch``: OUT/pytorch/<stack>.safetensors, a state_dict for ``torch.nn.LSTM`` / ``GRU`` (``proj_size`` for a
projection) written with safetensors (:mod:`cudnn_port.targets.pytorch`); run by stock PyTorch modules."""
from typing import TYPE_CHECKING, Any, Dict, List, Optional

import numpy as np

from . import Artifact, Format, Runtime
from ..targets import pytorch as torch_target
from .jobs import Outputs

if TYPE_CHECKING:
    from ..layout import RNNSpec


def _write(job, paths):
    torch_target.save_file(job.canon, paths["pytorch"])


def _open(path, job):
    # lazy: safetensors, loaded on first use (import cudnn_port stays light)
    from safetensors.numpy import load_file

    state = load_file(path)
    return lambda feeds: Outputs.of_stack(torch_modules(job.spec, state, feeds["inputs"], feeds["sequence_lengths"],
                                                        feeds["initial_h"], feeds.get("initial_c")))


def torch_modules(spec: "RNNSpec", state_dict: Dict[str, np.ndarray], x: np.ndarray, lengths: np.ndarray,
                  h_0: np.ndarray, c_0: Optional[np.ndarray]) -> List[Optional[np.ndarray]]:
    """PyTorch's ``nn.LSTM`` (``proj_size`` for a projection) / ``nn.GRU`` / ``nn.RNN`` (``nonlinearity``) loading
    ``state_dict`` strictly, run on a packed ragged batch. Returns [outputs, h_n, c_n or None]; raises ImportError
    without PyTorch."""
    # lazy: torch, loaded on first use (import cudnn_port stays light)
    import torch

    cls = torch.nn.LSTM if spec.mode == "lstm" else torch.nn.GRU if spec.mode == "gru" else torch.nn.RNN
    extra: Dict[str, Any] = {"proj_size": spec.num_proj} if spec.num_proj else {}
    if spec.is_rnn:  # nn.RNN: cuDNN's RNN_TANH / RNN_RELU
        extra["nonlinearity"] = spec.activation
    module = cls(spec.input_size, spec.num_units, spec.num_layers, batch_first=True,
                 bidirectional=spec.bidirectional, **extra)
    module.load_state_dict({k: torch.from_numpy(np.ascontiguousarray(v, np.float32)) for k, v in state_dict.items()})
    packed = torch.nn.utils.rnn.pack_padded_sequence(
        torch.from_numpy(np.asarray(x, np.float32)), torch.from_numpy(np.asarray(lengths).astype(np.int64)),
        batch_first=True, enforce_sorted=False)
    state = (torch.from_numpy(h_0), torch.from_numpy(c_0)) if spec.mode == "lstm" else torch.from_numpy(h_0)
    with torch.no_grad():
        out, final = module(packed, state)
    out, _ = torch.nn.utils.rnn.pad_packed_sequence(out, batch_first=True, total_length=x.shape[1])
    h_n, c_n = final if spec.mode == "lstm" else (final, None)
    return [out.numpy(), h_n.numpy(), None if c_n is None else c_n.numpy()]


FORMAT = Format(name="pytorch", help="OUT/pytorch/<stack>.safetensors for torch.nn.LSTM/GRU/RNN",
                artifacts=(Artifact("pytorch", "pytorch/{label}.safetensors", states="required",
                                    label="pytorch (.safetensors)"),),
                write=_write, runtimes=(Runtime("torch", _open, needs=("torch",), bench=False),),
                needs=("safetensors",), order=20,
                cannot_hold=lambda spec: None if spec.cudnn_computes else "PyTorch's nn.LSTM / nn.GRU compute cuDNN's "
                                                                        "cells only (reset-after, tanh)")
