// Shared by the page's modules: the DOM helper, the browser's storage, the notice line.
//
// Model text is never HTML: every string the server sends (answers, reasoning, tool calls,
// model names, error messages) reaches the page through el(), which makes strings text nodes.

export const STORE = {
  key: "localserve.apiKey",
  conversations: "localserve.conversations",
  current: "localserve.currentConversation",
  settings: "localserve.settings",
};

export const $ = (id) => document.getElementById(id);

// ---- small DOM helper: strings always become text nodes ----------------------------------

export function el(tag, className, ...children) {
  const node = document.createElement(tag);
  if (className) node.className = className;
  for (const child of children) {
    if (child === null || child === undefined) continue;
    node.append(typeof child === "string" ? document.createTextNode(child) : child);
  }
  return node;
}

// ---- storage -----------------------------------------------------------------------------

export function load(name, fallback) {
  try {
    const raw = localStorage.getItem(name);
    return raw === null ? fallback : JSON.parse(raw);
  } catch (e) {
    return fallback;
  }
}

export function save(name, value) {
  try {
    localStorage.setItem(name, JSON.stringify(value));
  } catch (e) {
    showNotice(`Could not save in this browser's storage: ${e.message}`);
  }
}

// ---- the notice line under the bar ------------------------------------------------------

export function showNotice(text) {
  const notice = $("notice");
  notice.textContent = text;
  notice.hidden = false;
}

export function clearNotice() {
  $("notice").hidden = true;
  $("notice").textContent = "";
}

