// The voice tab (sections 1, 9, 10): one realtime session (GET /v1/realtime) — hold to talk, or hands-free with the
// server's VAD; the transcript, the answer's text and its audio as they stream; speaking over an answer interrupts it.

import { clearError, el, getJson, ms, showError } from "./api.js";
import { Microphone, Player, RATE, RealtimeSession, base64Of, bytesOf, pcm16, wavOf } from "./realtime.js";

const $ = (id) => document.getElementById(id);

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

// Any audio the browser decodes as 24 kHz mono pcm16, the session's input format.
async function toPcm16(blob) {
  const decoded = await new OfflineAudioContext(1, 1, RATE).decodeAudioData(await blob.arrayBuffer());
  const offline = new OfflineAudioContext(1, Math.max(1, Math.ceil(decoded.duration * RATE)), RATE);
  const source = offline.createBufferSource();
  source.buffer = decoded;
  source.connect(offline.destination);
  source.start();
  return pcm16((await offline.startRendering()).getChannelData(0));
}

// The conversation as rows: the user's turns (filled in when transcribed) and the answers (streamed).
class VoiceLog {
  constructor(list) {
    this.list = list;
    this.users = new Map();
    this.answers = new Map();
  }

  user(itemId) {
    if (!this.users.has(itemId)) {
      const row = el("li", { class: "turn user running", "data-item": itemId }, el("b", {}, "You"), " ", el("span", { class: "out" }, "…"));
      this.users.set(itemId, row);
      this.list.append(row);
    }
    return this.users.get(itemId);
  }

  heard(itemId, text, failed) {
    const row = this.user(itemId);
    row.querySelector(".out").textContent = text;
    row.className = `turn user ${failed ? "failed" : "done"}`;
  }

  answer(responseId) {
    if (!this.answers.has(responseId)) {
      const row = el(
        "li",
        { class: "turn assistant running", "data-response": responseId },
        el("b", {}, "Answer"), " ", el("span", { class: "out" }), el("div", { class: "tele" }),
      );
      this.answers.set(responseId, row);
      this.list.append(row);
    }
    return this.answers.get(responseId);
  }

  clear() {
    this.list.replaceChildren();
    this.users.clear();
    this.answers.clear();
  }
}

