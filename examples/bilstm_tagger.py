"""A BiLSTM sequence tagger on variable-length batches: fused layer + masking, trained, exported, verified.

    python examples/bilstm_tagger.py --out out/tagger           # train, export (fp32 and int8), verify, accuracy
    python examples/bilstm_tagger.py --out /tmp/tagger --tiny   # the same in miniature (CI)

Task (synthetic, needs both directions): each token's tag is (previous token + next token) mod 3, with 0 past
either end. Sequences are right-padded with id 0; ``Embedding(mask_zero=True)`` turns the padding into a mask,
which the fused layer turns into cuDNN sequence lengths. The export is written with its int8 ONNX model too, and
the held-out accuracy of both is reported: int8's task-level cost. The export's ONNX model then tags new batches with
onnxruntime alone.
"""
import argparse
import os

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
os.environ.setdefault("TF_ENABLE_ONEDNN_OPTS", "0")

import numpy as np  # noqa: E402

VOCAB, TAGS = 30, 3
FULL = dict(count=4000, max_len=24, units=48, layers=2, epochs=6)
TINY = dict(count=256, max_len=10, units=8, layers=2, epochs=1)


def make_data(count, max_len, seed):
    """(ids int32 [count, max_len] right-padded with 0, tags int32 [same], mask bool [same])."""
    rng = np.random.default_rng(seed)
    lengths = rng.integers(2, max_len + 1, size=count)
    ids = rng.integers(1, VOCAB, size=(count, max_len)).astype(np.int32)
    mask = np.arange(max_len)[None, :] < lengths[:, None]
    ids[~mask] = 0
    prev = np.pad(ids, ((0, 0), (1, 0)))[:, :-1]
    nxt = np.pad(ids, ((0, 0), (0, 1)))[:, 1:]
    tags = ((prev + nxt) % TAGS).astype(np.int32) * mask
    return ids, tags, mask


def build_model(units, layers, seed=0):
    import keras

    from cudnn_port.layers import CudnnLSTM

    keras.utils.set_random_seed(seed)
    tokens = keras.Input((None,), dtype="int32", name="tokens")
    x = keras.layers.Embedding(VOCAB, 16, mask_zero=True, name="embed")(tokens)
    x = CudnnLSTM(units, num_layers=layers, bidirectional=True, return_sequences=True, seed=seed, name="bilstm")(x)
    return keras.Model(tokens, keras.layers.Dense(TAGS, name="tags")(x), name="tagger")


def accuracy(logits, tags, mask):
    return float(((np.argmax(logits, -1) == tags) & mask).sum() / mask.sum())


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", default="out/tagger")
    parser.add_argument("--tiny", action="store_true")
    args = parser.parse_args(argv)
    sizes = TINY if args.tiny else FULL

    import keras
    import tensorflow as tf

    import cudnn_port
    from cudnn_port.exports.runners import onnx_session
    from cudnn_port.verify import format_table, verify

    ids, tags, mask = make_data(sizes["count"], sizes["max_len"], seed=0)
    test_ids, test_tags, test_mask = make_data(500, sizes["max_len"], seed=1)
    data = (tf.data.Dataset.from_tensor_slices((ids, tags, mask.astype(np.float32)))
            .shuffle(len(ids), seed=0).batch(32).prefetch(tf.data.AUTOTUNE))  # (x, y, sample_weight = mask)
    model = build_model(sizes["units"], sizes["layers"])
    model.compile(optimizer=keras.optimizers.Adam(5e-3),
                  loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True))
    model.fit(data, epochs=sizes["epochs"], verbose=2)
    keras_acc = accuracy(model.predict(test_ids, verbose=0), test_tags, test_mask)

    manifest = cudnn_port.export(model, args.out, force=True, quantize="int8")
    report = verify(args.out)
    print(format_table(report))
    acc = {kind: accuracy(onnx_session(os.path.join(args.out, manifest["model_artifacts"][kind])).run(
        ["output_0"], {"tokens": test_ids})[0], test_tags, test_mask) for kind in ("onnx", "onnx_int8")}
    print(f"held-out tag accuracy: Keras {keras_acc:.3f}, exported ONNX {acc['onnx']:.3f}, int8 ONNX "
          f"{acc['onnx_int8']:.3f} (chance {1 / TAGS:.3f})")
    return 0 if report["passed"] and manifest["parity"]["passed"] and abs(keras_acc - acc["onnx"]) < 1e-3 else 1


if __name__ == "__main__":
    raise SystemExit(main())
