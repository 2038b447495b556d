// The status view: what /slots, /metrics and /v1/models say, refreshed while the view is open:
// each slot's job (its request, prompt progress, tokens generated) and the jobs parked for an
// editor completion.

import { $, el, clearNotice, showNotice } from "./dom.js";
import { describe, getJSON, getText } from "./api.js";

const STATUS_REFRESH_MS = 2000;
const RECENT_SPEEDS = 10;

let statusTimer = null;
let lastRates = null;
const recentSpeeds = [];

// Prometheus text → [{name, labels, value}]
function parseMetrics(text) {
  const samples = [];
  const line = /^([a-zA-Z_:][\w:]*)(?:\{(.*)\})?\s+(\S+)/;
  const label = /(\w+)="((?:[^"\\]|\\.)*)"/g;
  for (const row of text.split("\n")) {
    if (!row || row.startsWith("#")) continue;
    const match = line.exec(row);
    if (!match) continue;
    const labels = {};
    for (const pair of (match[2] || "").matchAll(label)) labels[pair[1]] = pair[2];
    samples.push({ name: match[1], labels, value: Number(match[3]) });
  }
  return samples;
}

function total(samples, name) {
  const found = samples.filter((s) => s.name === name);
  return found.length ? found.reduce((sum, s) => sum + s.value, 0) : null;
}

function shown(value, digits = 0) {
  return value === null || value === undefined || Number.isNaN(value) ? "–" : value.toFixed(digits);
}

function fillTable(id, rows) {
  const body = $(id).tBodies[0];
  body.replaceChildren(...rows.map((cells) => {
    const row = el("tr");
    for (const cell of cells) row.append(cell instanceof Node ? cell : el("td", null, String(cell)));
    return row;
  }));
}

function slotsOf(data) {
  // every loaded model's slots, each carrying its "model" (the several-models /slots shape)
  return (data.slots || []).map((slot) => Object.assign({ model: "" }, slot));
}

function slotName(model, id) {
  return model ? `${model} #${id}` : String(id);
}

// A slot's state: what its job is doing (prefilling, decoding) or "idle"; a server that does not
// report the job still says "busy".
function stateCell(busy, job) {
  const state = job ? job.status : busy ? "busy" : "idle";
  return el("td", busy ? "busy" : "idle", state);
}

// What a job is: its request, its prompt tokens processed of all, its tokens generated.
// what the model's file says of it (/v1/models' details, there for unloaded models too)
function modelDetails(details) {
  if (!details) return ["–", "–", "–"];
  return [details.architecture || "–", details.parameter_size || "–", details.quantization || "–"];
}

function jobCells(job) {
  if (!job) return ["–", "–", "–"];
  const share = job.prompt_tokens ? ` (${((100 * job.prompt_processed) / job.prompt_tokens).toFixed(0)} %)` : "";
  return [job.request || "–", `${job.prompt_processed} / ${job.prompt_tokens}${share}`, job.generated_tokens];
}

export async function refreshStatus() {
  clearTimeout(statusTimer);
  try {
    const [slots, metricsText, models] = await Promise.all([getJSON("/slots"), getText("/metrics"),
      getJSON("/v1/models")]);
    const samples = parseMetrics(metricsText);
    const slotList = slotsOf(slots);
    const busyCount = slotList.filter((s) => s.busy).length;
    $("busy-slots").textContent = `${busyCount} / ${slotList.length}`;
    $("queue-depth").textContent = shown(slots.queue_depth ?? total(samples, "localserve_queue_depth"));
    $("open-connections").textContent = shown(total(samples, "localserve_open_connections"));
    $("cache-hits").textContent = shown(total(samples, "localserve_prompt_cache_hits_total"));
    const prompt = total(samples, "localserve_prompt_tokens_total");
    const cached = total(samples, "localserve_cached_prompt_tokens_total");
    $("cached-share").textContent = prompt ? `${((100 * cached) / prompt).toFixed(0)} %` : "–";
    const rateSum = total(samples, "localserve_decode_tokens_per_second_sum");
    const rateCount = total(samples, "localserve_decode_tokens_per_second_count");
    $("mean-speed").textContent = rateCount ? `${(rateSum / rateCount).toFixed(1)} tok/s` : "–";
    noteRecentSpeed(rateSum, rateCount);
    fillTable("models-table", (models.data || []).map((m) => [m.id, m.state || "loaded",
      ...modelDetails(m.details), m.meta && m.meta.n_ctx ? m.meta.n_ctx : "–",
      m.meta && m.meta.slots ? m.meta.slots : "–", m.source || "–"]));
    fillTable("slots-table", slotList.map((s) => [slotName(s.model, s.id), stateCell(s.busy, s.job),
      ...jobCells(s.job), s.cached_tokens ?? "–"]));
    const parked = (slots.parked || []).map((p) => Object.assign({ model: "" }, p));
    fillTable("parked-table", parked.map((p) => [slotName(p.model, p.slot), stateCell(true, p),
      ...jobCells(p), p.cached_tokens ?? "–"]));
    $("parked-table").hidden = parked.length === 0;
    $("no-parked").hidden = parked.length > 0;
    const reasons = samples.filter((s) => s.name === "localserve_generations_total");
    $("finish-reasons").replaceChildren(...reasons.map((s) =>
      el("li", null, `${s.labels.finish_reason || "?"}: ${s.value}`)));
    $("raw-slots").textContent = JSON.stringify(slots, null, 2);
    $("status-updated").textContent = `Last refreshed ${new Date().toLocaleTimeString()}.`;
    clearNotice();
  } catch (error) {
    showNotice(`Could not read the status: ${describe(error)}`);
  }
  if (!$("status-view").hidden) statusTimer = setTimeout(refreshStatus, STATUS_REFRESH_MS);
}

function noteRecentSpeed(sum, count) {
  if (sum === null || count === null) return;
  if (lastRates && count > lastRates.count) {
    const finished = count - lastRates.count;
    const speed = (sum - lastRates.sum) / finished;
    recentSpeeds.unshift(`${new Date().toLocaleTimeString()}: ${finished} generation${finished > 1 ? "s" : ""}, ` +
      `${speed.toFixed(1)} tokens/s`);
    recentSpeeds.length = Math.min(recentSpeeds.length, RECENT_SPEEDS);
  }
  lastRates = { sum, count };
  $("recent-speeds").replaceChildren(...(recentSpeeds.length ? recentSpeeds : ["none since this page opened"])
    .map((line) => el("li", null, line)));
}


export function stopStatus() {
  clearTimeout(statusTimer);
}
