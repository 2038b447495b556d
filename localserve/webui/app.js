// localserve's built-in chat and status page: plain JavaScript modules, no framework, no
// build step, nothing from elsewhere. This one wires the page up; chat.js and status.js hold
// the two views, messages.js how a message looks, api.js the talking, dom.js the rest.
//
// Everything the page asks for is same-origin and relative, so the Host check and the
// Content-Security-Policy (scripts and requests of this origin only, no eval) both hold.

import { $, STORE, save } from "./dom.js";
import {
  isBusy, keepSettings, loadModels, restoreConversations, restoreSettings, send, startConversation, stop,
} from "./chat.js";
import { refreshStatus, stopStatus } from "./status.js";

function showView(name) {
  const status = name === "status";
  $("chat-view").hidden = status;
  $("status-view").hidden = !status;
  $("tab-chat").setAttribute("aria-selected", String(!status));
  $("tab-status").setAttribute("aria-selected", String(status));
  if (status) refreshStatus();
  else stopStatus();
}

function useKey() {
  save(STORE.key, $("api-key").value.trim());
  loadModels();
  if (!$("status-view").hidden) refreshStatus();
}

function toggle(button, open, target) {
  button.setAttribute("aria-expanded", String(open));
  if (target) target.hidden = !open;
}

function start() {
  restoreSettings();
  $("tab-chat").addEventListener("click", () => showView("chat"));
  $("tab-status").addEventListener("click", () => showView("status"));
  $("toggle-settings").addEventListener("click", () =>
    toggle($("toggle-settings"), $("settings").hidden, $("settings")));
  $("toggle-chats").addEventListener("click", () =>
    toggle($("toggle-chats"), $("chat-view").classList.toggle("show-chats")));
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
  // Enter sends, Shift+Enter is a new line (the textarea's own), Esc stops from anywhere
  $("prompt").addEventListener("keydown", (event) => {
    if (event.key === "Enter" && !event.shiftKey && !event.isComposing) {
      event.preventDefault();
      send();
    }
  });
  document.addEventListener("keydown", (event) => {
    if (event.key === "Escape" && isBusy()) {
      event.preventDefault();
      stop();
    }
  });
  restoreConversations();
  loadModels();
  $("prompt").focus();
}

start();   // a module runs once the document is parsed
