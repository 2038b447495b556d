// localserve's built-in chat and status page. Plain JavaScript, no framework, no build step.
//
// Model text is never HTML: every string the server sends (answers, reasoning, tool calls,
// model names, error messages) reaches the page through textContent, and the only markup
// made from an answer is <pre><code> around fenced code blocks, filled with textContent too.
// Everything the page asks for is same-origin and relative, so the Host check and the
// Content-Security-Policy (scripts and requests of this origin only, no eval) both hold.
"use strict";

const STORE = {
  key: "localserve.apiKey",
  conversations: "localserve.conversations",
  current: "localserve.currentConversation",
  settings: "localserve.settings",
};
const STATUS_REFRESH_MS = 2000;
const MODELS_RETRY_MS = 2000;
const RECENT_SPEEDS = 10;
const TITLE_CHARS = 40;

const $ = (id) => document.getElementById(id);

// ---- small DOM helper: strings always become text nodes ----------------------------------

function el(tag, className, ...children) {
  const node = document.createElement(tag);
  if (className) node.className = className;
  for (const child of children) {
    if (child === null || child === undefined) continue;
    node.append(typeof child === "string" ? document.createTextNode(child) : child);
  }
  return node;
}

// ---- storage -----------------------------------------------------------------------------

function load(name, fallback) {
  try {
    const raw = localStorage.getItem(name);
    return raw === null ? fallback : JSON.parse(raw);
  } catch (e) {
    return fallback;
  }
}

function save(name, value) {
  try {
    localStorage.setItem(name, JSON.stringify(value));
  } catch (e) {
    showNotice(`Could not save in this browser's storage: ${e.message}`);
  }
}

// ---- notices and errors ------------------------------------------------------------------

function showNotice(text) {
  const notice = $("notice");
  notice.textContent = text;
  notice.hidden = false;
}

function clearNotice() {
  $("notice").hidden = true;
  $("notice").textContent = "";
}

class ServerError extends Error {
  constructor(status, message) {
    super(message);
    this.status = status;
  }
}

// The error of a failed response, whatever dialect shape or text it carries.
async function errorOf(response) {
  let message = `${response.status} ${response.statusText}`.trim();
  try {
    const body = await response.json();
    const detail = body && body.error && (body.error.message || body.error.type);
    if (detail) message = `${response.status}: ${detail}`;
  } catch (e) { /* not JSON: the status line says enough */ }
  return new ServerError(response.status, message);
}

function describe(error) {
  if (error instanceof ServerError) {
    if (error.status === 401) return `${error.message}\nEnter the server's API key under Settings.`;
    if (error.status === 503 || error.status === 429) return `${error.message}\nThe server is busy: try again shortly.`;
    return error.message;
  }
  if (error instanceof TypeError) return `Cannot reach the server: ${error.message}`;
  return String(error && error.message || error);
}

// ---- talking to the server ---------------------------------------------------------------

function authHeaders(extra) {
  const headers = Object.assign({}, extra);
  const key = load(STORE.key, "");
  if (key) headers.Authorization = `Bearer ${key}`;
  return headers;
}

async function getJSON(path) {
  const response = await fetch(path, { headers: authHeaders(), cache: "no-store" });
  if (!response.ok) throw await errorOf(response);
  return response.json();
}

async function getText(path) {
  const response = await fetch(path, { headers: authHeaders(), cache: "no-store" });
  if (!response.ok) throw await errorOf(response);
  return response.text();
}

// Calls onData with each `data:` payload of a text/event-stream body, parsed as JSON, until
// [DONE] or the end of the body. Comments (": prefill" keepalives) are skipped.
async function readEvents(body, onData) {
  const reader = body.getReader();
  const decoder = new TextDecoder();
  let buffer = "";
  for (;;) {
    const { value, done } = await reader.read();
    buffer += decoder.decode(value || new Uint8Array(), { stream: !done });
    buffer = buffer.replace(/\r\n?/g, "\n");
    let end;
    while ((end = buffer.indexOf("\n\n")) >= 0) {
      const block = buffer.slice(0, end);
      buffer = buffer.slice(end + 2);
      const data = block.split("\n").filter((l) => l.startsWith("data:"))
        .map((l) => l.slice(5).replace(/^ /, "")).join("\n");
      if (!data) continue;
      if (data === "[DONE]") return;
      onData(JSON.parse(data));
    }
    if (done) return;
  }
}

// ---- models ------------------------------------------------------------------------------

let modelsTimer = null;

