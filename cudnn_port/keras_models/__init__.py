"""A Keras 3 model made into the model every whole-model artifact is traced from, and the judge it is held to.

A model of stock ``LSTM`` / ``GRU`` / ``SimpleRNN`` / ``Bidirectional`` / ``RNN`` layers or of the fused layers
(:mod:`cudnn_port.layers`), or a ``.pt2`` program translated into one, is made float32, then streaming, and judged in
that form; its stock recurrent layers are then made fused ones, and :mod:`cudnn_port.roads.model` traces the result:

- :mod:`.precision`: a mixed-precision model as the float32 model its artifacts and judge compute;
- :mod:`.streaming_model`: a stateful model as a streaming one (states in, states out), over :mod:`.keras_cells`
  (Keras' own recurrent layers read by their structure: cells, a ``Bidirectional``'s halves, stateful layers);
- :mod:`.stock_keras`: which stock recurrent layers become fused stacks, why the others do not, and the model
  rebuilt around them (docs/stock_keras.md);
- :mod:`.stock_fused`: each such layer's fused form, the stock weights packed into cuDNN's buffer;
- :mod:`.stock_adapter`: the fused layer behind the stock layer's interface (masks, states, ``go_backwards``,
  merge modes), with :mod:`.compaction` making any time mask a right-padded one, exactly;
- :mod:`.sized_layers`: ``Dense``, ``Reshape``, ``RepeatVector``, ``TimeDistributed`` in forms LiteRT sizes before
  it runs, with no per-step loop;
- :mod:`.model_inputs`: what the artifacts take (names, dtypes, dynamic sizes, the padding a ``Masking`` reads).

Imports run downhill: the readers, roads and judges above import this package; it imports the fused layers and the
small modules below it, never the readers, formats or exports (``lint-imports``, the layers in pyproject.toml).
"""
