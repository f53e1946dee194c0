// The official `openai` npm client's chat.completions.create against a running flashserve
// (started with --chat-template chatml): a reply, a streamed reply (role first, concatenated
// deltas == the non-streamed message, usage), n choices, chat logprobs, and typed 400 errors for
// what the server does not implement (the legacy `functions` field).
// Usage: node chat.mjs PORT API_KEY   (run by run.sh, which installs `openai` beside it)
import assert from 'node:assert/strict';
import OpenAI from 'openai';

const [port, apiKey] = process.argv.slice(2);
const client = new OpenAI({ baseURL: `http://127.0.0.1:${port}/v1`, apiKey, maxRetries: 0,
                            timeout: 30000 });
const model = 'stories260K';
const params = {
  model,
  messages: [{ role: 'system', content: 'You tell stories.' },
             { role: 'user', content: 'Once upon a time' }],
  max_tokens: 30,
  temperature: 0,
};

const c = await client.chat.completions.create(params);
assert.equal(c.object, 'chat.completion');
assert.equal(c.choices[0].message.role, 'assistant');
assert.ok(c.choices[0].message.content.length > 0);
assert.ok(['stop', 'length'].includes(c.choices[0].finish_reason));
assert.equal(c.usage.total_tokens, c.usage.prompt_tokens + c.usage.completion_tokens);

const stream = await client.chat.completions.create({ ...params, stream: true,
                                                      stream_options: { include_usage: true } });
let text = '';
let role = null;
let finish = null;
let usage = null;
for await (const chunk of stream) {
  assert.equal(chunk.object, 'chat.completion.chunk');
  for (const choice of chunk.choices) {
    if (choice.delta.role) {
      assert.equal(text, '', 'the role comes in the first delta');
      role = choice.delta.role;
    }
    text += choice.delta.content ?? '';
    if (choice.finish_reason) finish = choice.finish_reason;
  }
  if (chunk.usage) usage = chunk.usage;
}
assert.equal(role, 'assistant');
assert.equal(text, c.choices[0].message.content);
assert.equal(finish, c.choices[0].finish_reason);
// Equal counts; cached_tokens may differ (the second request can hit the prefix cache).
const { prompt_tokens_details: streamedDetails, ...streamedCounts } = usage;
const { prompt_tokens_details: wholeDetails, ...wholeCounts } = c.usage;
assert.deepEqual(streamedCounts, wholeCounts);
assert.ok(streamedDetails.cached_tokens <= usage.prompt_tokens && wholeDetails.cached_tokens >= 0);

// n choices and logprobs in the chat shape; max_completion_tokens (the current name).
const several = await client.chat.completions.create({
  ...params, max_tokens: undefined, max_completion_tokens: 5, n: 2, temperature: 1, seed: 3,
  logprobs: true, top_logprobs: 2 });
assert.equal(several.choices.length, 2);
for (const ch of several.choices) {
  for (const e of ch.logprobs.content) {
    assert.equal(typeof e.token, 'string');
    assert.ok(e.logprob <= 0);
    assert.ok(Array.isArray(e.bytes));
    assert.equal(e.top_logprobs.length, 2);
  }
}
assert.equal(several.usage.completion_tokens,
             several.choices.reduce((n, ch) => n + ch.logprobs.content.length, 0));

// What the server does not implement is a typed 400 naming the field, never silently ignored.
await assert.rejects(
  client.chat.completions.create({ ...params, functions: [{ name: 'f' }] }),
  (e) => e instanceof OpenAI.BadRequestError && e.status === 400 && e.param === 'functions');
await assert.rejects(
  client.chat.completions.create({ ...params, messages: [] }),
  (e) => e instanceof OpenAI.BadRequestError && e.param === 'messages');

console.log(`openai-node: chat and chat stream OK: ${JSON.stringify(text)}`);
