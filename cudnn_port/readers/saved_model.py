"""SavedModels whose graph holds cuDNN nodes: a graph, not named arrays, so no reader here opens one;
:mod:`cudnn_port.graphs` finds and replaces their nodes and :mod:`cudnn_port.roads.graph` writes OUT."""
from ..paths import is_saved_model
from ..source import SourceType

SOURCE = SourceType("saved_model", "SavedModel", "graph", is_saved_model, None, order=10)
