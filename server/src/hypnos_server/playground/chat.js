// Chat (section 7): streamed answers, thoughts (reasoning_content) shown apart, tool calls with results sent back.

import { ApiError, call, clearError, el, showError, sse, telemetryLine } from "./api.js";
import { loadTurns, saveTurns } from "./chat-store.js";
import { renderMarkdown } from "./markdown.js";

const $ = (id) => document.getElementById(id);

const SAMPLE_TOOLS = [
  {
    type: "function",
    function: {
      name: "get_weather",
      description: "Current weather for a city",
      parameters: {
        type: "object",
        properties: { city: { type: "string" }, unit: { type: "string", enum: ["celsius", "fahrenheit"] } },
        required: ["city"],
      },
    },
  },
];

// Streams one chat completion; `view` receives the pieces. Returns {content, reasoning, toolCalls, finish, telemetry}.
export async function streamChat(body, view, { headers, signal } = {}) {
  const response = await call("/v1/chat/completions", { method: "POST", json: { ...body, stream: true }, headers, signal });
  const result = { content: "", reasoning: "", toolCalls: [], finish: null, telemetry: null, usage: null };
  for await (const chunk of sse(response)) {
    if (chunk.hypnos_telemetry) result.telemetry = chunk.hypnos_telemetry;
    if (chunk.usage) result.usage = chunk.usage;
    const choice = (chunk.choices || [])[0];
    if (!choice) continue;
    const delta = choice.delta || {};
    if (delta.reasoning_content) {
      result.reasoning += delta.reasoning_content;
      view.reasoning?.(result.reasoning);
    }
    if (delta.content) {
      result.content += delta.content;
      view.content?.(result.content);
    }
    for (const call of delta.tool_calls || []) {
      result.toolCalls[call.index ?? result.toolCalls.length] = call;
      view.toolCall?.(call);
    }
    if (choice.finish_reason === "error") {
      const error = chunk.error || {};
      throw new ApiError(200, error.type || "server_error", error.message || "the stream failed");
    }
    if (choice.finish_reason) result.finish = choice.finish_reason;
  }
  return result;
}

// A number field's value, or undefined when empty (a bad value goes to the server, whose 400 says what is wrong).
function numberOf(id) {
  const raw = $(id).value.trim();
  return raw === "" ? undefined : Number(raw);
}

// The user text of a message (its text part when it carries an image too).
function textOf(message) {
  if (typeof message.content === "string") return message.content;
  return (message.content || []).filter((part) => part.type === "text").map((part) => part.text).join("\n");
}

