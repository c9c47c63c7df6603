"""The ops a model file's graph may hold for cudnn-port to load and run it (:mod:`.allowlist`): data only.

Sources of the list:

- every op type in every SavedModel fixture of ``tests/fixtures/`` (the four ``*.tar.xz`` archives and
  ``realworld/iteam1_rnn``), in ``OUT/saved_model`` and ``OUT/frozen_graph.pb`` (and each layer's) of
  ``cudnn-port convert models/char_lm/model.keras`` and ``models/tf1_bilstm/model.ckpt``, and in Keras 3 exports of a
  ``TextVectorization -> Embedding -> Bidirectional(LSTM(dropout))`` model, a ``GRU -> Masking -> LSTM`` model and a
  ``tf.Module`` with a ``StaticHashTable`` read from an asset (TensorFlow 2.21, Keras 3.15);
- TensorFlow's pure-computation op families beside those (math, array, control flow, tensor lists and arrays,
  strings, ragged and sparse tensors, random numbers, variables, lookup tables, the RNN and CTC ops), taken from
  ``tf.raw_ops``: ops that compute outputs from inputs and the model's own variables and tables, and touch no file,
  socket, queue, clock, Python callback or other process.

- every op TensorFlow's own registry (the TensorFlow installed) marks stateless (``OpDef.is_stateful`` false: its
  outputs depend on its inputs alone), except those that still reach outside the model: the ones
  :data:`REASONS` names by family (files, datasets, queues, the network, Python, debugging) and
  :data:`REFUSED_STATELESS` names one by one; and except the kernel families inference never needs whose crafted
  inputs have aborted TensorFlow (:data:`RISKY_FRAGMENTS`: gradients, quantized kernels, decoders). So a pure op
  is never refused by omission (:func:`pure_ops`); an op the registry marks stateful is allowed only where the
  lists above name it (variables, tables, random numbers).

Ops that touch files are allowed only where TensorFlow's own machinery uses them: :data:`SAVER` in the functions the
SavedModel's saver names (its ``saver_def``), :data:`TABLE_FILE` when the file name is not written in the graph (an
asset the loader binds). Everything else is refused unless the user passes ``--trust-source``.
"""

import functools

_MATH = """Abs Acos Acosh Add AddN AddV2 All Angle Any ApproximateEqual ArgMax ArgMin Asin Asinh Atan Atan2 Atanh
BatchMatMul BatchMatMulV2 BatchMatMulV3 BesselI0e BesselI1e Betainc BiasAdd BiasAddGrad BiasAddV1 Bincount Bucketize
Ceil ClipByValue Complex ComplexAbs Conj Cos Cosh Cross Cumprod Cumsum CumulativeLogsumexp DenseBincount Digamma Div
DivNoNan Elu EluGrad Equal Erf Erfc Erfinv Exp Expm1 Floor FloorDiv FloorMod Greater GreaterEqual
HistogramFixedWidth Igamma Igammac Imag Inv InvGrad Invert IsFinite IsInf IsNan LeakyRelu LeakyReluGrad LeftShift Less
LessEqual Lgamma Log Log1p LogSoftmax LogicalAnd LogicalNot LogicalOr MatMul Max Maximum Mean Min Minimum Mod Mul
MulNoNan Ndtri Neg NextAfter NotEqual Polygamma Pow Prod Real RealDiv Reciprocal ReciprocalGrad Relu Relu6 Relu6Grad
ReluGrad RightShift Rint Round Rsqrt RsqrtGrad Select SelectV2 Selu SeluGrad Sigmoid SigmoidGrad Sign Sin Sinh
Softmax Softplus SoftplusGrad Softsign SoftsignGrad SparseMatMul SparseSegmentMean SparseSegmentSqrtN SparseSegmentSum
Sqrt SqrtGrad Square SquaredDifference Sub Sum Tan Tanh TanhGrad TruncateDiv TruncateMod UnsortedSegmentMax
UnsortedSegmentMin UnsortedSegmentProd UnsortedSegmentSum Xdivy Xlog1py Xlogy Zeta SegmentMax SegmentMean SegmentMin
SegmentProd SegmentSum BitwiseAnd BitwiseOr BitwiseXor PopulationCount Einsum EuclideanNorm L2Loss TopKV2 InTopKV2
SoftmaxCrossEntropyWithLogits SparseSoftmaxCrossEntropyWithLogits LRN LRNGrad"""