async function loadModels() {
  clearTimeout(modelsTimer);
  const select = $("model");
  try {
    const list = await getJSON("/v1/models");
    const wanted = select.value || settings.model;
    select.replaceChildren();
    for (const model of list.data || []) {
      const label = model.state ? `${model.id} (${model.state})` : model.id;
      const option = el("option", null, label);
      option.value = model.id;
      select.append(option);
    }
    if ([...select.options].some((o) => o.value === wanted)) select.value = wanted;
    clearNotice();
    return list.data || [];
  } catch (error) {
    showNotice(`Could not list the models: ${describe(error)}`);
    if (error instanceof ServerError && error.status === 401) openSettings($("api-key"));
    else modelsTimer = setTimeout(loadModels, MODELS_RETRY_MS);
    return [];
  }
}

// ---- settings ----------------------------------------------------------------------------

const settings = Object.assign({ system: "", temperature: "0.8", maxTokens: "512", extra: "", model: "" },
  load(STORE.settings, {}));

function restoreSettings() {
  $("system-prompt").value = settings.system;
  $("temperature").value = settings.temperature;
  $("max-tokens").value = settings.maxTokens;
  $("extra-fields").value = settings.extra;
  $("api-key").value = load(STORE.key, "");
}

function keepSettings() {
  settings.system = $("system-prompt").value;
  settings.temperature = $("temperature").value;
  settings.maxTokens = $("max-tokens").value;
  settings.extra = $("extra-fields").value;
  settings.model = $("model").value;
  save(STORE.settings, settings);
}

function openSettings(focus) {
  $("settings").hidden = false;
  $("toggle-settings").setAttribute("aria-expanded", "true");
  if (focus) focus.focus();
}

function useKey() {
  save(STORE.key, $("api-key").value.trim());
  loadModels();
  if (!$("status-view").hidden) refreshStatus();
}

// The request body from the settings; throws a readable Error for a bad field.
function requestBody(messages) {
  const body = { model: $("model").value || undefined, messages };
  const temperature = $("temperature").value.trim();
  if (temperature !== "") {
    body.temperature = Number(temperature);
    if (!Number.isFinite(body.temperature)) throw new Error("Temperature must be a number.");
  }
  const maxTokens = $("max-tokens").value.trim();
  if (maxTokens !== "") {
    body.max_tokens = Number(maxTokens);
    if (!Number.isInteger(body.max_tokens)) throw new Error("Max tokens must be a whole number.");
  }
  const extra = $("extra-fields").value.trim();
  if (extra) {
    let fields;
    try {
      fields = JSON.parse(extra);
    } catch (e) {
      throw new Error(`Extra request fields are not valid JSON: ${e.message}`);
    }
    if (!fields || typeof fields !== "object" || Array.isArray(fields)) {
      throw new Error("Extra request fields must be a JSON object.");
    }
    Object.assign(body, fields);
  }
  body.stream = true;   // the page reads a stream whatever the extra fields say
  body.stream_options = Object.assign({}, body.stream_options, { include_usage: true });
  return body;
}

// ---- conversations -----------------------------------------------------------------------

let conversations = load(STORE.conversations, []);
let current = null;

function newId() {
  return `${Date.now().toString(36)}-${Math.random().toString(36).slice(2, 8)}`;
}

function saveConversations() {
  save(STORE.conversations, conversations);
  save(STORE.current, current ? current.id : null);
}

function startConversation() {
  current = { id: newId(), title: "New chat", messages: [] };
  conversations.unshift(current);
  saveConversations();
  renderConversations();
  renderMessages();
}

function openConversation(id) {
  current = conversations.find((c) => c.id === id) || null;
  if (!current) return startConversation();
  saveConversations();
  renderConversations();
  renderMessages();
  $("chat-view").classList.remove("show-chats");
}

function deleteConversation(id) {
  if (busy && current && current.id === id) stop();
  conversations = conversations.filter((c) => c.id !== id);
  if (!current || current.id === id) {
    current = conversations[0] || null;
    if (!current) return startConversation();
  }
  saveConversations();
  renderConversations();
  renderMessages();
}

function renderConversations() {
  const list = $("conversations");
  list.replaceChildren();
  for (const conversation of conversations) {
    const open = el("button", "open", conversation.title);
    open.type = "button";
    open.title = conversation.title;
    open.addEventListener("click", () => openConversation(conversation.id));
    const remove = el("button", "delete", "×");
    remove.type = "button";
    remove.setAttribute("aria-label", `Delete conversation ${conversation.title}`);
    remove.addEventListener("click", () => deleteConversation(conversation.id));
    const item = el("li", conversation === current ? "current" : null, open, remove);
    list.append(item);
  }
}

// What the server is sent of a conversation: the system prompt, then each turn that has text.
// A question whose answer failed is left out: one too long for the context would fail every
// later turn too.
function apiMessages(conversation) {
  const messages = [];
  const system = $("system-prompt").value;
  if (system.trim()) messages.push({ role: "system", content: system });
  conversation.messages.forEach((message, i) => {
    const answer = conversation.messages[i + 1];
    if (message.role === "user" && !(answer && answer.error && !answer.content)) {
      messages.push({ role: "user", content: message.content });
    } else if (message.role === "assistant" && message.content) {
      messages.push({ role: "assistant", content: message.content });
    }
  });
  return messages;
}

