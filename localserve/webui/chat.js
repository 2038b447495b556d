// The chat view: models, settings, conversations (kept in localStorage), and sending a
// question with its answer streamed from /v1/chat/completions.

import { $, STORE, el, load, save, clearNotice, showNotice } from "./dom.js";
import { ServerError, authHeaders, describe, errorOf, getJSON, readEvents } from "./api.js";
import { renderMessage } from "./messages.js";

const MODELS_RETRY_MS = 2000;
const TITLE_CHARS = 40;

// ---- models ------------------------------------------------------------------------------

let modelsTimer = null;

export async function loadModels() {
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

export function restoreSettings() {
  $("system-prompt").value = settings.system;
  $("temperature").value = settings.temperature;
  $("max-tokens").value = settings.maxTokens;
  $("extra-fields").value = settings.extra;
  $("api-key").value = load(STORE.key, "");
}

export function keepSettings() {
  settings.system = $("system-prompt").value;
  settings.temperature = $("temperature").value;
  settings.maxTokens = $("max-tokens").value;
  settings.extra = $("extra-fields").value;
  settings.model = $("model").value;
  save(STORE.settings, settings);
}

export function openSettings(focus) {
  $("settings").hidden = false;
  $("toggle-settings").setAttribute("aria-expanded", "true");
  if (focus) focus.focus();
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

export function startConversation() {
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

// The conversation open when the page was last left, else the newest, else a new one.
export function restoreConversations() {
  const currentId = load(STORE.current, null);
  current = conversations.find((c) => c.id === currentId) || conversations[0] || null;
  if (!current) return startConversation();
  renderConversations();
  renderMessages();
}

export function renderConversations() {
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

// ---- the message list ----------------------------------------------------------------------

export function renderMessages() {
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

export function isBusy() {
  return busy;
}

function setBusy(value) {
  busy = value;
  $("send").hidden = value;
  $("stop").hidden = !value;
  document.body.classList.toggle("busy", value);
}

export function stop() {
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

export async function send() {
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
    // answers ended so far, for whoever waits for one (the browser tests do)
    $("messages").dataset.finished = String(Number($("messages").dataset.finished || 0) + 1);
  }
}

