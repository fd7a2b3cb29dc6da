// Markdown of untrusted text (a model's answer, a converted document) as sanitized DOM: marked, then DOMPurify.

import { Marked } from "./vendor-marked.js";
import DOMPurify from "./vendor-purify.js";

const parser = new Marked({ gfm: true, async: false });

// No forms, styles or embedded content; every handler attribute and javascript: URL goes (DOMPurify's defaults).
const POLICY = {
  RETURN_DOM_FRAGMENT: true,
  FORBID_TAGS: ["style", "form", "input", "button", "textarea", "select", "iframe", "object", "embed", "svg", "math"],
  FORBID_ATTR: ["style", "srcset"],
};

// Pictures only from this page or inline data (a model's remote image URL would make the browser call out).
function localImage(src) {
  return /^data:image\//i.test(src) || (src.startsWith("/") && !src.startsWith("//")) || src.startsWith("blob:");
}

// The sanitized DOM fragment of a Markdown text; links open in a new tab, remote images become links.
export function markdownFragment(text) {
  const fragment = DOMPurify.sanitize(parser.parse(String(text ?? "")), POLICY);
  for (const link of fragment.querySelectorAll("a[href]")) {
    link.target = "_blank";
    link.rel = "noopener noreferrer";
  }
  for (const image of fragment.querySelectorAll("img")) {
    const src = image.getAttribute("src") || "";
    if (localImage(src)) continue;
    if (!/^https?:/i.test(src)) {
      image.replaceWith(image.getAttribute("alt") || "");
      continue;
    }
    const link = document.createElement("a");
    link.href = src;
    link.rel = "noopener noreferrer";
    link.target = "_blank";
    link.textContent = image.getAttribute("alt") || src;
    image.replaceWith(link);
  }
  return fragment;
}

// Replace a node's children with the rendered Markdown of `text`.
export function renderMarkdown(node, text) {
  node.replaceChildren(markdownFragment(text));
  node.classList.add("markdown");
}
