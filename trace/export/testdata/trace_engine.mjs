// Loads a Chrome trace-event JSON file into the DevTools performance
// panel's trace engine (npm @paulirish/trace_engine, the parser Chrome's
// DevTools and Lighthouse use) and prints what it made of it, as JSON.
// Usage: node trace_engine.mjs MODULE_DIR FILE.json
import fs from 'node:fs';
import path from 'node:path';
import url from 'node:url';

// The engine runs in a browser; in node it needs DOMRect (its README says so).
globalThis.DOMRect = globalThis.DOMRect || class DOMRect {
  constructor(x = 0, y = 0, w = 0, h = 0) { this.x = x; this.y = y; this.width = w; this.height = h; }
};
const [dir, file] = process.argv.slice(2);
const Trace = await import(url.pathToFileURL(path.join(dir, 'models', 'trace', 'trace.js')).href);
const json = JSON.parse(fs.readFileSync(file, 'utf8'));
const events = json.traceEvents ?? json;
const model = Trace.TraceModel.Model.createWithAllHandlers();
await model.parse(events);
const d = model.parsedTrace().data;
let threads = 0, named = 0, slices = 0, treeNodes = 0, maxDepth = 0;
for (const [, p] of d.Renderer.processes) {
  for (const [, t] of p.threads) {
    threads++;
    if (t.name) named++;
    slices += t.entries.length;
    if (t.tree) {
      maxDepth = Math.max(maxDepth, t.tree.maxDepth);
      const stack = [...t.tree.roots];
      while (stack.length) { const n = stack.pop(); treeNodes++; stack.push(...n.children); }
    }
  }
}
const flows = d.Flows.flows;
console.log(JSON.stringify({
  generic: d.Meta.traceIsGeneric,
  processNames: d.Meta.processNames.size,
  threads, named, slices, treeNodes, maxDepth,
  flows: flows.length,
  flowsBound: flows.filter(f => f.length === 2 && f[0].pid !== f[1].pid).length,
  min: d.Meta.traceBounds.min, max: d.Meta.traceBounds.max,
  warnings: [...(d.Warnings?.perWarning?.keys?.() ?? [])],
}));
