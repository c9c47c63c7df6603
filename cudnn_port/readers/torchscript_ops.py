"""What a TorchScript file's code calls, as :mod:`.torchscript` reads it: the ATen ops it translates with their
schemas (native_functions.yaml: the overload and the positional argument names ``torch.export`` would record), the
constructs it refuses by name, and each argument written as a ``torch.export`` graph spells it."""
import ast
from typing import Any, Dict, Optional

from ..errors import UnsupportedError, short

_RNN = "input hx params has_biases num_layers dropout train bidirectional batch_first"
# op: (overload, positional argument names), from native_functions.yaml
SCHEMAS = {
    "embedding": ("default", "weight indices padding_idx scale_grad_by_freq sparse"),
    "linear": ("default", "input weight bias"), "matmul": ("default", "self other"),
    "lstm": ("input", _RNN), "gru": ("input", _RNN), "rnn_tanh": ("input", _RNN), "rnn_relu": ("input", _RNN),
    "select": ("int", "self dim index"), "slice": ("Tensor", "self dim start end step"),
    "zeros": ("default", "size"), "view": ("default", "self size"), "reshape": ("default", "self shape"),
    "permute": ("default", "self dims"), "transpose": ("int", "self dim0 dim1"), "contiguous": ("default", "self"),
    "cat": ("default", "tensors dim"), "stack": ("default", "tensors dim"), "relu": ("default", "self"),
    "tanh": ("default", "self"), "sigmoid": ("default", "self"), "softmax": ("int", "self dim dtype"),
    "log_softmax": ("int", "self dim dtype"), "add": ("Tensor", "self other alpha"),
    "sub": ("Tensor", "self other alpha"), "mul": ("Tensor", "self other"), "div": ("Tensor", "self other"),
    "dropout": ("default", "input p train"), "unsqueeze": ("default", "self dim"), "squeeze": ("dim", "self dim"),
    "flatten": ("using_ints", "self start_dim end_dim"), "mean": ("dim", "self dim keepdim dtype"),
    "sum": ("dim_IntList", "self dim keepdim dtype"),
}
# c10::ScalarType (what TorchScript writes as dtype=6) -> torch.export's ScalarType (torch/_export/serde/schema.py)
DTYPES = {0: 1, 1: 2, 2: 3, 3: 4, 4: 5, 5: 6, 6: 7, 7: 8, 11: 12, 15: 13}
CONSTRUCTS = {"If": "an if", "For": "a for loop", "While": "a while loop", "With": "a with block",
              "Raise": "a raise", "Assert": "an assert", "AugAssign": "an in-place update", "Subscript": "a subscript",
              "IfExp": "a conditional expression", "Compare": "a comparison", "BoolOp": "a boolean expression",
              "ListComp": "a list comprehension", "Lambda": "a lambda", "FunctionDef": "a nested function"}


class NotStraight(UnsupportedError):
    """The code holds a construct that is not a straight line of ops: the whole model is refused, the stacks
    convert."""


class TensorRef:
    """A tensor of the program, by name."""

    def __init__(self, name: str):
        self.name = name


class SizeRef:
    """A size read when the model runs (``aten.sym_size``), by name."""

    def __init__(self, name: str):
        self.name = name


def keyword(key: Optional[str], value: Any, path: str) -> Dict[str, Any]:
    """A keyword argument of a call (``dtype=6``, ``layout=None``, ``device=torch.device("cpu")``) as
    ``torch.export`` spells it; ``key`` is None for a ``**mapping``."""
    if key == "dtype" and isinstance(value, int):
        return {"as_scalar_type": DTYPES.get(value, 7)}
    if key == "memory_format":
        return {"as_memory_format": 0}
    if key == "layout" and value is not None:
        return {"as_layout": 0}
    return value if isinstance(value, dict) else arg(value, path)


def arg(v: Any, path: str = "") -> Dict[str, Any]:
    """A value the code computed (a tensor, a size, a number, a list of them) as a ``torch.export`` argument."""
    if isinstance(v, TensorRef):
        return {"as_tensor": {"name": v.name}}
    if isinstance(v, SizeRef):
        return {"as_sym_int": {"as_name": v.name}}
    if isinstance(v, bool):
        return {"as_bool": v}
    if isinstance(v, int):
        return {"as_int": v}
    if isinstance(v, float):
        return {"as_float": v}
    if v is None:
        return {"as_none": True}
    if isinstance(v, str):
        return {"as_string": v}
    if isinstance(v, list) and v and all(isinstance(x, TensorRef) for x in v):
        return {"as_tensors": [{"name": x.name} for x in v]}
    if isinstance(v, list) and all(isinstance(x, bool) for x in v) and v:
        return {"as_bools": v}
    if isinstance(v, list) and all(isinstance(x, (int, SizeRef)) and not isinstance(x, bool) for x in v):
        if any(isinstance(x, SizeRef) for x in v):
            return {"as_sym_ints": [{"as_name": x.name} if isinstance(x, SizeRef) else {"as_int": x} for x in v]}
        return {"as_ints": v}
    if isinstance(v, list) and all(isinstance(x, (int, float)) for x in v):
        return {"as_floats": [float(x) for x in v]}
    raise NotStraight(f"{path}: an argument the code builds ({short(repr(v), 40)}) is not read as data")


def dotted_name(node: ast.AST) -> str:
    """``torch.lstm`` of the call target ``torch.lstm``; "" for a target that is not a dotted name."""
    parts = []
    while isinstance(node, ast.Attribute):
        parts.append(node.attr)
        node = node.value
    return ".".join([node.id] + parts[::-1]) if isinstance(node, ast.Name) else ""