_NN = """AvgPool AvgPool3D AvgPoolGrad Conv Conv2D Conv2DBackpropFilter Conv2DBackpropInput Conv3D
Conv3DBackpropFilterV2 Conv3DBackpropInputV2 DepthwiseConv2dNative DepthwiseConv2dNativeBackpropFilter
DepthwiseConv2dNativeBackpropInput Dilation2D FusedBatchNorm FusedBatchNormGrad FusedBatchNormGradV3
FusedBatchNormV3 MaxPool MaxPool3D MaxPoolGrad MaxPoolGradV2 MaxPoolV2 MaxPoolWithArgmax ResizeBilinear
ResizeNearestNeighbor ResizeBicubic ScaleAndTranslate CudnnRNN CudnnRNNV2 CudnnRNNV3 CudnnRNNBackprop
CudnnRNNBackpropV2 CudnnRNNBackpropV3 CudnnRNNParamsSize CudnnRNNParamsToCanonical CudnnRNNParamsToCanonicalV2
CudnnRNNCanonicalToParams CudnnRNNCanonicalToParamsV2 BlockLSTM BlockLSTMV2 BlockLSTMGrad BlockLSTMGradV2 LSTMBlockCell
LSTMBlockCellGrad GRUBlockCell GRUBlockCellGrad CTCGreedyDecoder CTCBeamSearchDecoder CTCLoss CTCLossV2"""

_ARRAY = """BatchToSpaceND BroadcastArgs BroadcastGradientArgs BroadcastTo CheckNumerics CheckNumericsV2 Concat
ConcatOffset ConcatV2 Const DeepCopy DepthToSpace Diag DiagPart EmptyTensorList EnsureShape ExpandDims
ExtractImagePatches Fill Gather GatherNd GatherV2 Identity IdentityN InplaceAdd InplaceUpdate InvertPermutation ListDiff
LowerBound MatrixBandPart MatrixDiag MatrixDiagPart MatrixDiagPartV3 MatrixDiagV3 MatrixSetDiag MatrixSetDiagV3
MirrorPad OneHot OnesLike Pack Pad PadV2 ParallelConcat Placeholder PlaceholderWithDefault PreventGradient Range Rank
Reshape ResourceGather ResourceGatherNd Reverse ReverseSequence ReverseV2 ScatterNd Shape ShapeN Size Slice Snapshot
SpaceToBatchND SpaceToDepth Split SplitV Squeeze StopGradient StridedSlice StridedSliceGrad TensorScatterAdd
TensorScatterMax TensorScatterMin TensorScatterSub TensorScatterUpdate Tile TileGrad Transpose Unique UniqueV2
UniqueWithCounts Unpack UpperBound Where ZerosLike Cast Bitcast Assert NoOp StatelessMultinomial Multinomial
RandomStandardNormal RandomUniform RandomUniformInt TruncatedNormal RandomShuffle RandomGamma RandomPoisson
RandomPoissonV2 StatelessRandomNormal StatelessRandomNormalV2 StatelessRandomUniform StatelessRandomUniformV2
StatelessRandomUniformInt StatelessRandomUniformIntV2 StatelessRandomUniformFullInt StatelessRandomUniformFullIntV2
StatelessTruncatedNormal StatelessTruncatedNormalV2 StatelessRandomGetKeyCounter StatelessRandomGetKeyCounterAlg
StatelessRandomGetAlg StatelessRandomBinomial StatelessParameterizedTruncatedNormal RngReadAndSkip RngSkip
SparseToDense SparseTensorDenseMatMul SparseReshape SparseSlice SparseConcat SparseFillEmptyRows SparseReorder
SparseAdd SparseReduceSum SparseTensorDenseAdd SparseSegmentMeanWithNumSegments SparseSegmentSumWithNumSegments
SparseSegmentSqrtNWithNumSegments SparseCross SparseCrossV2 SparseCrossHashed DenseToSparseSetOperation
RaggedBincount RaggedCross RaggedGather RaggedRange RaggedTensorFromVariant RaggedTensorToSparse RaggedTensorToTensor
RaggedTensorToVariant RaggedTensorToVariantGradient RaggedCountSparseOutput DenseCountSparseOutput
SparseCountSparseOutput"""

