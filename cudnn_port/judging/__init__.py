"""Judges: what decides whether an artifact is right, sharing no code path with the artifacts themselves.

- :mod:`.stock`: stock components that compute what an artifact should (TF1 cells, Keras layers and PyTorch
  modules restoring converted weights by name; a whole model with each fused layer rebuilt from stock Keras
  layers), beside the NumPy reference (:mod:`cudnn_port.reference`);
- :mod:`.parity`: seeded inputs, the one comparison rule, report rows (shared by ``verify`` and ``export``);
- :mod:`.stack_rows`, :mod:`.model_rows`: verify's rows for one stack and for whole graphs;
- :mod:`.int8`: the tolerance rule of int8 models; :mod:`.tasks`: a model's task-level cost.
"""
