// Chat (section 7): streamed answers, thoughts (reasoning_content) shown apart, tool calls with results sent back.

import { ApiError, call, clearError, el, showError, sse, telemetryLine } from "./api.js";
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

function maxTokens() {
  const raw = $("chat-max-tokens").value.trim();
  return raw === "" ? 512 : Number(raw); // a bad value goes to the server, whose 400 says what is wrong
}

export function setupChat() {
  const history = [];
  let controller = null;
  $("chat-tools").value = JSON.stringify(SAMPLE_TOOLS, null, 2);

  function request() {
    const body = { model: $("chat-model").value, messages: [], max_tokens: maxTokens() };
    const system = $("chat-system").value.trim();
    if (system) body.messages.push({ role: "system", content: system });
    body.messages.push(...history);
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

  function toolCard(call) {
    const result = el("textarea", { rows: 2, class: "tool-result", spellcheck: "false" });
    result.value = JSON.stringify({ temperature: 18, condition: "sunny" });
    return el(
      "div",
      { class: "tool-call", "data-call-id": call.id },
      el("div", { class: "tool-name" }, el("span", { class: "tag" }, "tool call"), " ", el("code", {}, `${call.function.name}(${call.function.arguments})`)),
      el("label", {}, "Result to send back", result),
    );
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
    const node = bubble("assistant", "");
    const thoughts = el("details", { class: "thoughts", open: true, hidden: true }, el("summary", {}, "Thoughts"), el("div"));
    const answer = el("div", { class: "answer streaming" });
    const calls = el("div", { class: "tool-calls" });
    const tele = el("div", { class: "tele" });
    node.querySelector(".body").append(thoughts, answer, calls, tele);
    let streamed = "";
    controller = new AbortController();
    $("chat-send").disabled = true;
    $("chat-stop").disabled = false;
    try {
      const result = await streamChat(
        body,
        {
          reasoning(text) {
            thoughts.hidden = false;
            thoughts.lastChild.textContent = text;
          },
          content(text) {
            streamed = text;
            renderMarkdown(answer, text);
            node.scrollIntoView({ block: "end" });
          },
          toolCall(call) {
            calls.append(toolCard(call));
          },
        },
        { signal: controller.signal },
      );
      const usage = result.usage ? ` · ${result.usage.prompt_tokens} in / ${result.usage.completion_tokens} out` : "";
      tele.textContent = `${result.finish}${usage} · ${telemetryLine(result.telemetry)}`;
      // Only the answer goes back into the history, never the thoughts (section 17).
      const message = { role: "assistant", content: result.content || null };
      const toolCalls = result.toolCalls.filter(Boolean);
      if (toolCalls.length) {
        message.tool_calls = toolCalls.map(({ id, type, function: f }) => ({ id, type: type || "function", function: f }));
        calls.append(el("button", { type: "button", class: "send-results", onclick: (e) => sendResults(e, calls) }, "Send results"));
      }
      history.push(message);
    } catch (error) {
      if (error.name === "AbortError") tele.textContent = "stopped";
      else {
        tele.textContent = "failed";
        showError($("chat-error"), error);
      }
      if (streamed) history.push({ role: "assistant", content: streamed });
      else history.pop();
    } finally {
      answer.classList.remove("streaming");
      controller = null;
      $("chat-send").disabled = false;
      $("chat-stop").disabled = true;
    }
  }

  function sendResults(event, calls) {
    event.target.remove();
    for (const card of calls.querySelectorAll(".tool-call")) {
      const content = card.querySelector(".tool-result").value;
      card.querySelector(".tool-result").disabled = true;
      history.push({ role: "tool", tool_call_id: card.dataset.callId, content });
      bubble("tool", content);
    }
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
      history.push({ role: "user", content: [{ type: "text", text }, { type: "image_url", image_url: { url } }] });
      bubble("user", text).querySelector(".body").append(el("img", { src: url, class: "thumb", alt: image.name }));
    } else {
      history.push({ role: "user", content: text });
      bubble("user", text);
    }
    send();
  });
  $("chat-input").addEventListener("keydown", (event) => {
    if (event.key === "Enter" && !event.shiftKey) {
      event.preventDefault();
      $("chat-form").requestSubmit();
    }
  });
  $("chat-stop").addEventListener("click", () => controller?.abort());
  $("chat-tools-on").addEventListener("change", (event) => ($("chat-tools-box").open = event.target.checked));
  $("chat-clear").addEventListener("click", () => {
    history.length = 0;
    $("chat-log").replaceChildren();
    clearError($("chat-error"));
  });
}
