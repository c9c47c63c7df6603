"""``checkpoint``: OUT/checkpoint/, a name-based TensorFlow checkpoint of every stack of the source at once (the
converted tensors in the chosen style, the buffer's optimizer slots converted with the same mapping, every other
variable copied). :func:`cudnn_port.roads.stack.write_stacks` writes it; verify restores it into stock components of its
style (:func:`cudnn_port.judging.stack_rows.checkpoint_judge`)."""
from . import Format

FORMAT = Format(name="checkpoint", help="OUT/checkpoint/, name-based, other variables copied unchanged",
                needs=("tensorflow",), default=True, order=0)
