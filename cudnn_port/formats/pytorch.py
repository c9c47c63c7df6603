"""``pytorch``: OUT/pytorch/<stack>.safetensors, a state_dict for ``torch.nn.LSTM`` / ``GRU`` (``proj_size`` for a
projection) written with safetensors (:mod:`cudnn_port.targets.pytorch`); run by stock PyTorch modules."""
from . import Artifact, Format, Runtime


def _write(canon, paths, *, name, options):
    from ..targets import pytorch as torch_target

    torch_target.save_file(canon, paths["pytorch"])


def _open(path, spec):
    from safetensors.numpy import load_file

    from ..judging.stock import torch_modules

    state = load_file(path)
    return lambda feeds: torch_modules(spec, state, feeds["inputs"], feeds["sequence_lengths"], feeds["initial_h"],
                                       feeds.get("initial_c"))


FORMAT = Format(name="pytorch", help="OUT/pytorch/<stack>.safetensors for torch.nn.LSTM/GRU",
                artifacts=(Artifact("pytorch", "pytorch/{label}.safetensors", states="required",
                                    label="pytorch (.safetensors)"),),
                write=_write, runtimes=(Runtime("torch", _open, needs=("torch",), bench=False),),
                needs=("safetensors",), order=20)
