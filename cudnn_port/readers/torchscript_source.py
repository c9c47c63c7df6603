"""The TorchScript kind of source (``torch.jit.save`` files): the whole model where the code reads as a straight
line of ops (:mod:`.torchscript`, translated as :mod:`.torch_program` translates a ``.pt2``), else the file's
stacks as the stack reader reads any PyTorch file; :func:`cudnn_port.roads.script.export_script_file` converts it."""
import os
import zipfile
from typing import Any, Optional

from ..source import SourceType
from .pytorch import PyTorchSource
from .torch_program import SCRIPT_FORMAT, _open_program
from .torchscript import is_script
from .torchscript_ops import NotStraight


def _open_script(path: str, mode: Optional[str] = None) -> Any:
    """The whole model where the code reads as a straight line of ops; else the file's stacks."""
    try:
        return _open_program(path, mode)
    except NotStraight:
        return PyTorchSource(path, mode)


# before the stack reader (order 40), which reads a TorchScript file's recurrent modules alone
SOURCE = SourceType("torchscript", SCRIPT_FORMAT, "model",
                    lambda path: os.path.isfile(path) and zipfile.is_zipfile(path) and is_script(path), _open_script,
                    order=36, spec_flags=True, judge="cudnn_port.judging.torch_weights:judge_stack",
                    original="cudnn_port.judging.torch_weights:torch_row",
                    export="cudnn_port.roads.script:export_script_file", translated=True)
