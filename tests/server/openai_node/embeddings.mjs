// The official `openai` npm client's embeddings.create against a flashserve serving a tiny random
// embedding model (run_embeddings.sh makes it): the client's default (it asks for base64 and
// decodes it), explicit float and base64, dimensions, usage, and the 400 for an empty input.
// Usage: node embeddings.mjs PORT API_KEY
import assert from 'node:assert/strict';
import OpenAI from 'openai';

const [port, apiKey] = process.argv.slice(2);
const client = new OpenAI({ baseURL: `http://127.0.0.1:${port}/v1`, apiKey, maxRetries: 0,
                            timeout: 30000 });
const model = (await client.models.list()).data[0].id;
const input = ['Once upon a time', 'The cat sat on the mat.', 'hi'];

const norm = (v) => Math.sqrt(v.reduce((s, x) => s + x * x, 0));
const close = (a, b, what) => {
  assert.equal(a.length, b.length, `${what}: length`);
  for (let i = 0; i < a.length; ++i) assert.ok(Math.abs(a[i] - b[i]) < 1e-6, `${what}[${i}]`);
};

const byDefault = await client.embeddings.create({ model, input });  // base64 on the wire
assert.equal(byDefault.object, 'list');
assert.equal(byDefault.data.length, input.length);
assert.ok(byDefault.usage.prompt_tokens > 0);
assert.equal(byDefault.usage.total_tokens, byDefault.usage.prompt_tokens);
const asFloat = await client.embeddings.create({ model, input, encoding_format: 'float' });
for (let i = 0; i < input.length; ++i) {
  assert.equal(byDefault.data[i].index, i);
  assert.ok(Array.isArray(byDefault.data[i].embedding), 'the client decodes base64 to numbers');
  assert.ok(Math.abs(norm(asFloat.data[i].embedding) - 1) < 1e-5, 'unit length');
  close(byDefault.data[i].embedding, asFloat.data[i].embedding, `input ${i}`);
}

const raw = await client.embeddings.create({ model, input: input[0], encoding_format: 'base64' });
assert.equal(typeof raw.data[0].embedding, 'string');
const bytes = Buffer.from(raw.data[0].embedding, 'base64');
const decoded = Array.from({ length: bytes.length / 4 }, (_, i) => bytes.readFloatLE(4 * i));
close(decoded, asFloat.data[0].embedding, 'base64');

const cut = await client.embeddings.create({ model, input: input[0], dimensions: 8,
                                            encoding_format: 'float' });
assert.equal(cut.data[0].embedding.length, 8);
assert.ok(Math.abs(norm(cut.data[0].embedding) - 1) < 1e-5);

await assert.rejects(client.embeddings.create({ model, input: '' }),
                     (e) => e instanceof OpenAI.BadRequestError);
await assert.rejects(client.completions.create({ model, prompt: 'x' }),
                     (e) => e instanceof OpenAI.BadRequestError && /embedding model/.test(e.message));
console.log('embeddings.mjs: ok');
