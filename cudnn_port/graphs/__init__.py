"""SavedModels whose graphs hold cuDNN RNN nodes (``CudnnRNN``, ``CudnnRNNV2``, ``CudnnRNNV3``), made to run on CPU.

- :mod:`.nodes`: find each cuDNN node and the stack it computes;
- :mod:`.rewrite`: replace each node by a function of standard ops computing the same outputs;
- :mod:`.allowlist` (the ops, :mod:`.allowed_ops`; where the commands apply it, :mod:`.trust`): a graph runs only
  pure computation unless the user trusts it, checked on the protobuf before TensorFlow loads any of it.
"""
from .nodes import CudnnNode, find_nodes, load_proto

__all__ = ["CudnnNode", "find_nodes", "load_proto"]
