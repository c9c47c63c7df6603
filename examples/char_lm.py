"""A character-level language model trained with cudnn_port's fused LSTM, exported, and decoded on CPU.

    python examples/char_lm.py train --out models/char_lm            # writes model.keras and vocab.json
    cudnn-port convert models/char_lm/model.keras out/char_lm        # CPU artifacts (or cudnn_port.export)
    python examples/char_lm.py generate --export out/char_lm --vocab models/char_lm/vocab.json --prompt "Shall I"
    python examples/char_lm.py all --tiny --out /tmp/lm              # the whole flow in miniature (CI)

Data: Shakespeare's sonnets (public domain), examples/data/sonnets.txt. The input pipeline keeps per-element work
small and vectorised: the light start offsets are shuffled and repeated, batched, and only then one map per batch
gathers the windows (parallel calls), followed by prefetch. The training step is one tf.function.

Generation runs from the exported artifacts only: the fused layer's CPU SavedModel
(``OUT/layers/lstm/saved_model``, signature ``with_initial_state``, one step at a time with states in and out)
and the embedding and output weights from ``OUT/checkpoint``. Beam search is vectorised: one tf.while_loop over
steps, all n prompts x k beams as one batch, parents and tokens kept in TensorArrays and traced back in
TensorFlow at the end: no Python work per beam or per step.

``generate --tflite`` decodes from the layer's LiteRT model instead (``OUT/layers/lstm/model_stateful.tflite``,
states in and out) and ``--onnx`` from its ONNX model, with the same beam search in NumPy (:class:`StepDecoder`);
the three give the same text.
"""
import argparse
import json
import os
import time

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
os.environ.setdefault("TF_ENABLE_ONEDNN_OPTS", "0")

import numpy as np  # noqa: E402

HERE = os.path.dirname(os.path.abspath(__file__))
TEXT = os.path.join(HERE, "data", "sonnets.txt")
FULL = dict(embed=32, units=192, layers=2, seq_len=64, batch=32, steps=1200, lr=3e-3)
TINY = dict(embed=8, units=16, layers=2, seq_len=16, batch=8, steps=20, lr=3e-3)


def load_text(path=TEXT, vocab=None):
    """(ids int32 [N], vocab list of characters). Characters outside a given vocab map to its first entry."""
    with open(path, encoding="utf8") as f:
        text = f.read()
    vocab = vocab or sorted(set(text))
    index = {c: i for i, c in enumerate(vocab)}
    return np.array([index.get(c, 0) for c in text], np.int32), vocab


def make_dataset(ids, seq_len, batch, seed=0):
    """Batches of (inputs [batch, seq_len], targets [batch, seq_len]) drawn at random offsets, forever."""
    import tensorflow as tf

    text = tf.constant(ids)
    offsets = tf.data.Dataset.range(len(ids) - seq_len - 1)
    ds = offsets.shuffle(len(ids), seed=seed).repeat()  # light elements: shuffle and repeat before any map
    ds = ds.batch(batch, drop_remainder=True)  # batch the offsets first ...

    def windows(starts):  # ... then one vectorised gather per batch, not one call per window
        chars = tf.gather(text, starts[:, None] + tf.range(seq_len + 1, dtype=starts.dtype)[None, :])
        return chars[:, :-1], chars[:, 1:]

    return ds.map(windows, num_parallel_calls=tf.data.AUTOTUNE).prefetch(tf.data.AUTOTUNE)


def build_model(vocab_size, embed, units, layers, seed=0):
    import keras

    from cudnn_port.layers import CudnnLSTM

    keras.utils.set_random_seed(seed)
    tokens = keras.Input((None,), dtype="int32", name="tokens")
    x = keras.layers.Embedding(vocab_size, embed, name="embed")(tokens)
    x = CudnnLSTM(units, num_layers=layers, return_sequences=True, seed=seed, name="lstm")(x)
    return keras.Model(tokens, keras.layers.Dense(vocab_size, name="head")(x), name="char_lm")


