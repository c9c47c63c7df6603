"""CPU artifacts of one stack, each computing cuDNN's forward pass (docs/conventions.md, section 2) with no cuDNN op.

Interface shared by every artifact (B batch, T time, L*D pseudo-layers):

    inputs            float32 [B, T, I]
    sequence_lengths  int32   [B]            (1 <= length <= T; right-padded batches)
    initial_h         float32 [L*D, B, S]    (optional; zeros when absent)
    initial_c         float32 [L*D, B, H]    (LSTM only; optional)
    -> outputs [B, T, D*S] (zero past each length), final_h [L*D, B, S], final_c [L*D, B, H] (LSTM)

S = H, or P for an LSTM with projection (which ONNX cannot hold: no ONNX artifact is written for it).

With T = 1 and states passed in and out, every artifact is a step function for decoding.
"""
from typing import TYPE_CHECKING, Tuple

if TYPE_CHECKING:
    from ..layout import RNNSpec

INPUT_NAMES = ("inputs", "sequence_lengths", "initial_h", "initial_c")
OUTPUT_NAMES = ("outputs", "final_h", "final_c")


def io_names(spec: "RNNSpec") -> Tuple[Tuple[str, ...], Tuple[str, ...]]:
    """(input names, output names) of ``spec``'s artifacts: LSTM has a cell state, GRU does not."""
    keep = 4 if spec.mode == "lstm" else 3
    return INPUT_NAMES[:keep], OUTPUT_NAMES[:keep - 1]
