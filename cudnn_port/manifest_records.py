"""The typed records nested in manifest.json (:mod:`cudnn_port.manifest` holds the top-level ones; their base is
:mod:`cudnn_port.record_base`): a whole model's ``parity``, its input and output specs, a graph's cuDNN nodes, each
int8 artifact, a stack's spec and slots ..., read by attribute.

    manifest.parity.passed                     # a ParityRecord, not a dict
    manifest.model_input_specs[0].shape        # a TensorSpecRecord: [None, 7, 3]
    manifest.stacks[0].spec.num_units          # a SpecRecord (RNNSpec(**spec.to_dict()) is the stack's spec)
"""
import dataclasses
from typing import Any, Dict, List, Optional, Tuple

from .record_base import Record, extra_field, road_field


@dataclasses.dataclass(kw_only=True, eq=False)
class SpecRecord(Record):
    """A cuDNN stack's spec as :meth:`cudnn_port.layout.RNNSpec.to_dict` writes it (``RNNSpec(**record.to_dict())``
    gives it back): the cell's own activations and GRU reset_after absent unless they differ."""
    mode: str  # the cell: "lstm", "gru", "rnn_tanh" or "rnn_relu"
    num_layers: int  # L
    num_units: int  # H
    input_size: int  # I, layer 0's input width
    bidirectional: bool = False  # D = 2 when true
    dtype: str = "float32"  # the buffer's element type
    num_proj: int = 0  # P, an LSTM's projection size (0: none)
    reset_after: Optional[bool] = road_field()
    activation: Optional[str] = road_field()
    recurrent_activation: Optional[str] = road_field()
    extra: Dict[str, Any] = extra_field()


@dataclasses.dataclass(kw_only=True, eq=False)
class SlotRecord(Record):
    """An optimizer slot of a stack converted beside it: the tensors written, and its largest |b_W - b_R|."""
    targets: List[str] = dataclasses.field(default_factory=list)
    max_abs_b_W_minus_b_R: float = 0.0
    extra: Dict[str, Any] = extra_field()


@dataclasses.dataclass(kw_only=True, eq=False)
class StoredCanonicalRecord(Record):
    """Canonical tensors stored beside a buffer: how many, their largest difference, whether all agree."""
    count: int
    max_abs_diff: float
    agree: bool
    extra: Dict[str, Any] = extra_field()


@dataclasses.dataclass(kw_only=True, eq=False)
class StoredTensorRecord(Record):
    """One stored canonical tensor against the one converted from the buffer (manifest ``replaced``)."""
    agrees: bool
    reason: Optional[str] = road_field()  # why it does not (a shape differs)
    max_abs_diff: Optional[float] = road_field()
    extra: Dict[str, Any] = extra_field()


@dataclasses.dataclass(kw_only=True, eq=False)
class TensorSpecRecord(Record):
    """A whole model's input or output: name, dtype, shape (None: any size); a .pt2's input also ``program_name``
    (its forward's argument: ``_x`` where name is ``x``); an output of a dict its ``key``; ``axes`` each dimension's
    role where the batch is not first."""
    name: str
    dtype: str
    shape: List[Optional[int]]
    program_name: Optional[str] = road_field()
    key: Optional[str] = road_field()
    axes: Optional[List[Optional[str]]] = road_field()
    extra: Dict[str, Any] = extra_field()


@dataclasses.dataclass(kw_only=True, eq=False)
class StreamRecord(Record):
    """A stateful layer exported as a streaming model: its state inputs and the outputs that return them
    (``given_initial_state``: the model gives it initial states, so it has none of its own)."""
    layer: str
    state_inputs: List[str] = dataclasses.field(default_factory=list)
    state_outputs: Optional[List[str]] = road_field()
    given_initial_state: Optional[bool] = road_field()
    extra: Dict[str, Any] = extra_field()


@dataclasses.dataclass(kw_only=True, eq=False)
class ModelLayerRecord(Record):
    """A fused or stock recurrent layer of a whole model and its stack: the user's layer, its type, the cell of a
    StackedRNNCells and the direction of a Bidirectional where the stack is one of those."""
    layer: str
    type: str
    cell: Optional[List[int]] = road_field()
    direction: Optional[str] = road_field()
    spec: SpecRecord
    stack: str
    extra: Dict[str, Any] = extra_field()


@dataclasses.dataclass(kw_only=True, eq=False)
class ParityRecord(Record):
    """The export's own whole-model check: passed, the judge, and a row (artifact, max_abs, passed) per artifact
    (model_parity.json has the details)."""
    passed: bool
    judge: str
    rows: List[Tuple[str, Optional[float], Optional[bool]]] = dataclasses.field(default_factory=list)
    extra: Dict[str, Any] = extra_field()


@dataclasses.dataclass(kw_only=True, eq=False)
class PrecisionRecord(Record):
    """A mixed-precision model: its policy, what the artifacts compute in, their judge, and the model's own distance
    to that judge."""
    policy: str
    artifacts: str
    judge: str
    max_abs_to_original: Optional[float] = None
    extra: Dict[str, Any] = extra_field()


@dataclasses.dataclass(kw_only=True, eq=False)
class Int8Record(Record):
    """An int8 artifact: its path, the quantization settings ({"LSTM": ..., "MatMul": ...}), bytes
    ({"float32": ..., "int8": ...}), the ops quantized and those left float32 (op -> count), warnings."""
    artifact: str
    settings: Dict[str, Dict[str, Any]] = dataclasses.field(default_factory=dict)
    bytes: Dict[str, int] = dataclasses.field(default_factory=dict)
    quantized: Dict[str, int] = dataclasses.field(default_factory=dict)
    float32_left: Dict[str, int] = dataclasses.field(default_factory=dict)
    warnings: List[str] = dataclasses.field(default_factory=list)
    extra: Dict[str, Any] = extra_field()


@dataclasses.dataclass(kw_only=True, eq=False)
class OnnxInputRecord(Record):
    """The input of model.onnx where it holds a signature's numeric part: its name, dtype, shape (-1: any size),
    the graph tensor it replaces and the string inputs it is computed from."""
    name: str
    dtype: str
    shape: List[int]
    replaces: str
    computed_from: List[str] = dataclasses.field(default_factory=list)
    extra: Dict[str, Any] = extra_field()


@dataclasses.dataclass(kw_only=True, eq=False)
class NodeRecord(Record):
    """A cuDNN node of a SavedModel: its function, name, op, time_major and spec; a GPU alternative's also what it
    converts as."""
    function: str
    node: str
    op: str
    time_major: Optional[bool] = None
    spec: SpecRecord
    converts_as: Optional[str] = road_field()
    extra: Dict[str, Any] = extra_field()


@dataclasses.dataclass(kw_only=True, eq=False)
class DroppedRecord(Record):
    """What pruning dropped: how many functions, and those that held cuDNN ops (name -> the ops)."""
    count: int = 0
    with_cudnn_ops: Dict[str, List[str]] = dataclasses.field(default_factory=dict)
    extra: Dict[str, Any] = extra_field()