// ---- rendering messages ------------------------------------------------------------------

// Answer text as nodes: fenced code blocks become <pre><code>, the rest plain text. Both are
// filled with textContent, so no character the model writes is ever read as markup.
function renderText(text) {
  const nodes = [];
  const fence = /```([^\n`]*)\n([\s\S]*?)(?:\n?```|$)/g;
  let last = 0;
  for (const match of text.matchAll(fence)) {
    if (match.index > last) nodes.push(el("div", "text", text.slice(last, match.index)));
    const code = el("code", null, match[2]);
    if (match[1].trim()) code.dataset.language = match[1].trim();
    nodes.push(el("pre", null, code));
    last = match.index + match[0].length;
  }
  if (last < text.length) nodes.push(el("div", "text", text.slice(last)));
  return nodes;
}

function renderMessage(message) {
  const node = el("div", `message ${message.role}`);
  node.append(el("div", "role", message.role === "user" ? "You" : "Assistant"));
  if (message.reasoning) {
    const details = el("details", "reasoning", el("summary", null, "Reasoning"),
      el("div", "text", message.reasoning));
    node.append(details);
  }
  const content = el("div", "content");
  content.append(...renderText(message.content || ""));
  node.append(content);
  for (const call of message.tool_calls || []) {
    if (!call) continue;
    node.append(el("div", "tool-call", el("span", "label", "Tool call "), el("span", "name", call.name || ""),
      el("pre", "arguments", call.arguments || "")));
  }
  if (message.error) node.append(el("div", "error", message.error));
  const meta = metaLine(message);
  if (meta) node.append(el("div", "meta", meta));
  return node;
}

function metaLine(message) {
  if (message.role !== "assistant") return "";
  const parts = [];
  const usage = message.usage;
  if (usage) {
    const cached = usage.prompt_tokens_details && usage.prompt_tokens_details.cached_tokens;
    parts.push(`${usage.prompt_tokens} prompt tokens${cached ? ` (${cached} cached)` : ""}`);
    parts.push(`${usage.completion_tokens} completion tokens`);
  }
  if (message.tokensPerSecond) parts.push(`${message.tokensPerSecond.toFixed(1)} tokens/s`);
  if (message.stopped) parts.push("stopped");
  else if (message.finish_reason && message.finish_reason !== "stop") parts.push(`finish: ${message.finish_reason}`);
  return parts.join(" · ");
}

function renderMessages() {
  const box = $("messages");
  box.replaceChildren(...(current ? current.messages.map(renderMessage) : []));
  box.scrollTop = box.scrollHeight;
}

// Redraws the last message (the one streaming) at most once a frame.
let redrawPending = false;
function redrawLast(now) {
  const box = $("messages");
  const draw = () => {
    redrawPending = false;
    const message = current && current.messages[current.messages.length - 1];
    if (!message || !box.lastChild) return;
    const stick = box.scrollHeight - box.scrollTop - box.clientHeight < 40;
    box.lastChild.replaceWith(renderMessage(message));
    if (stick) box.scrollTop = box.scrollHeight;
  };
  if (now) return draw();
  if (!redrawPending) {
    redrawPending = true;
    requestAnimationFrame(draw);
  }
}

// ---- sending -----------------------------------------------------------------------------

let busy = false;
let controller = null;

function setBusy(value) {
  busy = value;
  $("send").hidden = value;
  $("stop").hidden = !value;
  document.body.classList.toggle("busy", value);
}

function stop() {
  if (controller) controller.abort();
}

function applyChunk(reply, chunk) {
  if (chunk.error) throw new ServerError(0, chunk.error.message || "the server failed");   // in-band, after a 200
  if (chunk.usage) reply.usage = chunk.usage;
  for (const choice of chunk.choices || []) {
    const delta = choice.delta || {};
    if (typeof delta.content === "string" || typeof delta.reasoning_content === "string" || delta.tool_calls) {
      reply.firstTokenAt = reply.firstTokenAt || performance.now();
    }
    if (typeof delta.content === "string") reply.content += delta.content;
    if (typeof delta.reasoning_content === "string") reply.reasoning += delta.reasoning_content;
    for (const call of delta.tool_calls || []) {
      const slot = reply.tool_calls[call.index] || (reply.tool_calls[call.index] = { name: "", arguments: "" });
      if (call.id) slot.id = call.id;
      if (call.function && call.function.name) slot.name += call.function.name;
      if (call.function && call.function.arguments) slot.arguments += call.function.arguments;
    }
    if (choice.finish_reason) reply.finish_reason = choice.finish_reason;
  }
}

async function send() {
  const text = $("prompt").value;
  if (busy || !text.trim()) return;
  if (!current) startConversation();
  const conversation = current;
  let body;
  try {
    body = requestBody(apiMessages({ messages: conversation.messages.concat([{ role: "user", content: text }]) }));
  } catch (error) {
    showNotice(error.message);
    return;
  }
  keepSettings();
  clearNotice();
  $("prompt").value = "";
  if (!conversation.messages.length) conversation.title = text.trim().slice(0, TITLE_CHARS);
  conversation.messages.push({ role: "user", content: text });
  const reply = { role: "assistant", content: "", reasoning: "", tool_calls: [] };
  conversation.messages.push(reply);
  saveConversations();
  renderConversations();
  renderMessages();
  setBusy(true);
  controller = new AbortController();
  try {
    const response = await fetch("/v1/chat/completions", {
      method: "POST", body: JSON.stringify(body), signal: controller.signal,
      headers: authHeaders({ "Content-Type": "application/json" }),
    });
    if (!response.ok) throw await errorOf(response);
    await readEvents(response.body, (chunk) => {
      applyChunk(reply, chunk);
      if (conversation === current) redrawLast(false);
    });
    const seconds = (performance.now() - (reply.firstTokenAt || performance.now())) / 1000;
    const decoded = reply.usage ? reply.usage.completion_tokens - 1 : 0;
    if (decoded > 0 && seconds > 0) reply.tokensPerSecond = decoded / seconds;
  } catch (error) {
    if (error.name === "AbortError") reply.stopped = true;
    else reply.error = describe(error);
  } finally {
    delete reply.firstTokenAt;
    controller = null;
    setBusy(false);
    saveConversations();
    if (conversation === current) redrawLast(true);
    $("messages").dataset.finished = String(Number($("messages").dataset.finished || 0) + 1);
  }
}

// ---- status view -------------------------------------------------------------------------

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
  if (Array.isArray(data.slots)) return data.slots.map((slot) => Object.assign({ model: "" }, slot));
  // several models: {"models": [{"id", "slots": [...]}, ...]}
  return (data.models || []).flatMap((m) => (m.slots || []).map((slot) => Object.assign({ model: m.id }, slot)));
}

async function refreshStatus() {
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
      m.meta && m.meta.n_ctx ? m.meta.n_ctx : "–", m.meta && m.meta.slots ? m.meta.slots : "–"]));
    fillTable("slots-table", slotList.map((s) => [
      s.model ? `${s.model} #${s.id}` : String(s.id),
      el("td", s.busy ? "busy" : "idle", s.busy ? "busy" : "idle"), s.cached_tokens ?? "–"]));
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

