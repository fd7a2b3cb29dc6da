// Entity extraction with the spans highlighted (section 13) and the similarity of two texts' embeddings (section 8).

import { PALETTE, call, clearError, el, showError, telemetryLine } from "./api.js";

const $ = (id) => document.getElementById(id);

// The text with each entity's [start, end) marked; offsets count Unicode scalar values, so slice by code points.
export function highlight(text, entities, colourOf) {
  const points = Array.from(text);
  const nodes = [];
  let position = 0;
  for (const entity of [...entities].sort((a, b) => a.start - b.start)) {
    if (entity.start < position) continue; // nested spans (flat = false): keep the outer one
    nodes.push(points.slice(position, entity.start).join(""));
    nodes.push(
      el(
        "mark",
        { style: `--label:${colourOf(entity.label)}`, "data-label": entity.label, title: `${entity.label} ${entity.score.toFixed(2)}` },
        points.slice(entity.start, entity.end).join(""),
        el("sup", {}, entity.label),
      ),
    );
    position = entity.end;
  }
  nodes.push(points.slice(position).join(""));
  return nodes;
}

export function setupEntities() {
  $("entities-form").addEventListener("submit", async (event) => {
    event.preventDefault();
    clearError($("entities-error"));
    const text = $("entities-text").value;
    const labels = $("entities-labels").value.split(",").map((l) => l.trim()).filter(Boolean);
    const body = { model: $("entities-model").value, input: text, labels, threshold: Number($("entities-threshold").value) };
    $("entities-run").disabled = true;
    try {
      const answer = await (await call("/v1/entities", { method: "POST", json: body })).json();
      const entities = answer.data[0]?.entities || [];
      const colourOf = (label) => PALETTE[Math.max(0, labels.indexOf(label)) % PALETTE.length];
      $("entities-out").replaceChildren(...highlight(text, entities, colourOf));
      $("entities-legend").replaceChildren(
        ...labels.map((label) => el("span", { class: "chip", style: `--label:${colourOf(label)}` }, label)),
        el("span", { class: "muted" }, ` ${entities.length} entities`),
      );
      $("entities-tele").textContent = telemetryLine(answer.hypnos_telemetry);
    } catch (error) {
      showError($("entities-error"), error);
    } finally {
      $("entities-run").disabled = false;
    }
  });
}

export function cosine(a, b) {
  let dot = 0;
  let na = 0;
  let nb = 0;
  for (let i = 0; i < a.length; i += 1) {
    dot += a[i] * b[i];
    na += a[i] * a[i];
    nb += b[i] * b[i];
  }
  return dot / (Math.sqrt(na) * Math.sqrt(nb) || 1);
}

export function setupEmbeddings() {
  $("embeddings-form").addEventListener("submit", async (event) => {
    event.preventDefault();
    clearError($("embeddings-error"));
    const body = { model: $("embeddings-model").value, input: [$("embeddings-a").value, $("embeddings-b").value] };
    $("embeddings-run").disabled = true;
    try {
      const answer = await (await call("/v1/embeddings", { method: "POST", json: body })).json();
      const [a, b] = answer.data.sort((x, y) => x.index - y.index).map((d) => d.embedding);
      const similarity = cosine(a, b);
      $("embeddings-out").replaceChildren(
        el("div", { class: "similarity" }, el("b", { id: "embeddings-score" }, similarity.toFixed(4)), ` cosine similarity · ${a.length} dimensions`),
        el("div", { class: "meter" }, el("div", { style: `width:${Math.max(0, similarity) * 100}%` })),
      );
      $("embeddings-tele").textContent = telemetryLine(answer.hypnos_telemetry);
    } catch (error) {
      showError($("embeddings-error"), error);
    } finally {
      $("embeddings-run").disabled = false;
    }
  });
}