export function setupVoice() {
  const log = new VoiceLog($("voice-log"));
  const realtime = new RealtimeSession(onEvent, onClose);
  let audio = null; // the AudioContext (made on the first click: browsers start audio on a gesture)
  let mic = null;
  let player = null;
  let handsFree = false;
  let talking = false;
  let answering = null; // the answer heard last: {id, itemId, pcm: [], firstAudio, endedAt, done}
  let endedAt = null; // when the user's last turn ended (VAD stop or release), for the first-audio figure

  const state = (text) => ($("voice-state").textContent = text);

  function context() {
    if (!audio) {
      audio = new AudioContext({ sampleRate: RATE });
      mic = new Microphone(audio);
      player = new Player(audio);
    }
    if (audio.state === "suspended") audio.resume();
    return audio;
  }

  async function connected() {
    context();
    if (realtime.open) return;
    state("connecting…");
    const session = await realtime.connect($("voice-chat").value);
    const stt = $("voice-stt").value;
    realtime.send({
      type: "session.update",
      session: {
        modalities: ["text", "audio"],
        voice: $("voice-voice").value || "alloy",
        input_audio_transcription: { model: stt },
        turn_detection: handsFree ? { type: "server_vad" } : null,
        hypnos: { transcription_model: stt, speech_model: $("voice-tts").value },
      },
    });
    state(`connected · VAD ${session.hypnos?.speech_detector || "server"}`);
  }

  // Stop the answer being heard: silence it, tell the server what was heard (it keeps that much of the text).
  function interrupt() {
    if (!answering || !player || !player.playing) return;
    const heard = player.stop();
    if (answering.itemId && answering.pcm.length) {
      realtime.send({ type: "conversation.item.truncate", item_id: answering.itemId, content_index: 0, audio_end_ms: Math.round(heard) });
    }
    const row = log.answer(answering.id);
    row.classList.add("interrupted");
    row.querySelector(".tele").textContent = `interrupted after ${ms(heard)} of audio`;
  }

  function finishAnswer(response) {
    const row = log.answer(response.id);
    row.classList.remove("running");
    row.classList.add(response.status === "completed" ? "done" : response.status === "cancelled" ? "cancelled" : "failed");
    if (response.status === "cancelled") row.classList.add("interrupted");
    if (answering && answering.id === response.id && answering.pcm.length) {
      const bytes = answering.pcm.reduce((sum, part) => sum + part.length, 0);
      const joined = new Uint8Array(bytes);
      let offset = 0;
      for (const part of answering.pcm) {
        joined.set(part, offset);
        offset += part.length;
      }
      const wav = wavOf(joined, RATE);
      const out = $("voice-audio");
      if (out.src.startsWith("blob:")) URL.revokeObjectURL(out.src); // the last answer's audio is let go
      out.src = URL.createObjectURL(wav);
      out.dataset.bytes = String(wav.size);
    }
    const usage = response.usage;
    const tele = row.querySelector(".tele");
    if (usage && !row.classList.contains("interrupted")) tele.textContent = [tele.textContent, `${usage.output_tokens} tokens`].filter(Boolean).join(" · ");
    if (answering && answering.id === response.id) answering.done = true;
  }

  function onEvent(event) {
    switch (event.type) {
      case "input_audio_buffer.speech_started":
        state("hearing you…");
        if (player && player.playing) interrupt(); // barge-in: the server cancels the response itself
        break;
      case "input_audio_buffer.speech_stopped":
        endedAt = performance.now();
        state("thinking…");
        break;
      case "input_audio_buffer.committed":
        log.user(event.item_id);
        break;
      case "conversation.item.input_audio_transcription.completed":
        log.heard(event.item_id, event.transcript, false);
        break;
      case "conversation.item.input_audio_transcription.failed":
        log.heard(event.item_id, event.error.message, true);
        break;
      case "response.created":
        if (player && !player.playing) player.stop();
        answering = { id: event.response.id, itemId: null, pcm: [], firstAudio: null, endedAt, done: false };
        log.answer(event.response.id);
        break;
      case "response.output_item.added":
        if (answering && event.item.type === "message") answering.itemId = event.item.id;
        break;
      case "response.audio_transcript.delta":
      case "response.text.delta":
        log.answer(event.response_id).querySelector(".out").textContent += event.delta;
        break;
      case "response.audio.delta": {
        if (!answering || answering.id !== event.response_id) break;
        const bytes = bytesOf(event.delta);
        answering.pcm.push(bytes);
        player.play(bytes);
        $("voice-audio").dataset.played = String(Number($("voice-audio").dataset.played || 0) + bytes.length);
        if (answering.firstAudio === null) {
          answering.firstAudio = performance.now();
          state("answering…");
          if (answering.endedAt !== null) {
            log.answer(answering.id).querySelector(".tele").textContent = `first audio ${ms(answering.firstAudio - answering.endedAt)} after you stopped`;
          }
        }
        break;
      }
      case "response.done":
        finishAnswer(event.response);
        state(handsFree ? "listening…" : "connected");
        break;
      case "error":
        showError($("voice-error"), { type: event.error.type, message: event.error.message });
        break;
      default:
    }
  }

  function onClose(close) {
    if (mic) mic.stop();
    setHandsFree(false);
    state(close.code === 1000 ? "" : `closed (${close.code})`);
  }

  function setHandsFree(on) {
    handsFree = on;
    $("voice-handsfree").setAttribute("aria-pressed", String(on));
    $("voice-handsfree").textContent = on ? "■ Stop hands-free" : "Hands-free";
    $("voice-talk").disabled = on;
    $("voice-run").disabled = on;
  }

  const stream = (bytes) => realtime.send({ type: "input_audio_buffer.append", audio: base64Of(bytes) });

  async function startTalking() {
    if (talking || handsFree) return;
    talking = true;
    clearError($("voice-error"));
    try {
      await connected();
      interrupt();
      if (answering && !answering.done) realtime.send({ type: "response.cancel" });
      realtime.send({ type: "input_audio_buffer.clear" });
      await mic.start(stream);
      state("hold and speak…");
      $("voice-talk").classList.add("active");
      if (!talking) dropTurn(); // released while the microphone was starting: a tap, not a turn

    } catch (error) {
      talking = false;
      showError($("voice-error"), { message: `Cannot talk: ${error.message}` });
    }
  }

  // The microphone off and what it sent thrown away (a tap too short to say anything).
  function dropTurn() {
    mic.stop();
    $("voice-talk").classList.remove("active");
    realtime.send({ type: "input_audio_buffer.clear" });
    state("connected");
  }

  function stopTalking() {
    if (!talking) return;
    talking = false;
    if (!mic || !mic.stream) return; // still starting: startTalking drops the turn once the microphone is up
    mic.stop();
    $("voice-talk").classList.remove("active");
    endedAt = performance.now();
    realtime.send({ type: "input_audio_buffer.commit" });
    realtime.send({ type: "response.create" });
    state("thinking…");
  }

  const talk = $("voice-talk");
  talk.addEventListener("pointerdown", (event) => {
    talk.setPointerCapture?.(event.pointerId);
    startTalking();
  });
  talk.addEventListener("pointerup", stopTalking);
  talk.addEventListener("pointercancel", stopTalking);
  talk.addEventListener("keydown", (event) => {
    if ((event.key === " " || event.key === "Enter") && !event.repeat) {
      event.preventDefault();
      startTalking();
    }
  });
  talk.addEventListener("keyup", (event) => {
    if (event.key === " " || event.key === "Enter") stopTalking();
  });

  $("voice-handsfree").addEventListener("click", async () => {
    clearError($("voice-error"));
    if (handsFree) {
      mic.stop();
      setHandsFree(false);
      realtime.send({ type: "session.update", session: { turn_detection: null } });
      state("connected");
      return;
    }
    try {
      setHandsFree(true);
      await connected();
      realtime.send({ type: "session.update", session: { turn_detection: { type: "server_vad" } } });
      await mic.start(stream);
      state("listening…");
    } catch (error) {
      setHandsFree(false);
      showError($("voice-error"), { message: `Cannot listen: ${error.message}` });
    }
  });

  $("voice-run").addEventListener("click", async () => {
    clearError($("voice-error"));
    const file = $("voice-file").files[0];
    if (!file) {
      showError($("voice-error"), { message: "Choose an audio file first (or hold to talk)." });
      return;
    }
    try {
      const pcm = await toPcm16(file);
      await connected();
      interrupt();
      if (answering && !answering.done) realtime.send({ type: "response.cancel" });
      realtime.send({ type: "input_audio_buffer.clear" });
      for (let offset = 0; offset < pcm.length; offset += RATE / 5) stream(pcm.subarray(offset, offset + RATE / 5));
      endedAt = performance.now();
      realtime.send({ type: "input_audio_buffer.commit" });
      realtime.send({ type: "response.create" });
      state("thinking…");
    } catch (error) {
      showError($("voice-error"), { message: `Cannot send the file: ${error.message}` });
    }
  });

  // Another model or voice takes a new session (the chat model is the session's).
  for (const id of ["voice-stt", "voice-chat", "voice-tts", "voice-voice"]) {
    $(id).addEventListener("change", () => {
      if (realtime.open) realtime.close();
      if (id === "voice-tts") refreshVoices();
    });
  }
  $("voice-clear").addEventListener("click", () => log.clear());
}
