// The tier visualizer (section 14): three tiers as bars against their budgets, each model's bytes, moves by hand,
// enable / disable, KV parking, and the request log with its telemetry (section 15). Live from polling.

import { PALETTE, TIERS, bytes, call, clearError, el, getJson, ms, showError, tierName } from "./api.js";

const $ = (id) => document.getElementById(id);
const SHORT = { tier1_gpu_vram: "T1", tier2_pinned_ram: "T2", tier3_nvme_ssd: "T3" };
const CONFIRM_MS = 4000;
const sleep = (delay) => new Promise((resolve) => setTimeout(resolve, delay));
const colours = new Map();

// A model's colour: its place in the lineup picks from a palette of distinct colours (stable while it runs).
function colourOf(id) {
  if (!colours.has(id)) colours.set(id, PALETTE[colours.size % PALETTE.length]);
  return colours.get(id);
}

function residentBytes(model) {
  const p = model.placement || {};
  if (model.current_tier === "tier1_gpu_vram") return (p.vram_weight_bytes || 0) + (p.vram_kv_and_workspace_bytes || 0);
  if (model.current_tier === "tier2_pinned_ram") return p.pinned_ram_bytes || model.total_weight_bytes;
  return model.total_weight_bytes;
}

function bar(tier, title, used, budget, segments, note) {
  const scale = Math.max(budget || 0, segments.reduce((sum, s) => sum + s.bytes, 0), 1);
  return el(
    "div",
    { class: "tier", "data-tier": tier },
    el("div", { class: "tier-head" }, el("b", {}, title), el("span", {}, note || `${bytes(used)} of ${bytes(budget)}`)),
    el(
      "div",
      { class: "bar" },
      segments.map((s) =>
        el(
          "div",
          {
            class: `seg${s.kind ? ` ${s.kind}` : ""}`,
            "data-model": s.id,
            style: `width:${(100 * s.bytes) / scale}%;--colour:${s.colour}`,
            title: `${s.id}: ${bytes(s.bytes)}`,
          },
          (100 * s.bytes) / scale > 12 ? s.id : "",
        ),
      ),
    ),
    el(
      "div",
      { class: "tier-legend" },
      segments.map((s) => el("span", {}, el("i", { style: `background:${s.colour}` }), `${s.id} ${bytes(s.bytes)}`)),
    ),
  );
}

function renderBars(status) {
  const caps = status.capabilities || {};
  const models = status.models || [];
  const segment = (model, value, kind) => ({ id: model.id, bytes: value, colour: colourOf(model.id), kind });
  const tier1 = models
    .map((m) => segment(m, (m.placement?.vram_weight_bytes || 0) + (m.placement?.vram_kv_and_workspace_bytes || 0)))
    .filter((s) => s.bytes > 0);
  if (status.tier1_vram_unaccounted_bytes > 0) {
    tier1.push({ id: "unaccounted", bytes: status.tier1_vram_unaccounted_bytes, colour: "#999", kind: "unaccounted" });
  }
  const tier2 = models.map((m) => segment(m, m.placement?.pinned_ram_bytes || 0)).filter((s) => s.bytes > 0);
  const onDisk = models.filter((m) => m.current_tier === "tier3_nvme_ssd");
  const tier3 = onDisk.map((m) => segment(m, m.total_weight_bytes, m.enabled ? "" : "disabled"));
  const lineup = models.reduce((sum, m) => sum + m.total_weight_bytes, 0);
  $("tier-bars").replaceChildren(
    bar("tier1_gpu_vram", tierName("tier1_gpu_vram"), status.tier1_vram_used_bytes, caps.usable_vram_budget_bytes, tier1,
      `${bytes(status.tier1_vram_used_bytes)} of ${bytes(caps.usable_vram_budget_bytes)} · ${bytes(status.tier1_vram_effective_free_bytes)} free now`),
    bar("tier2_pinned_ram", tierName("tier2_pinned_ram"), status.tier2_pinned_ram_used_bytes, caps.pinned_ram_budget_bytes, tier2),
    bar("tier3_nvme_ssd", tierName("tier3_nvme_ssd"), null, lineup, tier3, `${onDisk.length} model${onDisk.length === 1 ? "" : "s"}, ${bytes(tier3.reduce((s, x) => s + x.bytes, 0))} of the lineup's ${bytes(lineup)}`),
  );
  const simulated = caps.simulated && !/simulated/i.test(caps.device_name || "") ? " (simulated)" : "";
  const gpu = status.gpu;
  const load = gpu ? ` · ${gpu.utilization_percent}% busy, ${gpu.temperature_celsius} °C${gpu.throttled ? ", throttled" : ""}` : "";
  const profile = status.profile ? ` · profile ${status.profile.name}` : "";
  $("tiers-device").textContent = `${caps.device_name || caps.accelerator || ""}${simulated}${load}${profile}`;
}