_CONTROL = """Case StatelessCase If StatelessIf While StatelessWhile For PartitionedCall StatefulPartitionedCall
Enter Exit LoopCond Merge NextIteration Switch RefEnter RefExit RefMerge RefNextIteration RefSwitch ControlTrigger
SymbolicGradient OptionalFromValue OptionalGetValue OptionalHasValue OptionalNone TensorListConcat TensorListConcatV2
TensorListElementShape TensorListFromTensor TensorListGather TensorListGetItem TensorListLength TensorListPopBack
TensorListPushBack TensorListPushBackBatch TensorListReserve TensorListResize TensorListScatter
TensorListScatterIntoExistingList TensorListScatterV2 TensorListSetItem TensorListSplit TensorListStack
TensorArrayV3 TensorArrayCloseV3 TensorArrayConcatV3 TensorArrayGatherV3 TensorArrayGradV3 TensorArrayGradWithShape
TensorArrayReadV3 TensorArrayScatterV3 TensorArraySizeV3 TensorArraySplitV3 TensorArrayWriteV3"""

_VARIABLES = """VarHandleOp ReadVariableOp AssignVariableOp AssignAddVariableOp AssignSubVariableOp VarIsInitializedOp
DestroyResourceOp DisableCopyOnRead VariableShape ResourceScatterAdd ResourceScatterDiv ResourceScatterMax
ResourceScatterMin ResourceScatterMul ResourceScatterNdAdd ResourceScatterNdSub ResourceScatterNdUpdate
ResourceScatterSub ResourceScatterUpdate ResourceStridedSliceAssign ResourceApplyAdam ResourceApplyAdamWithAmsgrad
ResourceApplyAdagrad ResourceApplyAdagradV2 ResourceApplyAdadelta ResourceApplyGradientDescent ResourceApplyMomentum
ResourceApplyKerasMomentum ResourceApplyRMSProp ResourceApplyCenteredRMSProp ResourceApplyFtrl ResourceApplyFtrlV2
ResourceSparseApplyAdagrad ResourceSparseApplyAdagradV2 ResourceSparseApplyMomentum ResourceSparseApplyKerasMomentum
ResourceSparseApplyRMSProp ResourceSparseApplyFtrl Variable VariableV2 Assign AssignAdd AssignSub IsVariableInitialized
ScatterAdd ScatterUpdate ScatterSub ApplyAdam ApplyGradientDescent ApplyMomentum ApplyRMSProp ApplyAdagrad
HashTable HashTableV2 MutableHashTable MutableHashTableV2 MutableHashTableOfTensorsV2 MutableDenseHashTableV2
AnonymousHashTable AnonymousMutableHashTable AnonymousMutableDenseHashTable AnonymousMutableHashTableOfTensors
InitializeTable InitializeTableV2 LookupTableFind LookupTableFindV2 LookupTableImport LookupTableImportV2
LookupTableInsert LookupTableInsertV2 LookupTableRemoveV2 LookupTableSize LookupTableSizeV2 LookupTableExport
LookupTableExportV2"""

