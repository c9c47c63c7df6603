"""Task-level cost of an export: what a quantized model loses where it matters, measured on the model's own task.

A ``task.json`` beside a ``.keras`` file describes how to evaluate it; ``export`` copies it into OUT with its data
embedded, and ``verify`` measures the fp32 and int8 ONNX models on it. One kind of task so far:

    {"kind": "next_token_loss", "text": "path/to/text.txt", "vocab": "vocab.json", "window": 64,
     "max_relative_increase": 0.01}

a language model over characters (``vocab.json``: the list of characters, token id = index) scored by its mean
cross-entropy in nats per character over the text cut into windows of ``window`` characters, each from a fresh
state as the model was trained. The int8 model passes when its loss exceeds the fp32 model's by at most
``max_relative_increase`` (relative).
"""
import json
import os
from typing import Any, Callable, Dict, Optional

import numpy as np

from ..errors import CudnnPortError

TASK = "task.json"


def load_task(model_path: str) -> Optional[Dict[str, Any]]:
    """The task beside ``model_path`` (a ``.keras`` file) with its data embedded, or None if there is none."""
    path = os.path.join(os.path.dirname(os.path.abspath(model_path)), TASK)
    if not os.path.isfile(path):
        return None
    try:
        with open(path) as f:
            task = json.load(f)
        if task.get("kind") != "next_token_loss":
            raise ValueError(f"unknown kind {task.get('kind')!r}")
        base = os.path.dirname(path)
        with open(os.path.join(base, task["text"]), encoding="utf8") as f:
            text = f.read()
        with open(os.path.join(base, task["vocab"]), encoding="utf8") as f:
            vocab = json.load(f)
    except (OSError, ValueError, KeyError, TypeError) as e:
        raise CudnnPortError(f"cannot read the task {path} ({e}); fix it or remove it") from None
    return {"kind": "next_token_loss", "source": os.path.basename(task["text"]), "text": text, "vocab": vocab,
            "window": int(task.get("window", 64)), "max_relative_increase": float(task.get("max_relative_increase",
                                                                                         0.01))}


def next_token_loss(run: Callable[[np.ndarray], np.ndarray], task: Dict[str, Any]) -> float:
    """Mean cross-entropy (nats per token) of ``run(ids [N, window]) -> logits [N, window, V]`` over the task's text
    in non-overlapping windows, each window predicting its next ``window`` characters."""
    index = {c: i for i, c in enumerate(task["vocab"])}
    ids = np.array([index.get(c, 0) for c in task["text"]], np.int32)
    window = task["window"]
    count = (len(ids) - 1) // window
    starts = np.arange(count) * window
    inputs = np.stack([ids[s:s + window] for s in starts])
    targets = np.stack([ids[s + 1:s + window + 1] for s in starts])
    logits = np.asarray(run(inputs), np.float64)
    logits -= logits.max(-1, keepdims=True)
    log_probs = logits - np.log(np.exp(logits).sum(-1, keepdims=True))
    return float(-np.take_along_axis(log_probs, targets[..., None], -1).mean())


def task_row(task: Dict[str, Any], fp32_run: Callable[[np.ndarray], np.ndarray],
             int8_run: Callable[[np.ndarray], np.ndarray]) -> Dict[str, Any]:
    """verify's row: the int8 model's task cost against the fp32 model's."""
    fp32, int8 = next_token_loss(fp32_run, task), next_token_loss(int8_run, task)
    change = (int8 - fp32) / fp32
    limit = task["max_relative_increase"]
    return {"artifact": "task: next-token loss, int8 vs fp32 ONNX", "max_abs": abs(int8 - fp32), "max_rel": change,
            "passed": change <= limit, "fp32": fp32, "int8": int8,
            "note": f"{task['source']}: fp32 {fp32:.4f}, int8 {int8:.4f} nats/char ({change:+.2%}; at most "
                    f"{limit:+.0%})"}
