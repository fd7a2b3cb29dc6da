// One Vercel AI SDK tool loop: generateText with a weather tool and stopWhen: stepCountIs(steps), through
// openai(model) (Responses), openai.chat(model) (chat completions) or the Open Responses provider
// (@ai-sdk/open-responses, made for local servers: the spec's request and events only), as an app built on the SDK
// runs it.
// stdin: {"baseURL", "apiKey", "model", "api": "responses" | "chat" | "open-responses", "prompt", "steps", "answer"}
// stdout: {"text", "calls": [the tool's arguments, each time it ran], "steps": [{"text", "toolCalls", "finishReason"}]}
// or {"error": {"name", "message", "statusCode", "responseBody"}} when the SDK threw.
import { createOpenAI } from "@ai-sdk/openai";
import { createOpenResponses } from "@ai-sdk/open-responses";
import { generateText, stepCountIs, tool } from "ai";
import { z } from "zod";

async function stdin() {
  const parts = [];
  for await (const part of process.stdin) parts.push(part);
  return Buffer.concat(parts).toString("utf8");
}

const { baseURL, apiKey, model, api, prompt, steps, answer } = JSON.parse(await stdin());
const openai = createOpenAI({ baseURL, apiKey });
const models = {
  responses: () => openai(model),
  chat: () => openai.chat(model),
  "open-responses": () => createOpenResponses({ name: "hypnos", url: `${baseURL}/responses`, apiKey })(model),
};
const calls = [];
const weather = tool({
  description: "The current weather in a city",
  inputSchema: z.object({ city: z.string().describe("The city name") }),
  execute: async ({ city }) => {
    calls.push({ city });
    return answer;
  },
});
try {
  const result = await generateText({
    model: models[api](),
    tools: { get_weather: weather },
    stopWhen: stepCountIs(steps),
    prompt,
    maxRetries: 0,
  });
  const summary = result.steps.map((step) => ({
    text: step.text,
    toolCalls: step.toolCalls.map((call) => ({ toolName: call.toolName, input: call.input })),
    finishReason: step.finishReason,
  }));
  process.stdout.write(JSON.stringify({ text: result.text, calls, steps: summary }));
} catch (error) {
  const { name, message, statusCode = null, responseBody = null } = error;
  process.stdout.write(JSON.stringify({ error: { name, message, statusCode, responseBody }, calls }));
}
