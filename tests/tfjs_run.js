// node tests/tfjs_run.js MODEL_DIR FEEDS.json OUT.json
// Loads a TensorFlow.js graph model (model.json and its weight shards, as tensorflowjs_converter writes them) into
// @tensorflow/tfjs's CPU backend (pure JavaScript: the same kernels a browser's CPU backend runs), runs it on the
// feeds ({name: {dtype, shape, data}}) and writes its outputs ({name: {shape, data}}). Errors: one line on stderr,
// exit 1. Used by tests/test_tfjs.py; @tensorflow/tfjs is found through NODE_PATH.
const fs = require("fs");
const path = require("path");
const tf = require("@tensorflow/tfjs");

async function main() {
  const [dir, feedsPath, outPath] = process.argv.slice(2);
  await tf.setBackend("cpu");
  const model = JSON.parse(fs.readFileSync(path.join(dir, "model.json"), "utf8"));
  const specs = [];
  const shards = [];
  for (const group of model.weightsManifest) {
    specs.push(...group.weights);
    for (const p of group.paths) shards.push(fs.readFileSync(path.join(dir, p)));
  }
  const all = Buffer.concat(shards);
  const graph = await tf.loadGraphModel(tf.io.fromMemory({
    modelTopology: model.modelTopology, weightSpecs: specs, signature: model.signature,
    weightData: all.buffer.slice(all.byteOffset, all.byteOffset + all.byteLength),
    userDefinedMetadata: model.userDefinedMetadata}));
  const feeds = JSON.parse(fs.readFileSync(feedsPath, "utf8"));
  const inputs = {};
  for (const [name, v] of Object.entries(feeds)) {
    // the converter keys a SavedModel's inputs "name:0" where two share a shape (initial_h, initial_c)
    const key = graph.inputNodes.includes(name) ? name : `${name}:0`;
    inputs[key] = tf.tensor(v.data, v.shape, v.dtype);
  }
  // Outputs: where two share a shape (an LSTM's final_h and final_c) the converter names a SavedModel signature's
  // outputs after their tensors, Identity, Identity_1, ... in the order of the signature's sorted keys, which
  // --use_structured_outputs_names records (TensorFlow.js' own predict pairs them with outputNodes' order, which
  // differs: it labelled `outputs` final_c). A frozen GraphDef's outputs keep their node names.
  const keys = (model.userDefinedMetadata || {}).structuredOutputKeys;
  const suffix = (n) => { const m = /^Identity(?:_(\d+))?:0$/.exec(n); return m ? Number(m[1] || 0) : -1; };
  const names = keys ? Object.values(model.signature.outputs).map((o) => o.name).sort((a, b) => suffix(a) - suffix(b))
    : graph.outputNodes;
  const result = await graph.executeAsync(inputs, names);
  const list = Array.isArray(result) ? result : [result];
  const out = {};
  list.forEach((t, i) => {
    out[keys ? keys[i] : names[i].replace(/:0$/, "")] = {shape: t.shape, data: Array.from(t.dataSync())};
  });
  fs.writeFileSync(outPath, JSON.stringify(out));
}

main().catch((e) => { console.error(String((e && e.message) || e).split("\n")[0]); process.exit(1); });
