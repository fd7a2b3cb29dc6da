// A voice turn (sections 1, 9, 10): recording or file -> transcription -> chat -> speech, as one declared workflow.

import { call, clearError, getJson, ms, randomId, showError, telemetryLine, tierName } from "./api.js";
import { streamChat } from "./chat.js";

const $ = (id) => document.getElementById(id);
const RATE = 16000;

// 16-bit PCM mono WAV bytes of float samples.
export function encodeWav(samples, rate) {
  const buffer = new ArrayBuffer(44 + samples.length * 2);
  const view = new DataView(buffer);
  const text = (offset, value) => [...value].forEach((c, i) => view.setUint8(offset + i, c.charCodeAt(0)));
  text(0, "RIFF");
  view.setUint32(4, 36 + samples.length * 2, true);
  text(8, "WAVEfmt ");
  view.setUint32(16, 16, true);
  view.setUint16(20, 1, true);
  view.setUint16(22, 1, true);
  view.setUint32(24, rate, true);
  view.setUint32(28, rate * 2, true);
  view.setUint16(32, 2, true);
  view.setUint16(34, 16, true);
  text(36, "data");
  view.setUint32(40, samples.length * 2, true);
  samples.forEach((s, i) => view.setInt16(44 + i * 2, Math.max(-1, Math.min(1, s)) * 0x7fff, true));
  return new Blob([buffer], { type: "audio/wav" });
}

// Any audio the browser decodes (a recording's WebM/Ogg, MP3) as a 16 kHz mono WAV, the reliable format.
async function toWav(blob) {
  const decoded = await new OfflineAudioContext(1, 1, RATE).decodeAudioData(await blob.arrayBuffer());
  const offline = new OfflineAudioContext(1, Math.max(1, Math.ceil(decoded.duration * RATE)), RATE);
  const source = offline.createBufferSource();
  source.buffer = decoded;
  source.connect(offline.destination);
  source.start();
  return encodeWav((await offline.startRendering()).getChannelData(0), RATE);
}

// Fill the voice picker with the chosen speech model's voices (GET /v1/models); one it does not list speaks
// the server's default for OpenAI's `alloy`.
export async function refreshVoices() {
  const picker = $("voice-voice");
  const model = $("voice-tts").value;
  let voices = [];
  try {
    const listed = (await getJson("/v1/models")).data.find((entry) => entry.id === model);
    voices = listed?.voices || [];
  } catch (_) {
    // the status poll reports errors (and a missing key) already
  }
  if (model !== $("voice-tts").value) return; // another model was picked meanwhile
  const previous = picker.value;
  const options = voices.length ? voices.map((voice) => new Option(voice, voice)) : [new Option("alloy (the model's default)", "alloy")];
  picker.replaceChildren(...options);
  if (voices.includes(previous)) picker.value = previous;
}

export function setupVoice() {
  let recorded = null;
  let recorder = null;
  const step = (name) => document.querySelector(`#voice-steps li[data-step="${name}"]`);

  $("voice-record").addEventListener("click", async () => {
    clearError($("voice-error"));
    if (recorder) {
      recorder.stop();
      return;
    }
    try {
      const stream = await navigator.mediaDevices.getUserMedia({ audio: true });
      const chunks = [];
      recorder = new MediaRecorder(stream);
      recorder.ondataavailable = (event) => chunks.push(event.data);
      recorder.onstop = async () => {
        stream.getTracks().forEach((track) => track.stop());
        recorder = null;
        $("voice-record").textContent = "● Record";
        recorded = await toWav(new Blob(chunks, { type: chunks[0]?.type }));
        $("voice-file").value = "";
        $("voice-record").textContent = `● Record again (${(recorded.size / 2 / RATE).toFixed(1)} s kept)`;
      };
      recorder.start();
      $("voice-record").textContent = "■ Stop recording";
    } catch (error) {
      showError($("voice-error"), { message: `Cannot record: ${error.message}` });
    }
  });
  $("voice-file").addEventListener("change", () => (recorded = null));
  $("voice-tts").addEventListener("change", refreshVoices);

  $("voice-run").addEventListener("click", async () => {
    clearError($("voice-error"));
    for (const name of ["transcription", "chat", "speech"]) {
      step(name).className = "";
      step(name).querySelector(".tele").textContent = "";
    }
    step("transcription").querySelector(".out").textContent = "";
    step("chat").querySelector(".out").textContent = "";
    const file = $("voice-file").files[0];
    let clip = recorded;
    if (!clip && file) clip = /wav/.test(file.type) || file.name.endsWith(".wav") ? file : await toWav(file);
    if (!clip) {
      showError($("voice-error"), { message: "Record something or choose an audio file first." });
      return;
    }
    const [stt, chat, tts] = [$("voice-stt").value, $("voice-chat").value, $("voice-tts").value];
    const workflow = { "x-hypnos-workflow": `voice/${randomId()}` };
    $("voice-run").disabled = true;
    let current = "transcription";
    try {
      step(current).className = "running";
      const form = new FormData();
      form.append("model", stt);
      form.append("file", clip, file && !recorded ? file.name : "recording.wav");
      const heard = await (
        await call("/v1/audio/transcriptions", { method: "POST", form, headers: { ...workflow, "x-hypnos-next-model": chat } })
      ).json();
      step(current).querySelector(".out").textContent = heard.text;
      step(current).querySelector(".tele").textContent = telemetryLine(heard.hypnos_telemetry);
      step(current).className = "done";

      current = "chat";
      step(current).className = "running";
      const out = step(current).querySelector(".out");
      const answer = await streamChat(
        { model: chat, messages: [{ role: "user", content: heard.text }], max_tokens: 256 },
        { content: (text) => (out.textContent = text) },
        { headers: { ...workflow, "x-hypnos-next-model": tts } },
      );
      step(current).querySelector(".tele").textContent = telemetryLine(answer.telemetry);
      step(current).className = "done";

      current = "speech";
      step(current).className = "running";
      const started = performance.now();
      const spoken = await call("/v1/audio/speech", {
        method: "POST",
        json: { model: tts, input: answer.content || heard.text, voice: $("voice-voice").value || "alloy", response_format: "wav" },
        headers: { ...workflow, "x-hypnos-workflow-end": "true" },
      });
      const audio = await spoken.blob();
      const player = $("voice-audio");
      player.src = URL.createObjectURL(audio);
      player.dataset.bytes = String(audio.size);
      const h = (name) => spoken.headers.get(`x-hypnos-${name}`);
      step(current).querySelector(".tele").textContent = [
        `${audio.size} bytes in ${ms(performance.now() - started)}`,
        h("previous-tier") && `from ${tierName(h("previous-tier"))}`,
        h("audio-secs") && `${Number(h("audio-secs")).toFixed(2)} s audio`,
        h("rtf") && `rtf ${Number(h("rtf")).toFixed(3)}`,
      ].filter(Boolean).join(" · ");
      step(current).className = "done";
      player.play().catch(() => {}); // a browser may refuse autoplay; the controls stay
    } catch (error) {
      step(current).className = "failed";
      showError($("voice-error"), error);
    } finally {
      $("voice-run").disabled = false;
    }
  });
}

