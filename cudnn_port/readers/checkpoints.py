"""TensorFlow checkpoints (TF1 name-based, TF2 object-based; a prefix, its ``.index`` file, or its folder):
:class:`cudnn_port.checkpoint.Checkpoint`, refused if a fused layer recorded ROCm's layout beside a buffer
(:mod:`.platform`), with a buffer synthesised for canonical TF1 cells saved without one (:mod:`.tf1_canonical`).
A checkpoint claims what no other kind does, and what does not exist yet (the prefix a user named)."""
from typing import Optional

from ..checkpoint import Checkpoint
from ..source import Source, SourceType
from .platform import check_source
from .tf1_canonical import with_canonical_stacks


def open_checkpoint(path: str, mode: Optional[str] = None) -> Source:
    checkpoint = Checkpoint(path)
    check_source(checkpoint)
    return with_canonical_stacks(checkpoint)


SOURCE = SourceType("checkpoint", "TensorFlow checkpoint", "stack", lambda path: True, open_checkpoint,
                    spec_flags=True, order=90)
