// Image generation (section 11) and document conversion with its pages streamed as they are ready (section 12).

import { call, clearError, copyText, download, el, ms, showError, sse, telemetryLine } from "./api.js";
import { renderMarkdown } from "./markdown.js";

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
  const body = el("div", { class: "page-markdown" });
  renderMarkdown(body, page.markdown || "");
  return el("article", { class: "doc-page", "data-page": page.page }, el("header", {}, facts.join(" · ")), body);
}

// The Markdown file's name for a source file: report.pdf -> report.md.
function markdownName(filename) {
  return `${filename.replace(/\.[^./]*$/, "") || "document"}.md`;
}

// A converted document's Markdown (the joined text of the final event, else the pages in order) and pictures.
function documentResult() {
  const result = { filename: "", pages: [], joined: null, pictures: [] };
  return {
    result,
    markdown: () => result.joined ?? result.pages.map((page) => page.markdown || "").join("\n\n"),
  };
}

// Fetch each kept picture (with the key) and show it with its own download link.
async function showPictures(urls, filename) {
  const box = $("documents-pictures");
  const pictures = [];
  for (const [index, url] of urls.entries()) {
    const blob = await (await call(`${url}?format=image`)).blob();
    const name = `${filename.replace(/\.[^./]*$/, "") || "document"}-picture-${index + 1}.${blob.type === "image/jpeg" ? "jpg" : "png"}`;
    pictures.push({ blob, name });
    const link = el("a", { href: "#", class: "picture-download" }, `Download ${name}`);
    link.addEventListener("click", (event) => {
      event.preventDefault();
      download(blob, name);
    });
    box.append(el("figure", { "data-url": url }, el("img", { src: URL.createObjectURL(blob), alt: name }), el("figcaption", {}, link)));
  }
  return pictures;
}

export function setupDocuments() {
  let current = documentResult();
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
    if ($("documents-keep-pictures").checked) form.append("return_pictures", "true");
    const out = $("documents-pages-out");
    out.replaceChildren();
    $("documents-pictures").replaceChildren();
    $("documents-actions").hidden = true;
    $("documents-copied").textContent = "";
    current = documentResult();
    current.result.filename = file.name;
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
          current.result.pages.push(event);
          out.append(pageCard(event));
          $("documents-status").textContent = `${out.children.length} of ${expected || "?"} pages`;
        } else if (event.object === "document") {
          const usage = event.usage || {};
          $("documents-status").textContent = `done: ${usage.pages ?? out.children.length} pages, ${usage.tables ?? 0} tables, ${usage.pictures ?? 0} pictures`;
          $("documents-tele").textContent = telemetryLine(event.hypnos_telemetry);
          if (typeof event.markdown === "string" && event.markdown) current.result.joined = event.markdown;
          $("documents-actions").hidden = false;
        } else if (event.object === "error" || event.error) {
          const error = event.error || {};
          showError($("documents-error"), { status: 200, type: error.type, message: error.message || "the conversion failed" });
        }
      }
      const urls = current.result.pages.flatMap((page) => page.picture_urls || []);
      $("documents-download-pictures").hidden = urls.length === 0;
      if (urls.length) current.result.pictures = await showPictures(urls, file.name);
    } catch (error) {
      $("documents-status").textContent = "";
      showError($("documents-error"), error);
    } finally {
      $("documents-run").disabled = false;
    }
  });
  $("documents-copy").addEventListener("click", async () => {
    try {
      await copyText(current.markdown());
      $("documents-copied").textContent = "Markdown copied";
    } catch (error) {
      showError($("documents-error"), { message: `Cannot copy: ${error.message}` });
    }
  });
  $("documents-download").addEventListener("click", () => {
    download(new Blob([current.markdown()], { type: "text/markdown" }), markdownName(current.result.filename));
  });
  $("documents-download-pictures").addEventListener("click", () => {
    for (const picture of current.result.pictures) download(picture.blob, picture.name);
  });
}