export function setupChat() {
  // One entry per message: {message (as sent back to the model), thoughts and tele (shown only)}.
  const turns = loadTurns();
  let controller = null;
  $("chat-tools").value = JSON.stringify(SAMPLE_TOOLS, null, 2);

  function request() {
    const body = { model: $("chat-model").value, messages: [], max_tokens: numberOf("chat-max-tokens") ?? 512 };
    const system = $("chat-system").value.trim();
    if (system) body.messages.push({ role: "system", content: system });
    body.messages.push(...turns.map((turn) => turn.message));
    for (const [field, id] of [["temperature", "chat-temperature"], ["top_p", "chat-top-p"], ["seed", "chat-seed"]]) {
      const value = numberOf(id);
      if (value !== undefined) body[field] = value;
    }
    const effort = $("chat-thinking").value;
    if (effort) body.reasoning_effort = effort;
    if ($("chat-tools-on").checked) body.tools = JSON.parse($("chat-tools").value);
    return body;
  }

  function bubble(role, text) {
    const node = el("div", { class: `msg ${role}` }, el("div", { class: "who" }, role), el("div", { class: "body" }, text));
    $("chat-log").append(node);
    node.scrollIntoView({ block: "end" });
    return node;
  }

  function toolCard(call, result) {
    const box = el("textarea", { rows: 2, class: "tool-result", spellcheck: "false" });
    box.value = result ?? JSON.stringify({ temperature: 18, condition: "sunny" });
    box.disabled = result !== undefined;
    return el(
      "div",
      { class: "tool-call", "data-call-id": call.id },
      el("div", { class: "tool-name" }, el("span", { class: "tag" }, "tool call"), " ", el("code", {}, `${call.function.name}(${call.function.arguments})`)),
      el("label", {}, "Result to send back", box),
    );
  }

  // An assistant bubble's parts: thoughts (apart), the answer as Markdown, tool calls, telemetry.
  function assistantBubble() {
    const node = bubble("assistant", "");
    const parts = {
      node,
      thoughts: el("details", { class: "thoughts", open: true, hidden: true }, el("summary", {}, "Thoughts"), el("div")),
      answer: el("div", { class: "answer" }),
      calls: el("div", { class: "tool-calls" }),
      tele: el("div", { class: "tele" }),
    };
    node.querySelector(".body").append(parts.thoughts, parts.answer, parts.calls, parts.tele);
    return parts;
  }

  function showThoughts(parts, text) {
    parts.thoughts.hidden = !text;
    parts.thoughts.lastChild.textContent = text || "";
  }

  function offerResults(calls) {
    calls.append(el("button", { type: "button", class: "send-results", onclick: (e) => sendResults(e, calls) }, "Send results"));
  }

  // Draw the saved conversation (after a reload); a tool call still waiting for its results can be answered.
  function redraw() {
    $("chat-log").replaceChildren();
    turns.forEach((turn, index) => {
      const { message } = turn;
      if (message.role === "user") {
        const node = bubble("user", textOf(message));
        const image = Array.isArray(message.content) && message.content.find((part) => part.type === "image_url");
        if (image) node.querySelector(".body").append(el("img", { src: image.image_url.url, class: "thumb", alt: "attached image" }));
      } else if (message.role === "tool") {
        bubble("tool", message.content);
      } else {
        const parts = assistantBubble();
        showThoughts(parts, turn.thoughts);
        renderMarkdown(parts.answer, message.content || "");
        parts.tele.textContent = turn.tele || "";
        const results = new Map(turns.slice(index + 1).filter((t) => t.message.role === "tool").map((t) => [t.message.tool_call_id, t.message.content]));
        for (const call of message.tool_calls || []) parts.calls.append(toolCard(call, results.get(call.id)));
        if (message.tool_calls?.length && index === turns.length - 1) offerResults(parts.calls);
      }
    });
  }

  function remember() {
    saveTurns(turns);
    $("chat-regenerate").disabled = Boolean(controller) || !turns.some((turn) => turn.message.role === "user");
  }

  async function send() {
    clearError($("chat-error"));
    let body;
    try {
      body = request();
    } catch (error) {
      showError($("chat-error"), { message: `The tools are not valid JSON: ${error.message}` });
      return;
    }
    const parts = assistantBubble();
    parts.answer.classList.add("streaming");
    let streamed = "";
    let reasoning = "";
    controller = new AbortController();
    $("chat-send").disabled = true;
    $("chat-stop").disabled = false;
    $("chat-regenerate").disabled = true;
    try {
      const result = await streamChat(
        body,
        {
          reasoning(text) {
            reasoning = text;
            showThoughts(parts, text);
          },
          content(text) {
            streamed = text;
            renderMarkdown(parts.answer, text);
            parts.node.scrollIntoView({ block: "end" });
          },
          toolCall(call) {
            parts.calls.append(toolCard(call));
          },
        },
        { signal: controller.signal },
      );
      const usage = result.usage ? ` · ${result.usage.prompt_tokens} in / ${result.usage.completion_tokens} out` : "";
      parts.tele.textContent = `${result.finish}${usage} · ${telemetryLine(result.telemetry)}`;
      // Only the answer goes back into the history, never the thoughts (section 17).
      const message = { role: "assistant", content: result.content || null };
      const toolCalls = result.toolCalls.filter(Boolean);
      if (toolCalls.length) {
        message.tool_calls = toolCalls.map(({ id, type, function: f }) => ({ id, type: type || "function", function: f }));
        offerResults(parts.calls);
      }
      turns.push({ message, thoughts: reasoning, tele: parts.tele.textContent });
    } catch (error) {
      if (error.name === "AbortError") parts.tele.textContent = "stopped";
      else {
        parts.tele.textContent = "failed";
        showError($("chat-error"), error);
      }
      // A stopped answer stays as far as it got. A request refused before any answer leaves no turn: the user's
      // message goes back into the input box, to be corrected and sent again.
      if (streamed) turns.push({ message: { role: "assistant", content: streamed }, thoughts: reasoning, tele: parts.tele.textContent });
      else if (error.name !== "AbortError" && turns.at(-1)?.message.role === "user") {
        const refused = turns.pop();
        if (!$("chat-input").value) $("chat-input").value = textOf(refused.message);
      }
    } finally {
      parts.answer.classList.remove("streaming");
      controller = null;
      $("chat-send").disabled = false;
      $("chat-stop").disabled = true;
      remember();
    }
  }

  function sendResults(event, calls) {
    event.target.remove();
    for (const card of calls.querySelectorAll(".tool-call")) {
      const content = card.querySelector(".tool-result").value;
      card.querySelector(".tool-result").disabled = true;
      turns.push({ message: { role: "tool", tool_call_id: card.dataset.callId, content } });
      bubble("tool", content);
    }
    remember();
    send();
  }

  // Answer the last user message again: the answers (and tool turns) after it go, then it is sent anew.
  function regenerate() {
    if (controller) return;
    let last = turns.length - 1;
    while (last >= 0 && turns[last].message.role !== "user") last -= 1;
    if (last < 0) return;
    turns.length = last + 1;
    redraw();
    send();
  }

  $("chat-form").addEventListener("submit", async (event) => {
    event.preventDefault();
    const text = $("chat-input").value.trim();
    const image = $("chat-image").files[0];
    if (!text || controller) return;
    $("chat-input").value = "";
    if (image) {
      // An image_url part with a data: URL (section 7.1), placed after the text.
      const url = await new Promise((resolve, reject) => {
        const reader = new FileReader();
        reader.onload = () => resolve(reader.result);
        reader.onerror = () => reject(reader.error);
        reader.readAsDataURL(image);
      });
      $("chat-image").value = "";
      turns.push({ message: { role: "user", content: [{ type: "text", text }, { type: "image_url", image_url: { url } }] } });
      bubble("user", text).querySelector(".body").append(el("img", { src: url, class: "thumb", alt: image.name }));
    } else {
      turns.push({ message: { role: "user", content: text } });
      bubble("user", text);
    }
    remember();
    send();
  });
  $("chat-input").addEventListener("keydown", (event) => {
    if (event.key === "Enter" && !event.shiftKey) {
      event.preventDefault();
      $("chat-form").requestSubmit();
    }
  });
  $("chat-stop").addEventListener("click", () => controller?.abort());
  $("chat-regenerate").addEventListener("click", regenerate);
  $("chat-tools-on").addEventListener("change", (event) => ($("chat-tools-box").open = event.target.checked));
  $("chat-clear").addEventListener("click", () => {
    turns.length = 0;
    $("chat-log").replaceChildren();
    clearError($("chat-error"));
    remember();
  });
  redraw();
  remember();
}
