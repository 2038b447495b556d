// How one message looks. Answer text is text: fenced code blocks become <pre><code>, the rest
// plain text, and both are filled through el(), so no character a model writes is markup.

import { el } from "./dom.js";

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

export function renderMessage(message) {
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

