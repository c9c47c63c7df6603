"""How the fused layers (:mod:`cudnn_port.layers`) compute while a trace or a judge is under way: a forced path
(:func:`forced_path`), a judge in place of a layer's own paths (:func:`judged_by`), and what layers reading one mask
share within a trace (:func:`shared`). Context variables, so that nested and concurrent traces each see their own."""
import contextlib
import contextvars
from typing import Any, Callable, Dict, Iterator, Optional, Tuple

PATHS = ("cpu", "cudnn", "lean")
_PATH: contextvars.ContextVar[Optional[str]] = contextvars.ContextVar("cudnn_port_layer_path", default=None)
# in a forced_path: {(kind, id(t)): (t, value)}
_SHARED: contextvars.ContextVar[Optional[Dict[Tuple[str, int], Tuple[Any, Any]]]] = contextvars.ContextVar(
    "cudnn_port_shared", default=None)
_JUDGES: contextvars.ContextVar[Dict[int, Callable[..., Any]]] = contextvars.ContextVar(
    "cudnn_port_layer_judges", default={})


@contextlib.contextmanager
def forced_path(path: str) -> Iterator[None]:
    """Trace the fused layers with ``path`` ("cpu": standard ops; "cudnn": the CudnnRNNV3 op, for a graph that is
    converted rather than run, e.g. to TFLite; "lean": the cuDNN op too, but a layer called without a mask computes
    no sequence lengths (a time-major CudnnRNNV2, for ONNX: its fused nodes then get no ``sequence_lens``) and every
    layer called with the same mask shares one lengths computation) instead of choosing by the devices TensorFlow
    sees."""
    if path not in PATHS:
        raise ValueError(f"Received path={path!r}, expected one of {', '.join(PATHS)}")
    token, cache = _PATH.set(path), _SHARED.set({})
    try:
        yield
    finally:
        _SHARED.reset(cache)
        _PATH.reset(token)


@contextlib.contextmanager
def judged_by(judges: Dict[int, Callable[..., Any]]) -> Iterator[None]:
    """While inside, each fused layer ``layer`` with ``id(layer)`` in ``judges`` computes its stack with
    ``judges[id(layer)](x, lengths, h0, c0) -> (outputs, h_n, c_n)`` (time-major states) instead of its own paths:
    how :func:`cudnn_port.judging.stock.model_judge` runs a whole model with the reference in place of the fused
    layers' own paths."""
    token = _JUDGES.set(dict(judges))
    try:
        yield
    finally:
        _JUDGES.reset(token)


def current_path() -> Optional[str]:
    """The path :func:`forced_path` set ("cpu", "cudnn", "lean"), or None: the layers choose by the devices."""
    return _PATH.get()


def current_judge(layer: Any) -> Optional[Callable[..., Any]]:
    """The judge :func:`judged_by` set for ``layer``, or None."""
    return _JUDGES.get().get(id(layer))


def shared(kind: str, tensor: Any, make: Callable[[], Any]) -> Any:
    """``make()``, computed once per ``kind`` and ``tensor`` while tracing inside :func:`forced_path` (every time
    outside it): what each layer reading one mask derives from it (every layer after one Embedding / Masking reads
    the same mask tensor), so that a graph computes it once."""
    cache = _SHARED.get()
    if cache is None:
        return make()
    key = (kind, id(tensor))
    if key not in cache:
        cache[key] = (tensor, make())  # the tensor held, so that its id stays its own
    return cache[key][1]
