// Embeds the texts given as JSON on argv[4] with the OpenAI Node SDK's defaults; prints the vectors as JSON.
import OpenAI from "openai";

const [baseURL, apiKey, model, texts] = process.argv.slice(2);
const client = new OpenAI({ baseURL, apiKey, maxRetries: 0 });
const response = await client.embeddings.create({ model, input: JSON.parse(texts) });
process.stdout.write(JSON.stringify(response.data.map((item) => item.embedding)));
