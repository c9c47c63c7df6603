"""The roads: each driver takes one kind of source from its reader to a published OUT.

- :mod:`.stack`: cuDNN buffers stack by stack (a TF1 checkpoint, a Keras 2 ``.h5``, a PyTorch file; each fused layer
  of a model), its stacks found and checked by :mod:`.buffers`;
- :mod:`.model`: a whole Keras model (``.keras``, Keras 3 ``.h5``, or ``cudnn_port.export(model, OUT)``);
- :mod:`.graph`: a SavedModel holding cuDNN nodes, rewritten;
- :mod:`.int8`: the int8 ONNX models derived from the float32 ones of the stack and model roads (``--quantize int8``).

Each road builds its job (:mod:`cudnn_port.formats.jobs`) and hands it to every format that serves it; the judge
(:mod:`cudnn_port.judging`) runs what they wrote. Nothing below this package imports it (``lint-imports``, the
layers in pyproject.toml).
"""
