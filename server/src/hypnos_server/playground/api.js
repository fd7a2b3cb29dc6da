// The playground's HTTP client: the API key kept in sessionStorage, the spec's error bodies, SSE parsing, DOM helpers.

const KEY_STORE = "hypnos.apiKey";

export function getKey() {
  return sessionStorage.getItem(KEY_STORE) || "";
}

export function setKey(value) {
  if (value) sessionStorage.setItem(KEY_STORE, value);
  else sessionStorage.removeItem(KEY_STORE);
}

// An error response: the spec's {"error": {"message", "type"}} body, or the plain text of a 408 / 413.
export class ApiError extends Error {
  constructor(status, type, message, code) {
    super(message);
    this.status = status;
    this.type = type;
    this.code = code;
  }
}

export async function errorOf(response) {
  const text = await response.text();
  try {
    const error = JSON.parse(text).error;
    if (error && error.message) return new ApiError(response.status, error.type, error.message, error.code);
  } catch (_) {
    // not JSON: the body-limit and timeout layers answer plain text
  }
  return new ApiError(response.status, null, text.trim() || response.statusText);
}

// fetch with the key; throws ApiError for a non-2xx answer (401 also tells the page to ask for a key).
export async function call(path, { method = "GET", json, form, headers = {}, signal } = {}) {
  const sent = { ...headers };
  const key = getKey();
  if (key) sent.Authorization = `Bearer ${key}`;
  let body;
  if (json !== undefined) {
    sent["Content-Type"] = "application/json";
    body = JSON.stringify(json);
  } else if (form) {
    body = form;
  }
  const response = await fetch(path, { method, headers: sent, body, signal });
  if (!response.ok) {
    const error = await errorOf(response);
    if (response.status === 401) window.dispatchEvent(new CustomEvent("hypnos:unauthorized", { detail: error }));
    throw error;
  }
  if (method !== "GET") window.dispatchEvent(new CustomEvent("hypnos:answered", { detail: path }));
  return response;
}

export async function getJson(path, options) {
  return (await call(path, options)).json();
}

// The JSON payload of every `data:` event of a text/event-stream body, up to `data: [DONE]`.
export async function* sse(response) {
  const reader = response.body.pipeThrough(new TextDecoderStream()).getReader();
  let buffer = "";
  let data = [];
  for (;;) {
    const { value, done } = await reader.read();
    if (done) break;
    buffer += value;
    let newline;
    while ((newline = buffer.indexOf("\n")) >= 0) {
      const line = buffer.slice(0, newline).replace(/\r$/, "");
      buffer = buffer.slice(newline + 1);
      if (line === "") {
        if (data.length) {
          const payload = data.join("\n");
          data = [];
          if (payload === "[DONE]") return;
          yield JSON.parse(payload);
        }
      } else if (line.startsWith("data:")) {
        data.push(line.slice(5).replace(/^ /, ""));
      }
    }
  }
}

// A small element builder: el("div", {class: "x", onclick}, child, "text", ...); never inline handlers or styles.
export function el(tag, attrs = {}, ...children) {
  const node = document.createElement(tag);
  for (const [name, value] of Object.entries(attrs)) {
    if (value === undefined || value === null || value === false) continue;
    if (name.startsWith("on")) node.addEventListener(name.slice(2), value);
    else if (name === "text") node.textContent = value;
    else if (name === "style") node.style.cssText = value; // CSSOM, not the attribute: the CSP allows no inline style
    else node.setAttribute(name, value === true ? "" : value);
  }
  for (const child of children.flat()) {
    if (child === null || child === undefined || child === false) continue;
    node.append(child instanceof Node ? child : document.createTextNode(String(child)));
  }
  return node;
}

export function bytes(value) {
  if (value === null || value === undefined) return "–";
  const units = ["B", "KiB", "MiB", "GiB", "TiB"];
  let amount = value;
  let unit = 0;
  while (Math.abs(amount) >= 1024 && unit < units.length - 1) {
    amount /= 1024;
    unit += 1;
  }
  return `${amount.toFixed(unit === 0 ? 0 : amount < 10 ? 2 : 1)} ${units[unit]}`;
}

export function ms(value) {
  if (value === null || value === undefined) return "–";
  return value >= 1000 ? `${(value / 1000).toFixed(2)} s` : `${value.toFixed(value < 10 ? 1 : 0)} ms`;
}

// Shows an error in an `.error` box as the server wrote it: status, type, then the spec's message.
export function showError(box, error) {
  box.hidden = false;
  box.replaceChildren(
    el("span", { class: "error-head" }, error.status ? `${error.status} ${error.type || ""}`.trim() : "error"),
    el("span", { class: "error-message" }, error.message),
  );
}

export function clearError(box) {
  box.hidden = true;
  box.replaceChildren();
}

// One line of hypnos_telemetry (section 5): where the model was, how long the switch and the inference took.
export function telemetryLine(telemetry) {
  if (!telemetry) return "";
  const parts = [];
  if (telemetry.previous_tier) parts.push(`from ${tierName(telemetry.previous_tier)}`);
  if (telemetry.tier_switch_latency_ms) parts.push(`switch ${ms(telemetry.tier_switch_latency_ms)}`);
  if (telemetry.inference_latency_ms !== undefined) parts.push(`inference ${ms(telemetry.inference_latency_ms)}`);
  const engine = telemetry.engine || {};
  if (engine.ttft_ms !== undefined) parts.push(`ttft ${ms(engine.ttft_ms)}`);
  if (engine.decode_tokens_per_s) parts.push(`${engine.decode_tokens_per_s.toFixed(1)} tok/s`);
  if (engine.cached_tokens) parts.push(`${engine.cached_tokens} cached`);
  if (engine.rtf !== undefined) parts.push(`rtf ${engine.rtf.toFixed(3)}`);
  if (engine.ms_per_page !== undefined) parts.push(`${ms(engine.ms_per_page)}/page`);
  if (telemetry.evicted_models && telemetry.evicted_models.length) parts.push(`evicted ${telemetry.evicted_models.join(", ")}`);
  return parts.join(" · ");
}

export const TIERS = ["tier1_gpu_vram", "tier2_pinned_ram", "tier3_nvme_ssd"];

export function tierName(tier) {
  return { tier1_gpu_vram: "Tier 1 (VRAM)", tier2_pinned_ram: "Tier 2 (RAM)", tier3_nvme_ssd: "Tier 3 (disk)" }[tier] || tier;
}

export const PALETTE = ["#4b5bd6", "#2e9d6a", "#d08a1c", "#c23b7a", "#1f93b8", "#8a55c9", "#b5a021", "#d0542c", "#5f7f2a", "#6b7385"];

export function randomId() {
  return Array.from(crypto.getRandomValues(new Uint8Array(8)), (b) => b.toString(16).padStart(2, "0")).join("");
}

// Save a Blob as a file named `filename` (the browser's download, no server round trip).
export function download(blob, filename) {
  const link = el("a", { href: URL.createObjectURL(blob), download: filename, hidden: true });
  document.body.append(link);
  link.click();
  link.remove();
  setTimeout(() => URL.revokeObjectURL(link.href), 60000);
}

// Put text on the clipboard (the async Clipboard API, or a selected textarea where that is missing).
export async function copyText(text) {
  if (navigator.clipboard?.writeText) {
    await navigator.clipboard.writeText(text);
    return;
  }
  const box = el("textarea", { readonly: true });
  box.value = text;
  document.body.append(box);
  box.select();
  const copied = document.execCommand("copy");
  box.remove();
  if (!copied) throw new Error("the browser refused to copy");
}