_STRINGS = """AsString DecodeBase64 EncodeBase64 ReduceJoin RegexFullMatch RegexReplace StaticRegexFullMatch
StaticRegexReplace StringFormat StringJoin StringLength StringLower StringNGrams StringSplit StringSplitV2 StringStrip
StringToHashBucket StringToHashBucketFast StringToHashBucketStrong StringToNumber StringUpper Substr UnicodeDecode
UnicodeDecodeWithOffsets UnicodeEncode UnicodeScript UnicodeTranscode UnsortedSegmentJoin Fingerprint"""

# Taking the next element of an iterator the function is handed (Keras' TextVectorization / Normalization keep an
# uncalled `adapt_step` doing this in every SavedModel they are saved in). Only a dataset op can make an iterator,
# and every one of those (TFRecordDataset, AnonymousIterator, MakeIterator, ...) stays refused, so nothing in the
# file can feed these: they read only what a caller passes in.
_ITERATOR_USE = """IteratorGetNext IteratorGetNextSync IteratorGetNextAsOptional OptionalGetValue OptionalHasValue"""

COMPUTE = frozenset(" ".join((_MATH, _NN, _ARRAY, _CONTROL, _VARIABLES, _STRINGS, _ITERATOR_USE)).split())

# The saver's ops: they write and read the checkpoint beside the graph. Allowed only in the functions and nodes the
# SavedModel's saver_def names (TF2: __inference__traced_save_* / _restore_*; TF1: the save/ scope), with no literal
# absolute path or "..": the loader feeds them the variables/ prefix.
SAVER = frozenset("SaveV2 RestoreV2 MergeV2Checkpoints ShardedFilename ShardedFilespec Save SaveSlices Restore "
                  "RestoreSlice".split())

# A lookup table read from a text file: allowed when the file name reaches it from outside the graph (an asset the
# loader binds, a placeholder the loader feeds), never as a literal string.
TABLE_FILE = frozenset({"InitializeTableFromTextFile", "InitializeTableFromTextFileV2"})

# tf.print: allowed to standard error and the log, refused to a file or an address (output_stream="file://...").
PRINT = frozenset({"Print", "PrintV2"})
PRINT_STREAMS = ("stderr", "stdout", "log(info)", "log(warning)", "log(error)")

# Why an op outside the list is refused: (name fragments, words); the first that matches names the reason.
REASONS = (
    (("PyFunc", "EagerPyFunc"), "calls Python (tf.py_function / tf.numpy_function), whose code is not in the model"),
    (("Debug",), "dumps tensors to a file or a network address (tfdbg)"),
    (("Rpc", "Collective", "Send", "Recv", "Tpu", "TPU", "Nccl"), "talks to another process or the network"),
    (("Queue", "Barrier", "Stage", "Unstage", "Accumulator"), "waits on a queue, which can block for ever"),
    (("Dataset", "Iterator", "Reader", "ReadFile", "WriteFile", "MatchingFiles", "ImmutableConst", "Save", "Restore",
      "Checkpoint", "Summary", "TextFile", "Record"), "reads or writes files"),
    (("Print",), "prints to a file or an address"),
)
OTHER_REASON = "is not one of the pure-computation ops cudnn-port runs from a model file"
STATEFUL_REASON = ("is registered by TensorFlow as stateful and is not one of the variable, table or random ops "
                   "cudnn-port runs from a model file")