export function startTiers({ onStatus }) {
  const rows = new Map();
  const lastSeen = new Map();
  const tiers = new Map();
  const pending = new Set();
  let kvDirty = false;

  // Disable asks first: the first click arms the button ("Really disable?") for a few seconds, a second one acts.
  const armed = new Map();
  function toggled(model, node) {
    const path = `/v1/models/${encodeURIComponent(model)}`;
    if (node.dataset.enabled !== "true") return act(model, `${path}/enable`);
    if ((armed.get(model) || 0) > Date.now()) {
      armed.delete(model);
      return act(model, `${path}/disable`);
    }
    armed.set(model, Date.now() + CONFIRM_MS);
    row(lastSeen.get(model));
    setTimeout(() => lastSeen.has(model) && row(lastSeen.get(model)), CONFIRM_MS + 50);
    return null;
  }

  async function act(model, path, json) {
    clearError($("tiers-error"));
    pending.add(model);
    refresh();
    try {
      await call(path, { method: "POST", json });
    } catch (error) {
      showError($("tiers-error"), error);
    } finally {
      pending.delete(model);
      refresh();
    }
  }

  function row(model) {
    let node = rows.get(model.id);
    if (!node) {
      const moves = TIERS.map((tier) =>
        el("button", { type: "button", class: "small move", "data-target": tier, title: `Move to ${tierName(tier)}`, onclick: () => act(model.id, "/v1/memory/tier", { model: model.id, target_tier: tier }) }, `→${SHORT[tier]}`),
      );
      const toggle = el("button", { type: "button", class: "small secondary toggle", onclick: () => toggled(model.id, node) });
      node = el(
        "tr",
        { "data-model": model.id },
        el("td", {}, el("span", { class: "dot", style: `background:${colourOf(model.id)}` }), el("b", {}, model.id), el("div", { class: "muted small-text" }, model.modalities.join(", ")), el("div", { class: "reason", hidden: true })),
        el("td", { class: "tier-cell" }),
        el("td", { class: "bytes-cell" }),
        el("td", { class: "busy-cell" }),
        el("td", { class: "served-cell" }),
        el("td", { class: "actions" }, moves, toggle),
      );
      // the tier-change highlight plays once: without this the row, re-attached by every poll, flashed forever
      node.addEventListener("animationend", () => node.classList.remove("moved"));
      rows.set(model.id, node);
    }
    const busy = pending.has(model.id);
    node.dataset.tier = model.current_tier;
    node.dataset.enabled = String(model.enabled);
    node.classList.toggle("disabled", !model.enabled);
    // why the model cannot serve (its load failed, a file is missing): said in the row, not only when a request fails
    const reason = node.querySelector(".reason");
    reason.hidden = !model.unavailable_reason;
    reason.textContent = model.unavailable_reason || "";
    node.classList.toggle("failing", Boolean(model.unavailable_reason));
    node.querySelector(".tier-cell").replaceChildren(el("span", { class: `chip ${SHORT[model.current_tier]}` }, model.enabled ? SHORT[model.current_tier] : "off"));
    const p = model.placement || {};
    const split = p.gpu_layers && p.pinned_ram_layers ? ` (${p.gpu_layers}/${p.gpu_layers + p.pinned_ram_layers} layers on GPU)` : "";
    node.querySelector(".bytes-cell").textContent = `${bytes(residentBytes(model))}${split}`;
    node.querySelector(".busy-cell").textContent = busy ? "moving…" : `${model.active_leases} leased${model.queued ? `, ${model.queued} queued` : ""}`;
    node.querySelector(".served-cell").textContent = `${model.total_requests_served}${model.requests_per_minute ? ` · ${model.requests_per_minute.toFixed(1)}/min` : ""}`;
    for (const button of node.querySelectorAll(".move")) button.disabled = busy || !model.enabled || button.dataset.target === model.current_tier;
    const toggle = node.querySelector(".toggle");
    const asking = model.enabled && (armed.get(model.id) || 0) > Date.now();
    toggle.disabled = busy;
    toggle.textContent = model.enabled ? (asking ? "Really disable?" : "Disable") : "Enable";
    toggle.classList.toggle("confirm", asking);
    toggle.title = asking ? `Click again to take ${model.id} out of service` : "";
    lastSeen.set(model.id, model);
    const before = tiers.get(model.id);
    if (before && before !== model.current_tier) {
      node.classList.remove("moved");
      void node.offsetWidth; // restart the animation
      node.classList.add("moved");
    }
    tiers.set(model.id, model.current_tier);
    return node;
  }

  function renderKv(kv) {
    if (!kv) return;
    if (!kvDirty) {
      $("kv-enabled").checked = kv.enabled;
      $("kv-cap").value = (kv.max_bytes / 2 ** 30).toFixed(1);
    }
    const parked = (kv.models || []).map((m) => `${m.model}: ${m.slots} slots, ${m.tokens} tokens`).join("; ");
    $("kv-used").textContent = `${bytes(kv.used_bytes)} parked${parked ? ` (${parked})` : ""}`;
  }

  function renderNotes(status) {
    const evictions = (status.recent_evictions || []).slice(-3).reverse();
    $("evictions").textContent = evictions.length
      ? `Evicted: ${evictions.map((e) => `${e.model} → ${SHORT[e.to_tier] || e.to_tier} for ${e.for_model} (${e.reason})`).join("; ")}`
      : "";
    const workflows = Object.entries(status.latency?.workflows || {});
    $("latency").textContent = workflows.length
      ? `Workflows: ${workflows.map(([name, l]) => `${name} p50 ${ms(l.p50)} p95 ${ms(l.p95)} (${l.count})`).join("; ")}`
      : "";
  }

  let running = null;
  async function poll() {
    try {
      const status = await getJson("/v1/memory/status");
      renderBars(status);
      const body = $("tier-models").tBodies[0];
      const fresh = status.models.map(row);
      // rows are re-attached only when the lineup changed: re-attaching restarts their animations
      if (fresh.length !== body.rows.length || fresh.some((node, i) => body.rows[i] !== node)) body.replaceChildren(...fresh);
      renderKv(status.kv_park);
      renderNotes(status);
      onStatus(status, null);
    } catch (error) {
      onStatus(null, error);
      if (error.status !== 401) showError($("tiers-error"), error);
    }
  }
  function refresh() {
    running = running || poll().finally(() => (running = null));
    return running;
  }

  $("kv-enabled").addEventListener("change", () => (kvDirty = true));
  $("kv-cap").addEventListener("input", () => (kvDirty = true));
  $("kv-apply").addEventListener("click", async () => {
    clearError($("tiers-error"));
    const body = { enabled: $("kv-enabled").checked };
    if ($("kv-cap").value !== "") body.max_bytes = Math.round(Number($("kv-cap").value) * 2 ** 30);
    try {
      renderKv(await (await call("/v1/memory/kv-park", { method: "POST", json: body })).json());
      kvDirty = false;
    } catch (error) {
      showError($("tiers-error"), error);
    }
  });

  const log = startLog();
  window.addEventListener("hypnos:answered", () => {
    refresh();
    log();
  });
  (async () => {
    for (;;) {
      if (!document.hidden) await refresh();
      await sleep(1000);
    }
  })();
  return { refresh };
}

