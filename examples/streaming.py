"""Streaming: run an exported stack chunk by chunk, carrying its states, and get what one whole call gives.

    cudnn-port convert models/char_lm/model.keras out/char_lm
    python examples/streaming.py out/char_lm --vocab models/char_lm/vocab.json --text "Shall I compare thee" --chunk 4
    python examples/streaming.py OUT --chunk 16                # every unidirectional stack of any convert output

``model_stateful.onnx`` takes ``initial_h`` (and ``initial_c``) ``[layers, batch, hidden]`` as required inputs and
returns ``final_h`` (and ``final_c``); its ``metadata_props`` name them (``state_inputs``, ``state_outputs``,
``state_shape``, ``chunk``). A chunk is any number of time steps: feed the final states of one chunk as the initial
states of the next, starting from zeros. The SavedModel's ``with_initial_state`` signature streams the same way.

A bidirectional stack cannot stream: its backward direction starts at each sequence's last step, so no output is
known before the whole sequence has arrived. This example skips such stacks.

For the char LM (``--vocab``), the text's characters go through the embedding (from ``OUT/checkpoint``), the fused
LSTM layer's ``layers/lstm/model_stateful.onnx`` chunk by chunk, and the output layer; after each chunk it prints the
most likely next character, then checks every step's logits against one whole call of the same model.
"""
import argparse
import json
import os
import sys

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
os.environ.setdefault("TF_ENABLE_ONEDNN_OPTS", "0")

import numpy as np  # noqa: E402


def zero_states(meta, batch):
    """{state input name: zeros} from the model's metadata (``state_inputs``, ``state_shape`` "L,batch,H")."""
    layers, _, hidden = meta["state_shape"].split(",")
    return {name: np.zeros((int(layers), batch, int(hidden)), np.float32) for name in meta["state_inputs"].split(",")}


def stream(step, x, chunk, states):
    """Run ``x`` [B, T, I] through ``step(inputs, sequence_lengths, **states) -> (outputs, {state input: final
    state})`` ``chunk`` steps at a time, carrying the states. Returns (outputs [B, T, H], last states)."""
    outputs = []
    for start in range(0, x.shape[1], chunk):
        piece = x[:, start:start + chunk]
        y, states = step(piece, np.full(len(x), piece.shape[1], np.int32), **states)
        outputs.append(y)
    return np.concatenate(outputs, axis=1), states


def onnx_step(path):
    """(step function of a model_stateful.onnx for :func:`stream`, its metadata) in onnxruntime."""
    import onnxruntime as ort

    session = ort.InferenceSession(path, providers=["CPUExecutionProvider"])
    meta = session.get_modelmeta().custom_metadata_map
    ins, outs = meta["state_inputs"].split(","), meta["state_outputs"].split(",")

    def step(inputs, sequence_lengths, **states):
        y, *finals = session.run(["outputs"] + outs, dict(inputs=inputs, sequence_lengths=sequence_lengths, **states))
        return y, dict(zip(ins, finals))

    return step, meta


def saved_model_step(path):
    """The step function of a SavedModel's ``with_initial_state`` signature for :func:`stream`."""
    import tensorflow as tf

    fn = tf.saved_model.load(path).signatures["with_initial_state"]

    def step(inputs, sequence_lengths, **states):
        result = fn(inputs=inputs, sequence_lengths=sequence_lengths, **{k: tf.constant(v) for k, v in states.items()})
        return result["outputs"].numpy(), {k: result[k.replace("initial", "final")].numpy() for k in states}

    return step


def check_stacks(out, chunk, log=print):
    """Stream a random batch through each unidirectional stack's model_stateful.onnx (and SavedModel, where there is
    one) ``chunk`` steps at a time; compare with one whole call. Returns the largest difference."""
    with open(os.path.join(out, "manifest.json")) as f:
        manifest = json.load(f)
    worst = 0.0
    for stack in manifest["stacks"]:
        arts, spec = stack["artifacts"], stack["spec"]
        if spec["bidirectional"]:
            log(f"{stack['variable']}: bidirectional, cannot stream (its backward direction needs the whole sequence)")
            continue
        if "onnx_stateful" not in arts:
            continue
        step, meta = onnx_step(os.path.join(out, arts["onnx_stateful"]))
        x = np.random.default_rng(0).normal(size=(2, 40, spec["input_size"])).astype(np.float32)
        whole, _ = stream(step, x, x.shape[1], zero_states(meta, len(x)))
        steps = [("onnx", step)]
        if "saved_model" in arts:
            steps.append(("saved_model", saved_model_step(os.path.join(out, arts["saved_model"]))))
        for name, fn in steps:
            got, _ = stream(fn, x, chunk, zero_states(meta, len(x)))
            worst = max(worst, float(np.abs(got - whole).max()))
            log(f"{stack['variable']}: {name} in chunks of {chunk}: max |chunked - whole| = "
                f"{np.abs(got - whole).max():.1e}")
    return worst


def char_lm(out, vocab_path, text, chunk, log=print):
    """Stream ``text`` through the char LM export ``chunk`` characters at a time; return the largest difference of the
    logits from one whole call."""
    import tensorflow as tf

    with open(vocab_path) as f:
        vocab = json.load(f)
    with open(os.path.join(out, "manifest.json")) as f:
        stack = next(s for s in json.load(f)["stacks"] if s["variable"] == "lstm/opaque_kernel")
    reader = tf.train.load_checkpoint(os.path.join(out, "checkpoint"))
    embed, kernel, bias = (reader.get_tensor(n) for n in ("embed/embeddings", "head/kernel", "head/bias"))
    step, meta = onnx_step(os.path.join(out, stack["artifacts"]["onnx_stateful"]))
    x = embed[np.array([[vocab.index(ch) for ch in text]])]
    states, logits = zero_states(meta, 1), []
    for start in range(0, len(text), chunk):
        y, states = step(x[:, start:start + chunk], np.array([x[:, start:start + chunk].shape[1]], np.int32),
                         **states)
        logits.append(y[0] @ kernel + bias)
        log(f"{text[:start + chunk]!r} -> next {vocab[int(np.argmax(logits[-1][-1]))]!r}")
    whole, _ = step(x, np.array([len(text)], np.int32), **zero_states(meta, 1))
    diff = float(np.abs(np.concatenate(logits) - (whole[0] @ kernel + bias)).max())
    log(f"max |chunked - whole| of the logits: {diff:.1e}")
    return diff


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("out", help="a cudnn-port convert output")
    parser.add_argument("--chunk", type=int, default=16, help="time steps per call")
    parser.add_argument("--vocab", help="the char LM's vocab.json: stream --text through the char LM export")
    parser.add_argument("--text", default="Shall I compare thee to a summer's day?")
    args = parser.parse_args(argv)
    diff = char_lm(args.out, args.vocab, args.text, args.chunk) if args.vocab else check_stacks(args.out, args.chunk)
    return 0 if diff <= 1e-4 else 1


if __name__ == "__main__":
    sys.exit(main())