# Ops TensorFlow registers as stateless that still reach outside the model (REASONS misses their names): refused.
REFUSED_STATELESS = {
    "Abort": "ends the process",
    "DecodeProtoV2": "reads a protobuf descriptor file the graph names",
    "EncodeProto": "reads a protobuf descriptor file the graph names",
    "GenerateVocabRemapping": "reads vocabulary files",
    "Batch": "waits for other calls to batch with, which can block for ever",
    "BatchFunction": "waits for other calls to batch with, which can block for ever",
    "Unbatch": "waits for other calls to batch with, which can block for ever",
    "UnbatchGrad": "waits for other calls to batch with, which can block for ever",
    "GetElementAtIndex": "reads a dataset",
    "GetOptions": "reads a dataset",
    "CompressElement": "feeds the tf.data service",
    "UncompressElement": "feeds the tf.data service",
    "InfeedEnqueuePrelinearizedBuffer": "talks to a TPU",
    "Prelinearize": "talks to a TPU",
    "PrelinearizeTuple": "talks to a TPU",
}
DEVICE_PREFIXES = ("Xla", "TPU", "Tpu")  # device-specific ops: compiled kernels a CPU load cannot run
DEVICE_FRAGMENTS = ("SparseCore",)
# Registry-stateless kernels that inference never needs and whose crafted inputs have aborted TensorFlow (CHECK
# failures: MaxPoolGradWithArgmax with an out-of-range argmax ends the process on TF 2.16 and 2.21): gradients and
# backward passes, quantized and sparse-matrix kernels, decoders of images and compressed or serialized data, device
# copies. Refused unless the hand-checked lists above name them (COMPUTE keeps the few gradients SavedModels hold).
RISKY_FRAGMENTS = ("Grad", "Backprop", "Quantize", "Quantized", "Requantiz", "SparseMatrix", "CSRSparse",
                   "DenseToCSR", "Decode", "Deserialize", "ParseTensor", "Compress", "Copy", "CheckPinned")
RISKY_REASON = ("is a kernel inference does not need (a gradient, a quantized or sparse-matrix kernel, a decoder) "
                "whose crafted inputs can abort the process")


@functools.lru_cache(maxsize=1)
def _registry_stateless() -> frozenset:
    """The ops the installed TensorFlow registers as stateless (empty where TensorFlow is not installed)."""
    try:  # lazy: TensorFlow, an optional dependency loaded on first use
        import tensorflow as tf
        from tensorflow.python.framework import op_def_registry  # the registry itself: no public accessor
    except ImportError:
        return frozenset()
    found = set()
    for name in dir(tf.raw_ops):
        op_def = op_def_registry.get(name) if not name.startswith("_") else None
        if op_def is not None and not op_def.is_stateful:
            found.add(name)
    return frozenset(found)


def refused_stateless(op: str) -> "str | None":
    """Why an op the registry marks stateless is refused all the same, or None."""
    if op in REFUSED_STATELESS:
        return REFUSED_STATELESS[op]
    if op.startswith(DEVICE_PREFIXES) or any(f in op for f in DEVICE_FRAGMENTS):
        return "runs on a TPU or another accelerator's compiler, not on a CPU"
    family = next((words for fragments, words in REASONS if any(f in op for f in fragments)), None)
    return family or (RISKY_REASON if any(f in op for f in RISKY_FRAGMENTS) else None)


@functools.lru_cache(maxsize=1)
def pure_ops() -> frozenset:
    """Every op a model file's graph may run freely: :data:`COMPUTE` and the registry's stateless ops that
    :func:`refused_stateless` lets through (computed once)."""
    return COMPUTE | {op for op in _registry_stateless() if refused_stateless(op) is None}


def why_refused(op: str) -> str:
    """Why an op outside :func:`pure_ops` is refused: its family's reason, its own, or how the registry marks it."""
    if op in _registry_stateless():
        return refused_stateless(op) or OTHER_REASON
    return next((words for fragments, words in REASONS if any(f in op for f in fragments)), None) or \
        (STATEFUL_REASON if _registry_stateless() else OTHER_REASON)

URL_SCHEMES = (b"gs://", b"s3://", b"hdfs://", b"http://", b"https://", b"grpc://", b"file://", b"ram://",
               b"viewfs://", b"wasb://", b"az://", b"abfs://")
