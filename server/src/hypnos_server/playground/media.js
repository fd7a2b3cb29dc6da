// Image generation (section 11) and document conversion with its pages streamed as they are ready (section 12).

import { call, clearError, el, ms, showError, sse, telemetryLine } from "./api.js";

const $ = (id) => document.getElementById(id);

export function setupImages() {
  $("images-form").addEventListener("submit", async (event) => {
    event.preventDefault();
    clearError($("images-error"));
    const body = {
      model: $("images-model").value,
      prompt: $("images-prompt").value,
      size: $("images-size").value,
      n: Number($("images-n").value) || 1,
      response_format: "b64_json",
    };
    if ($("images-negative").value.trim()) body.negative_prompt = $("images-negative").value.trim();
    if ($("images-steps").value) body.steps = Number($("images-steps").value);
    if ($("images-seed").value) body.seed = Number($("images-seed").value);
    $("images-run").disabled = true;
    $("images-tele").textContent = "generating…";
    try {
      const answer = await (await call("/v1/images/generations", { method: "POST", json: body })).json();
      $("images-out").replaceChildren(
        ...answer.data.map((image) =>
          el(
            "figure",
            {},
            el("img", { src: `data:image/png;base64,${image.b64_json}`, alt: body.prompt }),
            el("figcaption", {}, `seed ${image.seed}`, " ", el("button", { type: "button", class: "secondary small", onclick: () => ($("images-seed").value = image.seed) }, "reuse seed")),
          ),
        ),
      );
      $("images-tele").textContent = telemetryLine(answer.hypnos_telemetry);
    } catch (error) {
      $("images-tele").textContent = "";
      showError($("images-error"), error);
    } finally {
      $("images-run").disabled = false;
    }
  });
}

function pageCard(page) {
  const facts = [`page ${page.page}`];
  if (page.ms !== undefined) facts.push(ms(page.ms));
  const count = (n, noun) => `${n} ${noun}${n === 1 ? "" : "s"}`;
  if (page.tables) facts.push(count(page.tables, "table"));
  if (page.pictures) facts.push(count(page.pictures, "picture"));
  return el("article", { class: "doc-page", "data-page": page.page }, el("header", {}, facts.join(" · ")), el("pre", {}, page.markdown || ""));
}

export function setupDocuments() {
  $("documents-form").addEventListener("submit", async (event) => {
    event.preventDefault();
    clearError($("documents-error"));
    const file = $("documents-file").files[0];
    if (!file) return;
    const form = new FormData();
    form.append("model", $("documents-model").value);
    form.append("file", file, file.name);
    form.append("ocr", $("documents-ocr").checked ? "true" : "false");
    form.append("stream", "true");
    if ($("documents-pages").value.trim()) form.append("pages", $("documents-pages").value.trim());
    const out = $("documents-pages-out");
    out.replaceChildren();
    $("documents-tele").textContent = "";
    $("documents-status").textContent = `uploading ${file.name}…`;
    $("documents-run").disabled = true;
    try {
      const response = await call("/v1/documents/convert", { method: "POST", form });
      let expected = 0;
      for await (const event of sse(response)) {
        if (event.object === "document.started") {
          expected = (event.pages || []).length;
          $("documents-status").textContent = `${event.page_count} pages in the document; converting ${expected}…`;
        } else if (event.object === "document.page") {
          out.append(pageCard(event));
          $("documents-status").textContent = `${out.children.length} of ${expected || "?"} pages`;
        } else if (event.object === "document") {
          const usage = event.usage || {};
          $("documents-status").textContent = `done: ${usage.pages ?? out.children.length} pages, ${usage.tables ?? 0} tables, ${usage.pictures ?? 0} pictures`;
          $("documents-tele").textContent = telemetryLine(event.hypnos_telemetry);
        } else if (event.object === "error" || event.error) {
          const error = event.error || {};
          showError($("documents-error"), { status: 200, type: error.type, message: error.message || "the conversion failed" });
        }
      }
    } catch (error) {
      $("documents-status").textContent = "";
      showError($("documents-error"), error);
    } finally {
      $("documents-run").disabled = false;
    }
  });
}
