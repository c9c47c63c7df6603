"""A tagger of stock Keras layers (no cudnn_port layer in it), trained here, then converted like any GPU-trained model.

    python examples/stock_tagger.py --out models/stock_tagger        # train (under a minute on 2 cores), save
    cudnn-port convert models/stock_tagger/model.keras out/stock_tagger && cudnn-port verify out/stock_tagger

Model: tokens (0 = padding) -> ``Embedding(mask_zero=True)`` -> ``Bidirectional(LSTM(24, return_sequences=True))``
-> ``GRU(16, return_sequences=True)`` -> ``Dense(3)``: the layers Keras 3 runs on cuDNN on a GPU, so the same file
trained there converts the same way. Task (synthetic, needs both directions): each token's tag is (previous token +
next token) mod 3, as ``examples/bilstm_tagger.py`` (its data is reused). Prints the held-out accuracy of Keras and of
the converted ONNX model when ``--check OUT`` names a conversion.
"""
import argparse
import os
import sys

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import numpy as np  # noqa: E402

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from bilstm_tagger import TAGS, VOCAB, accuracy, make_data  # noqa: E402

SIZES = dict(count=3000, max_len=16, epochs=6)


def build_model(seed=0):
    import keras

    keras.utils.set_random_seed(seed)
    tokens = keras.Input((None,), dtype="int32", name="tokens")
    x = keras.layers.Embedding(VOCAB, 12, mask_zero=True, name="embed")(tokens)
    x = keras.layers.Bidirectional(keras.layers.LSTM(24, return_sequences=True), name="bilstm")(x)
    x = keras.layers.GRU(16, return_sequences=True, name="gru")(x)
    return keras.Model(tokens, keras.layers.Dense(TAGS, name="tags")(x), name="stock_tagger")


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", default="models/stock_tagger", help="folder for model.keras")
    parser.add_argument("--check", metavar="OUT", help="a conversion of the model: report its ONNX accuracy")
    args = parser.parse_args(argv)
    import keras

    test_ids, test_tags, test_mask = make_data(500, SIZES["max_len"], seed=1)
    if args.check:
        from cudnn_port.exports.runners import onnx_session

        model = keras.saving.load_model(os.path.join(args.out, "model.keras"))
        onnx = onnx_session(os.path.join(args.check, "model.onnx")).run(["output_0"], {"tokens": test_ids})[0]
        print(f"held-out tag accuracy: Keras {accuracy(model.predict(test_ids, verbose=0), test_tags, test_mask):.3f}"
              f", converted ONNX {accuracy(onnx, test_tags, test_mask):.3f} (chance {1 / TAGS:.3f})")
        return 0
    ids, tags, mask = make_data(SIZES["count"], SIZES["max_len"], seed=0)
    model = build_model()
    model.compile(optimizer=keras.optimizers.Adam(1e-2),
                  loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True))
    model.fit(ids, tags, sample_weight=mask.astype(np.float32), batch_size=64, epochs=SIZES["epochs"], verbose=2)
    print(f"held-out tag accuracy: {accuracy(model.predict(test_ids, verbose=0), test_tags, test_mask):.3f}")
    os.makedirs(args.out, exist_ok=True)
    model.save(os.path.join(args.out, "model.keras"))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
