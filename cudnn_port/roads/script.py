"""``cudnn-port convert model.pt OUT`` for a TorchScript file (``torch.jit.trace`` / ``torch.jit.script``, saved
with ``torch.jit.save``): the whole model where its code reads as a straight line of ops
(:mod:`cudnn_port.readers.torchscript`), exported as a ``torch.export`` program is
(:func:`cudnn_port.roads.model.export_program_file`, judged by PyTorch's kernels); otherwise its recurrent stacks
convert as any PyTorch file's do (:func:`cudnn_port.roads.stack.convert_stacks`), after one line saying why the
whole model did not."""
import os
from typing import TYPE_CHECKING, Any, Callable, Dict, Optional, Sequence

from ..errors import CudnnPortError
from ..progress import say_to
from ..readers.torchscript import NotStraight, read_script
from .buffers import SPEC_FLAGS, given_flags
from .model import export_program_file
from .stack import convert_stacks

if TYPE_CHECKING:
    from ..manifest import Manifest


def export_script_file(path: "os.PathLike[str] | str", out: "os.PathLike[str] | str", style: Optional[str] = None,
                       force: bool = False, progress: Optional[Callable[[str], None]] = None, xla: bool = False,
                       quantize: Optional[str] = None, keep_failed: bool = False,
                       formats: Optional[Sequence[str]] = None, ids_dtype: Optional[str] = None,
                       flags: Optional[Dict[str, Any]] = None) -> "Manifest":
    """The TorchScript file at ``path`` converted whole, or stack by stack where its code is not a straight line
    (see the module docstring). ``flags``: the spec flags (``--mode`` ...), which settle what a stack leaves open
    (an ``nn.RNN``'s tanh or relu) and apply to the stacks alone."""
    path = os.fspath(path)
    flags = dict.fromkeys(SPEC_FLAGS) if flags is None else flags
    given = given_flags(flags)
    try:
        read_script(path)  # the code parsed as data: cheap, and says whether the whole model reads
    except NotStraight as e:
        if ids_dtype is not None:
            raise CudnnPortError(f"--ids-dtype applies to a whole model, and {e}") from None
        say_to(progress)(f"whole model not converted: {e}")
        return convert_stacks(path, out, style=style, formats=formats, variable=None, flags=flags, force=force,
                              drop_optimizer_slots=False, allow_nonfinite=False, prefer_buffer=False, xla=xla,
                              quantize=quantize, say=say_to(progress))
    if given:
        raise CudnnPortError(f"{given[0]} applies to a file's bare stacks, and this TorchScript file converts whole, "
                             "stating every spec: leave the spec flags out")
    return export_program_file(path, out, style=style, force=force, progress=progress, xla=xla, quantize=quantize,
                               keep_failed=keep_failed, formats=formats, ids_dtype=ids_dtype)
