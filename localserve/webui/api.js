// Talking to the server: the key, errors as readable text, JSON and event-stream bodies.
// Every path is relative: the page talks to its own origin only (no CORS, the Host check holds).

import { STORE, load } from "./dom.js";

export class ServerError extends Error {
  constructor(status, message) {
    super(message);
    this.status = status;
  }
}

// The error of a failed response, whatever dialect shape or text it carries.
export async function errorOf(response) {
  let message = `${response.status} ${response.statusText}`.trim();
  try {
    const body = await response.json();
    const detail = body && body.error && (body.error.message || body.error.type);
    if (detail) message = `${response.status}: ${detail}`;
  } catch (e) { /* not JSON: the status line says enough */ }
  return new ServerError(response.status, message);
}

export function describe(error) {
  if (error instanceof ServerError) {
    if (error.status === 401) return `${error.message}\nEnter the server's API key under Settings.`;
    return error.message;
  }
  if (error instanceof TypeError) return `Cannot reach the server: ${error.message}`;
  return String(error && error.message || error);
}

// ---- talking to the server ---------------------------------------------------------------

export function authHeaders(extra) {
  const headers = Object.assign({}, extra);
  const key = load(STORE.key, "");
  if (key) headers.Authorization = `Bearer ${key}`;
  return headers;
}

export async function getJSON(path) {
  const response = await fetch(path, { headers: authHeaders(), cache: "no-store" });
  if (!response.ok) throw await errorOf(response);
  return response.json();
}

export async function getText(path) {
  const response = await fetch(path, { headers: authHeaders(), cache: "no-store" });
  if (!response.ok) throw await errorOf(response);
  return response.text();
}

// Calls onData with each `data:` payload of a text/event-stream body, parsed as JSON, until
// [DONE] or the end of the body. Comments (": prefill" keepalives) are skipped. The body is
// let go of however this ends (onData may throw: an error event in the stream).
export async function readEvents(body, onData) {
  const reader = body.getReader();
  const decoder = new TextDecoder();
  let buffer = "";
  try {
    for (;;) {
      const { value, done } = await reader.read();
      buffer += decoder.decode(value || new Uint8Array(), { stream: !done });
      buffer = buffer.replace(/\r\n|\r(?!$)/g, "\n");   // a \r last may be half of a \r\n
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
  } finally {
    reader.cancel().catch(() => {});
  }
}
