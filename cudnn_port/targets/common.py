"""Helpers every target module uses."""

from typing import TYPE_CHECKING, Any, Callable, Dict

if TYPE_CHECKING:
    from ..canonical import CanonicalRNN
    import numpy as np


def bias_sum(b_W: "np.ndarray", b_R: "np.ndarray", slot: bool) -> Any:
    """The single bias of formats that store b_W + b_R (for an optimizer slot: b_W's slot)."""
    return b_W if slot else b_W + b_R


def join(prefix: str, name: str) -> str:
    return f"{prefix}/{name}" if prefix else name


def write_all(write_layer: Callable[..., Dict[str, Any]], canon: "CanonicalRNN", prefix: str,
              slot: bool = False) -> Dict[str, Any]:
    """Every tensor of ``canon``: ``write_layer`` applied to each pseudo-layer, in buffer order."""
    out = {}
    for layer, direction, params in canon.pseudo_layers():
        out.update(write_layer(canon.spec, prefix, layer, direction, params, slot))
    return out