def train(out, embed, units, layers, seq_len, batch, steps, lr, seed=0, log=print):
    """Train on the sonnets; write ``out/model.keras`` and ``out/vocab.json``; return the loss curve."""
    import keras
    import tensorflow as tf

    ids, vocab = load_text()
    model = build_model(len(vocab), embed, units, layers, seed)
    optimizer = keras.optimizers.Adam(lr, clipnorm=1.0)
    loss_fn = keras.losses.SparseCategoricalCrossentropy(from_logits=True)

    @tf.function
    def train_step(x, y):
        with tf.GradientTape() as tape:
            loss = loss_fn(y, model(x, training=True))
        grads = tape.gradient(loss, model.trainable_variables)
        optimizer.apply_gradients(zip(grads, model.trainable_variables))
        return loss

    losses, start = [], time.perf_counter()
    for step, (x, y) in enumerate(make_dataset(ids, seq_len, batch, seed).take(steps)):
        losses.append(float(train_step(x, y)))
        if step % max(1, steps // 10) == 0 or step == steps - 1:
            log(f"step {step + 1}/{steps}: loss {np.mean(losses[-20:]):.3f} "
                f"({(step + 1) / (time.perf_counter() - start):.1f} steps/s)")
    os.makedirs(out, exist_ok=True)
    model.save(os.path.join(out, "model.keras"))
    with open(os.path.join(out, "vocab.json"), "w") as f:
        json.dump(vocab, f)
    return losses


class Decoder:
    """Beam search over an exported char LM: the fused layer's CPU step function and the checkpoint's weights."""

    def __init__(self, export_dir, layer="lstm"):
        import tensorflow as tf

        with open(os.path.join(export_dir, "manifest.json")) as f:
            manifest = json.load(f)
        stack = next(s for s in manifest["stacks"] if s["variable"] == f"{layer}/opaque_kernel")
        self._module = tf.saved_model.load(os.path.join(export_dir, stack["artifacts"]["saved_model"]))
        self.step = self._module.signatures["with_initial_state"]
        reader = tf.train.load_checkpoint(os.path.join(export_dir, "checkpoint"))
        self.embed = tf.constant(reader.get_tensor("embed/embeddings"))
        self.kernel, self.bias = (tf.constant(reader.get_tensor(f"head/{n}")) for n in ("kernel", "bias"))
        self.states, self.units = stack["spec"]["num_layers"], stack["spec"]["num_units"]
        self.search = tf.function(self._search, autograph=False)

    def _logits(self, h):
        import tensorflow as tf

        return tf.matmul(h, self.kernel) + self.bias

    def _run(self, tokens, h, c):
        import tensorflow as tf

        x = tf.gather(self.embed, tokens)
        lengths = tf.fill(tf.shape(tokens)[:1], tf.shape(tokens)[1])
        result = self.step(inputs=x, sequence_lengths=lengths, initial_h=h, initial_c=c)
        return result["outputs"][:, -1], result["final_h"], result["final_c"]

    def _search(self, prompts, k, steps):
        """prompts int32 [n, P] -> (sequences int32 [n, k, steps], scores float32 [n, k]), best beam first."""
        import tensorflow as tf

        n, vocab = tf.shape(prompts)[0], tf.shape(self.kernel)[1]
        zeros = tf.zeros([self.states, n, self.units])
        last, h, c = self._run(prompts, zeros, zeros)  # read the prompt once
        first = tf.math.top_k(tf.nn.log_softmax(self._logits(last)), k)  # [n, k]
        tokens, scores = tf.reshape(first.indices, [-1]), tf.reshape(first.values, [-1])  # all beams: [n*k]
        h, c = (tf.repeat(s, k, axis=1) for s in (h, c))  # each prompt's state for each of its k beams
        chosen = tf.TensorArray(tf.int32, size=steps).write(0, tokens)
        parents = tf.TensorArray(tf.int32, size=steps).write(0, tf.range(n * k))
        offsets = tf.repeat(tf.range(n) * k, k)  # beam b of prompt i lives at row i*k + b

        def body(t, tokens, scores, h, c, chosen, parents):
            out, h, c = self._run(tokens[:, None], h, c)
            total = scores[:, None] + tf.nn.log_softmax(self._logits(out))  # [n*k, V]
            best = tf.math.top_k(tf.reshape(total, [n, k * vocab]), k)  # k best continuations per prompt
            parent = tf.reshape(best.indices // vocab, [-1]) + offsets  # rows of the beams they extend
            tokens = tf.reshape(best.indices % vocab, [-1])
            h, c = tf.gather(h, parent, axis=1), tf.gather(c, parent, axis=1)
            return (t + 1, tokens, tf.reshape(best.values, [-1]), h, c, chosen.write(t, tokens),
                    parents.write(t, parent))

        beams, state = tf.TensorShape([None]), tf.TensorShape([self.states, None, self.units])
        _, _, scores, _, _, chosen, parents = tf.while_loop(  # the beams' count is only known outside the loop
            lambda t, *_: t < steps, body, (tf.constant(1), tokens, scores, h, c, chosen, parents),
            shape_invariants=(tf.TensorShape([]), beams, beams, state, state, tf.TensorShape(None),
                              tf.TensorShape(None)))
        chosen, parents = chosen.stack(), parents.stack()  # [steps, n*k]

        def back(t, row, out):  # follow each final beam's parents back to step 0
            out = out.write(t, tf.gather(chosen[t], row))
            return t - 1, tf.gather(parents[t], row), out

        _, _, seq = tf.while_loop(lambda t, *_: t >= 0, back,
                                  (steps - 1, tf.range(n * k), tf.TensorArray(tf.int32, size=steps)))
        sequences = tf.reshape(tf.transpose(seq.stack()), [n, k, steps])
        return sequences, tf.reshape(scores, [n, k])


class StepDecoder:
    """The same beam search in NumPy over the layer's LiteRT model (``runtime="tflite"``) or ONNX model
    (``runtime="onnx"``), each called one step at a time with states in and out."""

    def __init__(self, export_dir, layer="lstm", runtime="tflite"):
        import tensorflow as tf

        with open(os.path.join(export_dir, "manifest.json")) as f:
            manifest = json.load(f)
        stack = next(s for s in manifest["stacks"] if s["variable"] == f"{layer}/opaque_kernel")
        arts = stack["artifacts"]
        if runtime == "tflite":
            from ai_edge_litert.interpreter import Interpreter

            from cudnn_port.formats.tflite import interpreter_runner

            run = interpreter_runner(Interpreter(os.path.join(export_dir, arts["tflite_stateful"])))
            self.step = lambda feeds: run(feeds).ordered(["outputs", "final_h", "final_c"])
        else:
            from cudnn_port.exports.runners import onnx_session

            rel = next((r for k, r in arts.items() if k.startswith("onnx") and "stateful" in r), arts.get("onnx"))
            session = onnx_session(os.path.join(export_dir, rel))
            self.step = lambda feeds: session.run(["outputs", "final_h", "final_c"], feeds)
        reader = tf.train.load_checkpoint(os.path.join(export_dir, "checkpoint"))
        self.embed = reader.get_tensor("embed/embeddings")
        self.kernel, self.bias = (reader.get_tensor(f"head/{n}") for n in ("kernel", "bias"))
        self.states, self.units = stack["spec"]["num_layers"], stack["spec"]["num_units"]

    def _run(self, tokens, h, c):
        lengths = np.full(tokens.shape[0], tokens.shape[1], np.int32)
        y, h, c = self.step({"inputs": self.embed[tokens], "sequence_lengths": lengths, "initial_h": h,
                             "initial_c": c})
        logits = y[:, -1] @ self.kernel + self.bias
        shifted = logits - logits.max(-1, keepdims=True)
        return shifted - np.log(np.exp(shifted).sum(-1, keepdims=True)), h, c  # log_softmax

    def search(self, prompts, k, steps):
        """prompts int32 [n, P] -> (sequences int32 [n, k, steps], scores float32 [n, k]), best beam first."""
        prompts = np.asarray(prompts, np.int32)
        n, vocab = prompts.shape[0], self.kernel.shape[1]
        zeros = np.zeros((self.states, n, self.units), np.float32)
        logp, h, c = self._run(prompts, zeros, zeros)
        best = np.argsort(-logp, axis=1, kind="stable")[:, :k]  # ties: the lower index first, as tf.math.top_k
        tokens, scores = best.reshape(-1), np.take_along_axis(logp, best, 1).reshape(-1)
        h, c = (np.repeat(s, k, axis=1) for s in (h, c))
        chosen, parents, offsets = [tokens], [np.arange(n * k)], np.repeat(np.arange(n) * k, k)
        for _ in range(1, steps):
            logp, h, c = self._run(tokens[:, None].astype(np.int32), h, c)
            total = (scores[:, None] + logp).reshape(n, k * vocab)
            best = np.argsort(-total, axis=1, kind="stable")[:, :k]
            parent, tokens = (best // vocab).reshape(-1) + offsets, (best % vocab).reshape(-1)
            scores = np.take_along_axis(total, best, 1).reshape(-1)
            h, c = h[:, parent], c[:, parent]
            chosen.append(tokens)
            parents.append(parent)
        row, sequence = np.arange(n * k), []
        for t in range(steps - 1, -1, -1):  # follow each final beam's parents back to step 0
            sequence.append(chosen[t][row])
            row = parents[t][row]
        return np.stack(sequence[::-1], axis=1).reshape(n, k, steps), scores.reshape(n, k)


def generate(export_dir, vocab, prompts, beams=8, steps=60, log=print, runtime="saved_model"):
    """Beam-search ``steps`` characters after each prompt from the export's ``runtime`` ("saved_model", "tflite"
    or "onnx"); returns (texts [n][k], beams per second)."""
    import tensorflow as tf

    index = {ch: i for i, ch in enumerate(vocab)}
    width = max(len(p) for p in prompts)
    ids = np.array([[index.get(ch, 0) for ch in p.rjust(width)] for p in prompts], np.int32)
    if runtime == "saved_model":
        decoder = Decoder(export_dir)
        decoder.search(tf.constant(ids), beams, steps)  # trace once
    else:
        decoder = StepDecoder(export_dir, runtime=runtime)
    start = time.perf_counter()
    sequences, scores = decoder.search(tf.constant(ids) if runtime == "saved_model" else ids, beams, steps)
    seconds = time.perf_counter() - start
    rate = len(prompts) * beams / seconds
    log(f"{len(prompts)} prompts x {beams} beams x {steps} steps in {seconds * 1e3:.0f} ms: {rate:.0f} beams/s, "
        f"{rate * steps:.0f} characters/s")
    texts = [["".join(vocab[i] for i in row) for row in prompt] for prompt in np.asarray(sequences)]
    return texts, rate


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("command", choices=("train", "generate", "all"))
    parser.add_argument("--out", default="models/char_lm", help="model folder (train) / work folder (all)")
    parser.add_argument("--export", default="out/char_lm", help="a cudnn-port export of the model")
    parser.add_argument("--vocab", default="models/char_lm/vocab.json")
    parser.add_argument("--prompt", action="append", help="prompt to continue (repeatable)")
    parser.add_argument("--beams", type=int, default=8)
    parser.add_argument("--length", type=int, default=60, help="characters to generate")
    parser.add_argument("--steps", type=int, help="training steps")
    parser.add_argument("--tiny", action="store_true", help="tiny sizes, for a quick end-to-end run")
    parser.add_argument("--tflite", dest="runtime", action="store_const", const="tflite", default="saved_model",
                        help="generate from the LiteRT model (layers/lstm/model_stateful.tflite; needs ai-edge-litert)")
    parser.add_argument("--onnx", dest="runtime", action="store_const", const="onnx",
                        help="generate from the layer's ONNX model (onnxruntime)")
    args = parser.parse_args(argv)
    sizes = dict(TINY if args.tiny else FULL)
    if args.steps:
        sizes["steps"] = args.steps
    prompts = args.prompt or ["Shall I compare", "When in"]
    if args.command in ("train", "all"):
        train(args.out, **sizes)
    if args.command == "all":
        import cudnn_port
        from cudnn_port.readers.keras_model import load_keras_file

        args.export, args.vocab = os.path.join(args.out, "export"), os.path.join(args.out, "vocab.json")
        cudnn_port.export(load_keras_file(os.path.join(args.out, "model.keras")), args.export, force=True)
    if args.command in ("generate", "all"):
        with open(args.vocab) as f:
            vocab = json.load(f)
        texts, _ = generate(args.export, vocab, prompts, args.beams, args.length if not args.tiny else 12,
                            runtime=args.runtime)
        for prompt, beams in zip(prompts, texts):
            print(f"{prompt!r} -> {beams[0]!r}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
