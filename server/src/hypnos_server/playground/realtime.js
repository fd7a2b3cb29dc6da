// The voice tab's realtime client: one WebSocket session of GET /v1/realtime (OpenAI Realtime events, the key as the
// browser SDK sends it), the microphone as 20 ms pcm16 appends, and the answer's audio played in order as it comes.

import { getKey } from "./api.js";

export const RATE = 24000; // the session's pcm16 rate, in and out

export function base64Of(bytes) {
  let text = "";
  for (let i = 0; i < bytes.length; i += 0x8000) text += String.fromCharCode(...bytes.subarray(i, i + 0x8000));
  return btoa(text);
}

export function bytesOf(base64) {
  return Uint8Array.from(atob(base64), (c) => c.charCodeAt(0));
}

// Float samples as little-endian pcm16 bytes.
export function pcm16(samples) {
  const out = new DataView(new ArrayBuffer(samples.length * 2));
  samples.forEach((s, i) => out.setInt16(i * 2, Math.max(-1, Math.min(1, s)) * 0x7fff, true));
  return new Uint8Array(out.buffer);
}

// pcm16 mono bytes as a WAV file (a canonical 44-byte header).
export function wavOf(bytes, rate) {
  const head = new DataView(new ArrayBuffer(44));
  const text = (offset, value) => [...value].forEach((c, i) => head.setUint8(offset + i, c.charCodeAt(0)));
  text(0, "RIFF");
  head.setUint32(4, 36 + bytes.length, true);
  text(8, "WAVEfmt ");
  head.setUint32(16, 16, true);
  head.setUint16(20, 1, true);
  head.setUint16(22, 1, true);
  head.setUint32(24, rate, true);
  head.setUint32(28, rate * 2, true);
  head.setUint16(32, 2, true);
  head.setUint16(34, 16, true);
  text(36, "data");
  head.setUint32(40, bytes.length, true);
  return new Blob([head.buffer, bytes], { type: "audio/wav" });
}

// One realtime session: connect() resolves once session.created came; every server event goes to onEvent.
export class RealtimeSession {
  constructor(onEvent, onClose) {
    this.onEvent = onEvent;
    this.onClose = onClose;
    this.socket = null;
    this.session = null;
  }

  get open() {
    return this.socket !== null && this.socket.readyState === WebSocket.OPEN;
  }

  connect(chatModel) {
    const scheme = location.protocol === "https:" ? "wss" : "ws";
    const url = `${scheme}://${location.host}/v1/realtime?model=${encodeURIComponent(chatModel)}`;
    const protocols = ["realtime", "openai-beta.realtime-v1"];
    const key = getKey();
    if (key) protocols.push(`openai-insecure-api-key.${key}`);
    const socket = new WebSocket(url, protocols);
    this.socket = socket;
    return new Promise((resolve, reject) => {
      let settled = false;
      socket.onmessage = (message) => {
        const event = JSON.parse(message.data);
        if (!settled && (event.type === "session.created" || event.type === "error")) {
          settled = true;
          if (event.type === "error") reject(Object.assign(new Error(event.error.message), event.error));
          else {
            this.session = event.session;
            resolve(event.session);
          }
        }
        this.onEvent(event);
      };
      socket.onclose = (close) => {
        if (this.socket === socket) this.socket = null;
        if (!settled) {
          settled = true;
          reject(new Error(`the realtime session closed (${close.code}${close.reason ? `: ${close.reason}` : ""})`));
        }
        this.onClose(close);
      };
    });
  }

  send(event) {
    if (this.open) this.socket.send(JSON.stringify(event));
  }

  close() {
    if (this.socket) this.socket.close(1000);
    this.socket = null;
  }
}

// The microphone through an AudioWorklet: each 20 ms block goes to onBlock as pcm16 bytes. stop() ends the capture
// whole (source, worklet node, its processor, the tracks), so a later start() streams one microphone, never two.
export class Microphone {
  constructor(context) {
    this.context = context;
    this.stream = null;
    this.source = null;
    this.node = null;
    this.onBlock = null;
    this.starting = null;
    this.moduleAdded = false;
  }

  async start(onBlock) {
    this.onBlock = onBlock;
    if (this.stream) return;
    if (!this.starting) this.starting = this.open().finally(() => (this.starting = null));
    await this.starting;
  }

  async open() {
    if (!this.moduleAdded) {
      await this.context.audioWorklet.addModule("/playground/mic-worklet.js");
      this.moduleAdded = true;
    }
    const stream = await navigator.mediaDevices.getUserMedia({
      audio: { channelCount: 1, echoCancellation: true, noiseSuppression: true, autoGainControl: true },
    });
    const source = this.context.createMediaStreamSource(stream);
    const node = new AudioWorkletNode(this.context, "mic-capture");
    // only the current node's blocks are delivered: a node left over from an earlier start never speaks
    node.port.onmessage = (message) => {
      if (this.node === node && this.onBlock) this.onBlock(pcm16(message.data));
    };
    source.connect(node);
    Object.assign(this, { stream, source, node });
    if (!this.onBlock) this.stop(); // stopped while it was starting
  }

  stop() {
    this.onBlock = null;
    if (this.source) this.source.disconnect();
    if (this.node) {
      this.node.port.onmessage = null;
      this.node.port.postMessage("stop"); // its processor returns false: the node can go
      this.node.disconnect();
    }
    if (this.stream) this.stream.getTracks().forEach((track) => track.stop());
    this.source = null;
    this.node = null;
    this.stream = null;
  }
}

// Plays pcm16 chunks back to back in arrival order; stop() silences what is queued and says how much was heard.
export class Player {
  constructor(context) {
    this.context = context;
    this.sources = [];
    this.startedAt = null;
    this.endsAt = 0;
    this.queuedMs = 0;
  }

  get playing() {
    return this.sources.length > 0 && this.context.currentTime < this.endsAt;
  }

  play(bytes) {
    const samples = new Int16Array(bytes.buffer, bytes.byteOffset, bytes.byteLength >> 1);
    if (!samples.length) return;
    const buffer = this.context.createBuffer(1, samples.length, RATE);
    const channel = buffer.getChannelData(0);
    for (let i = 0; i < samples.length; i++) channel[i] = samples[i] / 32768;
    const source = this.context.createBufferSource();
    source.buffer = buffer;
    source.connect(this.context.destination);
    const at = Math.max(this.context.currentTime + 0.02, this.endsAt);
    if (this.startedAt === null) this.startedAt = at;
    source.start(at);
    this.endsAt = at + buffer.duration;
    this.queuedMs += buffer.duration * 1000;
    this.sources.push(source);
    source.onended = () => (this.sources = this.sources.filter((s) => s !== source));
  }

  // Milliseconds of the answer played so far.
  heardMs() {
    if (this.startedAt === null) return 0;
    return Math.max(0, Math.min(this.queuedMs, (this.context.currentTime - this.startedAt) * 1000));
  }

  // Silence everything queued; the milliseconds heard. The next play() starts a new answer.
  stop() {
    const heard = this.heardMs();
    for (const source of this.sources) source.stop();
    this.sources = [];
    this.startedAt = null;
    this.endsAt = 0;
    this.queuedMs = 0;
    return heard;
  }
}