// A path with a line-break opportunity after each slash (long routes wrap there, not mid-word).
function breakable(path) {
  return String(path).split("/").flatMap((part, i) => (i ? ["/", el("wbr"), part] : [part]));
}

const LOG_CELL_CLASSES = ["time", "route", "model", "status", "total", "tokens", "rate", "from"];

function logRow(record) {
  const failed = record.status >= 400 || record.error;
  const cached = record.cached_tokens ? ` (${record.cached_tokens} cached)` : "";
  const flow = record.tokens_out ? `${record.tokens_in}→${record.tokens_out}` : record.tokens_in ? `${record.tokens_in} in` : "";
  const tokens = flow && flow + cached;
  const cells = [
    new Date(record.started_at).toLocaleTimeString([], { hour12: false }),
    breakable(record.route),
    record.model || "",
    String(record.status ?? ""),
    ms(record.duration_ms),
    tokens,
    record.tokens_per_s ? record.tokens_per_s.toFixed(1) : "",
    [SHORT[record.previous_tier], record.tier_switch_ms ? ms(record.tier_switch_ms) : ""].filter(Boolean).join(" · "),
  ];
  const facts = [record.id, record.key && `key ${record.key}`, record.stream && "stream",
    record.inference_ms != null && `inference ${ms(record.inference_ms)}`, record.level].filter(Boolean);
  const main = el("tr", { class: failed ? "failed" : "", "data-id": record.id, title: facts.join(" · ") }, cells.map((c, i) => el("td", { class: LOG_CELL_CLASSES[i] }, c)));
  if (!record.error) return [main];
  return [main, el("tr", { class: "failed detail" }, el("td", { colspan: cells.length }, record.error))];
}

function startLog() {
  let running = null;
  async function poll() {
    try {
      const log = await getJson("/v1/logs?limit=40");
      $("log-table").tBodies[0].replaceChildren(...log.records.flatMap(logRow));
    } catch (_) {
      // the status poll reports errors (and a missing key) already
    }
  }
  const refresh = () => (running = running || poll().finally(() => (running = null)));
  $("log-clear").addEventListener("click", async () => {
    await call("/v1/logs", { method: "DELETE" }).catch(() => {});
    refresh();
  });
  (async () => {
    for (;;) {
      if (!document.hidden) await refresh();
      await sleep(2000);
    }
  })();
  return refresh;
}
