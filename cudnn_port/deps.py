"""Heavy and optional dependencies, imported only by the code paths that need them.

``import cudnn_port`` and ``cudnn-port --help`` import none of them. TensorFlow is not a requirement of the
base package, so that installing cudnn-port never adds a second TensorFlow distribution next to the one a
machine already has (``tensorflow``, ``tensorflow-cpu``, a GPU build); the extras ``[tensorflow]`` and
``[cpu]`` bring one, with the ONNX tools. A missing piece stops with one line that names the extra to install.
"""
import importlib
import importlib.util
from types import ModuleType
from typing import Optional

from .errors import CudnnPortError, reason

TF_RANGE = ((2, 16), (2, 22))  # the versions pyproject.toml declares: >= 2.16, < 2.22
INSTALL = ("pip install 'cudnn-port[cpu]' (CPU-only TensorFlow where it exists), or 'cudnn-port[tensorflow]' in an "
           "environment that has the tensorflow package")
EXTRAS = {"tensorflow": INSTALL, "onnx": INSTALL, "onnxruntime": INSTALL, "tf2onnx": INSTALL,
          "torch": "pip install torch (only the tests and the PyTorch parity row use it)",
          "openvino": "pip install 'cudnn-port[openvino]'", "ai_edge_litert": "pip install 'cudnn-port[tflite]'"}


def import_tf() -> ModuleType:
    """TensorFlow, imported once, quietly; a one-line error naming the install when it is missing or too old."""
    tf = optional("tensorflow", "this command")
    version = tuple(int(part) for part in tf.__version__.split(".")[:2] if part.isdigit())
    if not TF_RANGE[0] <= version < TF_RANGE[1]:
        low, high = (".".join(map(str, v)) for v in TF_RANGE)
        raise CudnnPortError(f"TensorFlow {tf.__version__} is installed, but cudnn-port needs >= {low}, < {high}; "
                             f"install a version in that range")
    return tf


def optional(module: str, purpose: str) -> ModuleType:
    """Import ``module`` (e.g. "onnxruntime") for ``purpose``; a one-line CudnnPortError naming the fix if absent.
    The environment is the caller's: the CLI sets TensorFlow's (:func:`cudnn_port.quiet.quiet_env`) before this."""
    try:
        return importlib.import_module(module)
    except ImportError as e:
        name = module.split(".")[0]
        raise CudnnPortError(f"{purpose} needs {name}, which is not installed ({reason(e, 60)}); "
                             f"{EXTRAS.get(name, f'pip install {name}')}") from None


def available(module: str) -> bool:
    """Whether ``module`` can be imported (without importing it)."""
    try:
        return importlib.util.find_spec(module) is not None
    except (ImportError, ValueError):  # a module blocked or half-installed
        return False


def require(*modules: str, purpose: str) -> None:
    """Stop with one line naming the extra to install if any of ``modules`` is missing (checked before work)."""
    for module in modules:
        optional(module, purpose)


def missing_message(error: ImportError) -> Optional[str]:
    """The one-line message for a ModuleNotFoundError of an optional dependency, or None for any other module."""
    name = (getattr(error, "name", None) or "").split(".")[0]
    if name not in EXTRAS:
        return None
    return f"this command needs {name}, which is not installed; {EXTRAS[name]}"
