// Runs OpenAI Node SDK calls with the SDK's defaults and prints what the SDK handed back, as JSON, one entry per call.
// stdin: {"baseURL", "apiKey", "calls": [{"method": "chat.completions.create", "args": [...], "file"?, "binary"?}]}
// A call's result is {"value": ...} (a stream: the list of its chunks; a page: {"data"}; `binary`: the body as base64) or
// {"error": {"name", "api_error", "status", "code", "type", "param", "message", "chunks"}} when the SDK threw.
import { readFile } from "node:fs/promises";
import OpenAI, { toFile } from "openai";

async function stdin() {
  const parts = [];
  for await (const part of process.stdin) parts.push(part);
  return Buffer.concat(parts).toString("utf8");
}

async function call(client, { method, args, file, binary }) {
  const path = method.split(".");
  const owner = path.slice(0, -1).reduce((object, key) => object[key], client);
  const params = [...args];
  if (file) params[0] = { ...params[0], file: await toFile(await readFile(file.path), file.name) };
  const chunks = [];
  try {
    const response = await owner[path.at(-1)](...params);
    if (binary) return { value: Buffer.from(await response.arrayBuffer()).toString("base64") };
    if (typeof response?.getPaginatedItems === "function") return { value: { data: response.getPaginatedItems() } };
    if (params[0]?.stream !== true && path.at(-1) !== "stream") return { value: response };
    for await (const chunk of response) chunks.push(chunk);
    return { value: chunks };
  } catch (error) {
    const { status = null, code = null, type = null, param = null, message } = error;
    const api_error = error instanceof OpenAI.APIError;
    return { error: { name: error.constructor.name, api_error, status, code, type, param, message, chunks } };
  }
}

const { baseURL, apiKey, calls } = JSON.parse(await stdin());
const client = new OpenAI({ baseURL, apiKey, maxRetries: 0, timeout: 600_000 });
const results = [];
for (const each of calls) results.push(await call(client, each));
process.stdout.write(JSON.stringify(results));
