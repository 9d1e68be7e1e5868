#include "serve/web_page.h"

namespace rn50::serve {

const char* const kWebPage = R"html(<!DOCTYPE html>
<html lang="en">
<head>
<meta charset="utf-8">
<meta name="viewport" content="width=device-width, initial-scale=1">
<title>rn50 serve</title>
<style>
  body { font: 15px/1.4 system-ui, sans-serif; margin: 2em auto; max-width: 52em; color: #222; }
  h1 { font-size: 1.4em; margin-bottom: 0.2em; }
  .sub { color: #666; margin-top: 0; }
  #drop { border: 2px dashed #999; border-radius: 8px; padding: 1.5em; text-align: center;
          margin: 1em 0; }
  #drop.over { border-color: #2a7; background: #efe; }
  #preview { max-width: 16em; max-height: 16em; display: none; margin: 0.5em auto; }
  table { border-collapse: collapse; width: 100%; }
  td, th { padding: 0.25em 0.5em; text-align: left; border-bottom: 1px solid #eee; }
  .bar { background: #2a7; height: 0.8em; border-radius: 3px; }
  #error { color: #b00; }
  .panel { display: flex; gap: 2em; flex-wrap: wrap; }
  .panel > div { flex: 1 1 20em; }
  code { background: #f4f4f4; padding: 0 0.2em; }
</style>
</head>
<body>
<h1>rn50 serve</h1>
<p class="sub">ResNet inference over KServe's Open Inference Protocol v2
  (<code>POST /v2/models/{model}/infer</code>); this page uses
  <code>POST /v2/models/{model}/classify</code>.</p>
<label>Model <select id="model"></select></label>
<div id="drop">
  <p>Drop a JPEG or PNG image here, or <input type="file" id="file" accept="image/*"></p>
  <img id="preview" alt="">
</div>
<div class="panel">
  <div>
    <h2>Top 5</h2>
    <p id="error"></p>
    <table><thead><tr><th>class</th><th>probability</th><th></th></tr></thead>
      <tbody id="predictions"></tbody></table>
    <p id="latency"></p>
  </div>
  <div>
    <h2>Model metrics</h2>
    <table><tbody id="stats"></tbody></table>
  </div>
</div>
<script>
"use strict";
const $ = (id) => document.getElementById(id);
async function loadModels() {
  const r = await fetch("/v2/repository/index", {method: "POST"});
  const models = await r.json();
  for (const m of models) {
    const o = document.createElement("option");
    o.value = o.textContent = m.name;
    $("model").appendChild(o);
  }
  refreshStats();
}
function text(s) { return document.createTextNode(String(s)); }
async function classify(file) {
  $("error").textContent = "";
  $("preview").src = URL.createObjectURL(file);
  $("preview").style.display = "block";
  const model = encodeURIComponent($("model").value);
  const t0 = performance.now();
  const r = await fetch("/v2/models/" + model + "/classify?top_k=5", {
    method: "POST", headers: {"Content-Type": file.type || "application/octet-stream"},
    body: file});
  const ms = performance.now() - t0;
  const body = await r.json();
  const tbody = $("predictions");
  tbody.replaceChildren();
  if (!r.ok) { $("error").textContent = body.error || ("HTTP " + r.status); return; }
  for (const p of body.predictions) {
    const tr = document.createElement("tr");
    tr.className = "prediction";
    const name = document.createElement("td");
    name.appendChild(text(p.label ? p.label + " (" + p.index + ")" : p.index));
    const prob = document.createElement("td");
    prob.appendChild(text((100 * p.probability).toFixed(2) + "%"));
    const barCell = document.createElement("td");
    const bar = document.createElement("div");
    bar.className = "bar";
    bar.style.width = Math.max(1, Math.round(200 * p.probability)) + "px";
    barCell.appendChild(bar);
    tr.append(name, prob, barCell);
    tbody.appendChild(tr);
  }
  $("latency").textContent = "latency " + ms.toFixed(1) + " ms in the browser, " +
      body.server_ms.toFixed(1) + " ms in the server (queue " + body.queue_ms.toFixed(1) +
      " ms, engine " + body.compute_ms.toFixed(1) + " ms, batch of " + body.batch + ")";
  refreshStats();
}
async function refreshStats() {
  if (!$("model").value) return;
  const r = await fetch("/v2/models/" + encodeURIComponent($("model").value) + "/stats");
  if (!r.ok) return;
  const s = await r.json();
  const rows = [["requests", s.requests_success + " ok, " + s.requests_failure + " failed"],
                ["images inferred", s.inference_count],
                ["engine calls", s.execution_count],
                ["average batch", s.average_batch.toFixed(2)],
                ["mean request", s.mean_request_ms.toFixed(2) + " ms"],
                ["mean queue", s.mean_queue_ms.toFixed(2) + " ms"],
                ["mean engine call", s.mean_compute_ms.toFixed(2) + " ms"],
                ["pending", s.pending],
                ["resident memory", (s.resident_memory_bytes / 1048576).toFixed(0) + " MiB"]];
  const tbody = $("stats");
  tbody.replaceChildren();
  for (const [k, v] of rows) {
    const tr = document.createElement("tr");
    const a = document.createElement("th"), b = document.createElement("td");
    a.appendChild(text(k));
    b.appendChild(text(v));
    tr.append(a, b);
    tbody.appendChild(tr);
  }
}
$("file").addEventListener("change", (e) => { if (e.target.files[0]) classify(e.target.files[0]); });
const drop = $("drop");
drop.addEventListener("dragover", (e) => { e.preventDefault(); drop.classList.add("over"); });
drop.addEventListener("dragleave", () => drop.classList.remove("over"));
drop.addEventListener("drop", (e) => {
  e.preventDefault();
  drop.classList.remove("over");
  if (e.dataTransfer.files[0]) classify(e.dataTransfer.files[0]);
});
$("model").addEventListener("change", refreshStats);
setInterval(refreshStats, 2000);
loadModels();
</script>
</body>
</html>
)html";

}  // namespace rn50::serve
