"""Judges: what decides whether an artifact is right, sharing no code path with the artifacts themselves.

- :mod:`.stock`: stock components that compute what an artifact should (TF1 cells, Keras layers and PyTorch
  modules restoring converted weights by name; a whole model with each fused layer's stack computed by the NumPy
  reference (:mod:`cudnn_port.reference`) on its buffer read through :mod:`.cudnn_api`);
- :mod:`.cudnn_nodes`: a SavedModel's original signature with each cuDNN node computed by the NumPy reference;
- :mod:`.keras_weights`, :mod:`.tf1_weights`: stacks read from a source file by its format's own documented rule;
- :mod:`.parity`: seeded inputs, the one comparison rule, report rows (shared by ``verify`` and ``export``);
- :mod:`.stack_rows`, :mod:`.model_rows`: verify's rows for one stack and for whole graphs; :mod:`.stack_case`: one
  stack's judge, case and tolerance, its rows run on them; :mod:`.signature_feeds`: the inputs fed to a loaded
  signature (verify's and bench's);
- :mod:`.int8`: the tolerance rule of int8 models, :mod:`.int8_model` a whole model's int8 ONNX by it; :mod:`.tasks`:
  a model's task-level cost.
"""
