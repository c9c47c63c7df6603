"""SavedModels whose graphs hold cuDNN RNN nodes (``CudnnRNN``, ``CudnnRNNV2``, ``CudnnRNNV3``), made to run on CPU.

- :mod:`.nodes`: find each cuDNN node and the stack it computes;
- :mod:`.rewrite`: replace each node by a function of standard ops computing the same outputs;
- :mod:`.convert`: the ``convert`` pipeline for a SavedModel source (OUT/saved_model, OUT/model.onnx);
- :mod:`.allowlist` (the ops, :mod:`.allowed_ops`; where the commands apply it, :mod:`.trust`): a graph runs only
  pure computation unless the user trusts it, checked on the protobuf before TensorFlow loads any of it.
"""
from .convert import convert_saved_model
from .nodes import CudnnNode, find_nodes, is_saved_model, load_proto

__all__ = ["CudnnNode", "convert_saved_model", "find_nodes", "is_saved_model", "load_proto"]
