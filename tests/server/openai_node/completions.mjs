// The official `openai` npm client against a running flashserve: a completion, a streamed
// completion (concatenated deltas == the non-streamed text), usage, /v1/models and errors.
// Usage: node completions.mjs PORT API_KEY   (run by run.sh, which installs `openai` beside it)
import assert from 'node:assert/strict';
import OpenAI from 'openai';

const [port, apiKey] = process.argv.slice(2);
const client = new OpenAI({ baseURL: `http://127.0.0.1:${port}/v1`, apiKey, maxRetries: 0,
                            timeout: 30000 });

const models = await client.models.list();
const model = models.data[0].id;
assert.equal(model, 'stories260K');

const params = { model, prompt: 'Once upon a time', max_tokens: 40, temperature: 0 };
const c = await client.completions.create(params);
assert.equal(c.object, 'text_completion');
assert.ok(c.choices[0].text.length > 0);
assert.ok(['stop', 'length'].includes(c.choices[0].finish_reason));
assert.equal(c.usage.total_tokens, c.usage.prompt_tokens + c.usage.completion_tokens);

const stream = await client.completions.create({ ...params, stream: true,
                                                 stream_options: { include_usage: true } });
let text = '';
let finish = null;
let usage = null;
for await (const chunk of stream) {
  for (const choice of chunk.choices) {
    text += choice.text;
    if (choice.finish_reason) finish = choice.finish_reason;
  }
  if (chunk.usage) usage = chunk.usage;
}
assert.equal(text, c.choices[0].text);
assert.equal(finish, c.choices[0].finish_reason);
// Equal counts; cached_tokens may differ (the second request can hit the prefix cache).
const { prompt_tokens_details: streamedDetails, ...streamedCounts } = usage;
const { prompt_tokens_details: wholeDetails, ...wholeCounts } = c.usage;
assert.deepEqual(streamedCounts, wholeCounts);
assert.ok(streamedDetails.cached_tokens <= usage.prompt_tokens && wholeDetails.cached_tokens >= 0);

// Stop strings and seeds through the client.
const stopped = await client.completions.create({ ...params, stop: [' little'] });
assert.equal(stopped.choices[0].text, c.choices[0].text.split(' little')[0]);
const s1 = await client.completions.create({ ...params, temperature: 1, seed: 7 });
const s2 = await client.completions.create({ ...params, temperature: 1, seed: 7 });
assert.equal(s1.choices[0].text, s2.choices[0].text);

// Errors arrive as the client's typed errors with the right status.
await assert.rejects(client.completions.create({ ...params, model: 'nope' }),
                     (e) => e instanceof OpenAI.NotFoundError && e.status === 404);
await assert.rejects(client.completions.create({ ...params, max_tokens: 100000 }),
                     (e) => e instanceof OpenAI.BadRequestError && e.status === 400);
const wrongKey = new OpenAI({ baseURL: `http://127.0.0.1:${port}/v1`, apiKey: 'wrong',
                              maxRetries: 0 });
await assert.rejects(wrongKey.completions.create(params),
                     (e) => e instanceof OpenAI.AuthenticationError && e.status === 401);

console.log(`openai-node: completion and stream OK: ${JSON.stringify(text)}`);
