"""A ``torch.export`` program (``.pt2``) as a whole Keras model: the graph JSON read as data (its pickles are never
read, ``torch.export.load`` never runs), each node translated in order into a Keras Functional model that
:func:`cudnn_port.roads.model.export` writes as every whole-model artifact.

- each user input a ``keras.Input`` named as the program names it (a name a SavedModel signature does not keep, as
  ``_x``, as :func:`~cudnn_port.keras_models.model_inputs.signature_names` gives it: ``x``), of its dtype, with its
  batch and time dimensions free: batch is what the program marked dynamic (``torch.export.Dim``), time is the length
  the recurrent nodes were exported at (torch.export cannot keep an RNN's length symbolic, so every ``.pt2`` of one is
  fixed in time: docs/sources.md);
- each ``aten.lstm`` / ``gru`` / ``rnn_tanh`` / ``rnn_relu`` node one fused layer of :mod:`cudnn_port.layers` holding
  the module's stack as :class:`~cudnn_port.readers.pytorch.PyTorchSource` reads it (states in PyTorch's
  ``[L*D, batch, S]`` layout outside the layer, batch-major inside; ``batch_first=False``: transposed around it);
- ``embedding`` Keras' ``Embedding``, ``linear`` of parameters Keras' ``Dense``; every other supported op one
  :class:`~cudnn_port.aten_layers.AtenOp`;
- a size the program recorded as numbers (``view(x, [s0, 7, 4])``) keeps a dimension free where it comes from a free
  dimension of the input: sizes are aligned with the input's recorded sizes group by group, and a group holding a
  free dimension is read from the tensors when the model runs.

Any other op is refused in one line naming it and the module it came from (``nn_module_stack``).

Reading the program is :mod:`.torch_program_graph`, which dimensions stay free :mod:`.torch_program_dims`, each
node's layers :mod:`.torch_program_nodes`.
"""
import json
import os
from typing import Any, Dict, Optional

import numpy as np

from ..errors import UnsupportedError, short
from ..keras_models.model_inputs import signature_names
from ..source import SourceType
from .keras_model import KerasModelSource
from .pytorch import PyTorchSource
from .torch_program_dims import axis_roles  # noqa: F401 (the model road imports it from here)
from .torch_program_dims import free_dims
from .torch_program_graph import PASSED, SIZE_OPS, SUPPORTED  # noqa: F401 (the ops translated: the judge imports them)
from .torch_program_graph import is_program, read_program, refuse_untranslated
from .torch_program_nodes import Translator, Zeros

PROGRAM_FORMAT = "PyTorch program (torch.export .pt2)"
SCRIPT_FORMAT = "PyTorch program (TorchScript)"  # a TorchScript file's code read as such a program (.torchscript)
PROGRAM_FORMATS = (PROGRAM_FORMAT, SCRIPT_FORMAT)


def translate(path: str, source: Optional[Any] = None) -> "Any":
    """The ``.pt2`` program at ``path`` as a built Keras Functional model with its weights (see the module
    docstring); ``source``: the file's :class:`~cudnn_port.readers.pytorch.PyTorchSource`, read here if None."""
    # lazy: Keras, loaded on first use (import cudnn_port stays light)
    import keras

    program = read_program(path)
    refuse_untranslated(program)  # before anything is built
    source = source if source is not None else PyTorchSource(path)
    t = Translator(program, source)
    free = free_dims(program)
    inputs = []
    for name, given in zip(program.inputs, signature_names(program.inputs)):
        sizes = program.sizes[name]
        shape = [None if f else s for s, f in zip(sizes, free[name])]
        tensor = keras.Input(shape=tuple(shape[1:]), batch_size=shape[0], dtype=program.dtypes[name], name=given)
        t.values[name] = tensor
        inputs.append(tensor)
    for node in program.nodes:
        t.node(node)
    outputs = []
    for arg in program.outputs:
        value = t.value(arg, {"name": "output"})
        if isinstance(value, Zeros):
            value = t.zeros(value)
        if not isinstance(value, keras.KerasTensor):
            raise UnsupportedError(f"{path}: an output of the program ({short(json.dumps(arg), 40)}) does not depend "
                                   "on its inputs; leave constants out of the outputs")
        outputs.append(value)
    model = keras.Model(inputs, outputs, name="torch_program")
    for variable, value in t.pending:
        variable = variable() if callable(variable) else variable
        variable.assign(np.asarray(value, dtype=variable.dtype))
    return model


def program_input_names(path: str) -> Dict[str, str]:
    """{the name every artifact takes (:func:`~cudnn_port.keras_models.model_inputs.signature_names`): the program's
    own name (its forward's argument, as PyTorch's kernels take it)} for each user input of the program at ``path``."""
    inputs = read_program(path).inputs
    return dict(zip(signature_names(inputs), inputs))


def renamed_inputs(names: Dict[str, str]) -> Optional[str]:
    """The one warning line saying which inputs the artifacts take by another name than the program's, or None."""
    renamed = [f"{own!r} as {given!r}" for given, own in names.items() if given != own]
    many = len(renamed) > 1
    return None if not renamed else (
        f"the program's input{'s' if many else ''} {', '.join(renamed)}: every artifact takes "
        f"{'them' if many else 'it'} so (a SavedModel signature keeps no name that starts with '_' or holds "
        "characters other than letters, digits and _ . / > -); the manifest's model_input_specs record the "
        "program's own name (program_name), by which verify feeds PyTorch's kernels")


def _open_program(path: str, mode: Optional[str] = None) -> Any:
    """The program's whole model (:func:`translate`), as a Keras model source."""
    source = KerasModelSource(translate(path), os.path.abspath(path))
    source.format = PROGRAM_FORMAT if is_program(path) else SCRIPT_FORMAT
    return source


# before the stack reader (order 40), which reads a .pt2's recurrent modules alone
SOURCE = SourceType("torch_program", PROGRAM_FORMAT, "model", lambda path: os.path.isfile(path) and is_program(path),
                    _open_program, order=35, judge="cudnn_port.judging.torch_weights:judge_stack",
                    original="cudnn_port.judging.torch_weights:torch_row",
                    export="cudnn_port.roads.model:export_program_file", translated=True)
