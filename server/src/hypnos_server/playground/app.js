// The playground's entry: tabs, the API key field, the lineup (what the server serves) enabling or disabling panels.

import { getKey, setKey } from "./api.js";
import { setupChat } from "./chat.js";
import { setupDocuments, setupImages } from "./media.js";
import { setupEmbeddings, setupEntities } from "./text.js";
import { startTiers } from "./tiers.js";
import { refreshVoices, setupVoice } from "./voice.js";

const $ = (id) => document.getElementById(id);

function showTab(button) {
  for (const other of document.querySelectorAll("#tabs button")) other.classList.toggle("active", other === button);
  for (const panel of document.querySelectorAll(".panel")) panel.hidden = panel.id !== `panel-${button.dataset.tab}`;
}

function setupTabs() {
  for (const button of document.querySelectorAll("#tabs button")) button.addEventListener("click", () => showTab(button));
}

let opened = false;

// The page's first lineup picks the tab: the first one served when the open one (Chat) is not.
function openServedTab() {
  if (opened) return;
  opened = true;
  const active = document.querySelector("#tabs button.active");
  if (!active.classList.contains("unserved")) return;
  const served = document.querySelector("#tabs button:not(.unserved)");
  if (served) showTab(served);
}

function fillSelect(select, models) {
  const modality = select.dataset.modality;
  const ids = models.filter((m) => m.modalities.includes(modality)).map((m) => m.id);
  const previous = select.value;
  select.replaceChildren(...ids.map((id) => new Option(id, id)));
  if (ids.includes(previous)) select.value = previous;
  else {
    const primary = models.find((m) => m.modality === modality && ids.includes(m.id));
    if (primary) select.value = primary.id;
  }
}

// What to do when no enabled model serves a modality: the command or config that adds one.
const HOW_TO_ADD = {
  text_generation: "add a chat model: `hypnos pull <catalog id>` or `hypnos add FILE.gguf` (./run.sh serves qwen2.5:0.5b)",
  vision: "add a chat GGUF with its mmproj projector: `hypnos add FOLDER` (the folder holding both)",
  speech_to_text: "add a transcription model: ./run.sh serves whisper-tiny.en (the audio plugin)",
  text_to_speech: "add a speech model: ./run.sh serves kokoro-82m and piper-joe (the audio plugin)",
  embeddings: "add an embedding model: ./run.sh serves all-minilm-l6-v2, or `hypnos add` an embedding GGUF",
  image_generation: "`./run.sh serve --with images` adds tiny-sd; a diffusers folder runs with engine = \"diffusers\"",
  document_conversion: "install the docling plugin (./run.sh does) and configure a model with engine = \"docling\"",
  entity_extraction: "`./run.sh serve --with entities` adds gliner-tiny; a GLiNER folder runs with engine = \"gliner\"",
};

let lineupSignature = null;

// Fills every model picker from the enabled models' modalities and disables the panels nobody serves.
function applyLineup(models, reason) {
  const enabled = models.filter((m) => m.enabled);
  const signature = JSON.stringify([reason || "", enabled.map((m) => [m.id, m.modalities])]);
  if (signature === lineupSignature) return;
  lineupSignature = signature;
  for (const select of document.querySelectorAll("select[data-modality]")) fillSelect(select, enabled);
  refreshVoices();
  for (const panel of document.querySelectorAll(".panel")) {
    const missing = panel.dataset.needs.split(" ").filter((need) => !enabled.some((m) => m.modalities.includes(need)));
    const blocked = Boolean(reason) || missing.length > 0;
    panel.querySelector("fieldset").disabled = blocked;
    const notice = panel.querySelector(".unserved");
    notice.hidden = !blocked;
    const how = missing.map((need) => HOW_TO_ADD[need]).filter(Boolean).join("; ");
    notice.textContent = reason || `Not served by this server's lineup: no enabled model does ${missing.join(", ")}. To use this tab, ${how}.`;
    const tab = document.querySelector(`#tabs button[data-tab="${panel.id.slice(6)}"]`);
    tab.classList.toggle("unserved", blocked);
    tab.title = blocked ? notice.textContent : "";
  }
  $("empty-banner").hidden = Boolean(reason) || models.length > 0;
  if (!reason) openServedTab();
}

async function showServerInfo() {
  try {
    const health = await (await fetch("/health")).json();
    const ready = (await fetch("/ready")).ok;
    $("server-info").textContent = `v${health.version} · ${ready ? "ready" : "staging startup models…"}`;
    if (!ready) setTimeout(showServerInfo, 2000);
  } catch (error) {
    $("server-info").textContent = `server unreachable (${error.message})`;
    setTimeout(showServerInfo, 3000);
  }
}

function setupKey(tiers) {
  const input = $("api-key");
  input.value = getKey();
  $("key-form").addEventListener("submit", (event) => {
    event.preventDefault();
    setKey(input.value.trim());
    $("key-banner").hidden = true;
    lineupSignature = null;
    tiers.refresh();
  });
  window.addEventListener("hypnos:unauthorized", (event) => {
    $("key-banner").hidden = false;
    $("key-banner-message").textContent = event.detail.message;
    if (document.activeElement !== input) input.focus();
  });
}

function main() {
  setupTabs();
  setupChat();
  setupVoice();
  setupImages();
  setupDocuments();
  setupEntities();
  setupEmbeddings();
  const tiers = startTiers({
    onStatus(status, error) {
      if (status) {
        $("key-banner").hidden = true;
        applyLineup(status.models);
      } else if (error && error.status === 401) {
        applyLineup([], "Enter the server's API key above to use this panel.");
      }
    },
  });
  setupKey(tiers);
  showServerInfo();
}

main();