// ---- views and keys ----------------------------------------------------------------------

function showView(name) {
  const status = name === "status";
  $("chat-view").hidden = status;
  $("status-view").hidden = !status;
  $("tab-chat").setAttribute("aria-selected", String(!status));
  $("tab-status").setAttribute("aria-selected", String(status));
  if (status) refreshStatus();
  else clearTimeout(statusTimer);
}

function start() {
  restoreSettings();
  $("tab-chat").addEventListener("click", () => showView("chat"));
  $("tab-status").addEventListener("click", () => showView("status"));
  $("toggle-settings").addEventListener("click", () => {
    const open = $("settings").hidden;
    $("settings").hidden = !open;
    $("toggle-settings").setAttribute("aria-expanded", String(open));
  });
  $("toggle-chats").addEventListener("click", () => {
    const open = $("chat-view").classList.toggle("show-chats");
    $("toggle-chats").setAttribute("aria-expanded", String(open));
  });
  $("save-key").addEventListener("click", useKey);
  $("api-key").addEventListener("keydown", (event) => {
    if (event.key === "Enter") {
      event.preventDefault();
      useKey();
    }
  });
  $("settings").addEventListener("submit", (event) => event.preventDefault());
  $("settings").addEventListener("change", keepSettings);
  $("model").addEventListener("change", keepSettings);
  $("new-chat").addEventListener("click", startConversation);
  $("composer").addEventListener("submit", (event) => {
    event.preventDefault();
    send();
  });
  $("stop").addEventListener("click", stop);
  $("prompt").addEventListener("keydown", (event) => {
    if (event.key === "Enter" && !event.shiftKey && !event.isComposing) {
      event.preventDefault();
      send();
    }
  });
  document.addEventListener("keydown", (event) => {
    if (event.key === "Escape" && busy) {
      event.preventDefault();
      stop();
    }
  });
  const currentId = load(STORE.current, null);
  current = conversations.find((c) => c.id === currentId) || conversations[0] || null;
  if (!current) startConversation();
  renderConversations();
  renderMessages();
  loadModels();
  $("prompt").focus();
}

document.addEventListener("DOMContentLoaded", start);
