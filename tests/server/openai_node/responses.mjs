// The Responses API (POST /v1/responses, GET and DELETE /v1/responses/{id}) through the clients
// that default to it: the `openai` npm client (create whole and streamed, with the documented
// event order; previous_response_id; retrieve and delete; models.retrieve), the Vercel AI SDK's
// default model (`provider(model)` is its Responses model) in generateText and streamText, and
// LangChain JS ChatOpenAI with useResponsesApi. stories260K writes junk text, so shapes are
// checked, and greedy text only against itself.
// Usage: node responses.mjs PORT API_KEY   (run by run.sh, which installs the packages beside it)
import assert from 'node:assert/strict';
import OpenAI from 'openai';
import { createOpenAI } from '@ai-sdk/openai';
import { generateText, streamText } from 'ai';
import { ChatOpenAI } from '@langchain/openai';
import { apiKey, baseURL, lastSent, model, recordingFetch } from './common.mjs';

const client = new OpenAI({ baseURL, apiKey, maxRetries: 0, fetch: recordingFetch });
const ask = { model, input: 'Once upon a time', max_output_tokens: 12, temperature: 0 };

const info = await client.models.retrieve(model);
assert.equal(info.id, model);
assert.equal(info.object, 'model');

function checkMessage(response, what) {
  assert.match(response.id, /^resp_/, what);
  assert.equal(response.object, 'response', what);
  assert.ok(['completed', 'incomplete'].includes(response.status), `${what}: ${response.status}`);
  const message = response.output.find((item) => item.type === 'message');
  assert.ok(message, `${what}: a message item`);
  assert.match(message.id, /^msg_/);
  assert.equal(message.role, 'assistant');
  assert.equal(message.content[0].type, 'output_text');
  assert.equal(response.output_text, message.content[0].text, `${what}: the SDK's output_text`);
  const u = response.usage;
  assert.ok(u.input_tokens > 0 && u.output_tokens > 0 && u.output_tokens <= 12, JSON.stringify(u));
  assert.equal(u.total_tokens, u.input_tokens + u.output_tokens);
  if (response.status === 'incomplete') {
    assert.equal(response.incomplete_details.reason, 'max_output_tokens');
  }
}

// Whole.
const first = await client.responses.create({ ...ask, instructions: 'Tell a story.',
                                              metadata: { run: 'node' }, service_tier: 'auto' });
checkMessage(first, 'create');
assert.equal(first.instructions, 'Tell a story.');
assert.equal(first.max_output_tokens, 12);
assert.deepEqual(first.metadata, { run: 'node' });
assert.equal(first.store, true);

// Streamed: the documented order, numbered from 0, and the same greedy text as a whole request.
const plain = await client.responses.create(ask);
const events = [];
for await (const event of await client.responses.create({ ...ask, stream: true })) events.push(event);
events.forEach((e, i) => assert.equal(e.sequence_number, i, `event ${i} (${e.type})`));
const types = events.map((e) => e.type).filter((t, i, all) => !(t.endsWith('.delta') && all[i - 1] === t));
assert.deepEqual(types, [
  'response.created', 'response.in_progress', 'response.output_item.added',
  'response.content_part.added', 'response.output_text.delta', 'response.output_text.done',
  'response.content_part.done', 'response.output_item.done',
  plain.status === 'completed' ? 'response.completed' : 'response.incomplete']);
const deltas = events.filter((e) => e.type === 'response.output_text.delta').map((e) => e.delta);
const final = events.at(-1).response;
assert.equal(deltas.join(''), plain.output_text);
assert.equal(events.find((e) => e.type === 'response.output_text.done').text, plain.output_text);
assert.equal(final.output[0].content[0].text, plain.output_text);
assert.equal(final.status, plain.status);
assert.equal(final.usage.input_tokens, plain.usage.input_tokens);  // cached_tokens may differ
assert.equal(final.usage.output_tokens, plain.usage.output_tokens);

// previous_response_id: the stored conversation comes first; retrieve; delete.
const second = await client.responses.create({ ...ask, input: 'And then?', previous_response_id: first.id });
checkMessage(second, 'previous_response_id');
assert.equal(second.previous_response_id, first.id);
assert.ok(second.usage.input_tokens > plain.usage.input_tokens + first.usage.output_tokens,
          'the first turn is in the prompt');
const fetched = await client.responses.retrieve(second.id);
assert.deepEqual(fetched, second);
const deleted = await (await client.responses.delete(second.id).asResponse()).json();
assert.deepEqual(deleted, { id: second.id, object: 'response', deleted: true });
await assert.rejects(client.responses.retrieve(second.id), (e) => e.status === 404);
const unstored = await client.responses.create({ ...ask, store: false });
await assert.rejects(client.responses.retrieve(unstored.id), (e) => e.status === 404);
await assert.rejects(client.responses.create({ ...ask, previous_response_id: unstored.id }),
                     (e) => e.status === 400 && e.param === 'previous_response_id');
await assert.rejects(
  client.responses.create({ ...ask, tools: [{ type: 'web_search' }] }),
  (e) => e.status === 400 && e.param === 'tools[0]' && /web_search/.test(e.message));

// The Vercel AI SDK: its default model speaks the Responses API.
const provider = createOpenAI({ baseURL, apiKey, fetch: recordingFetch });
const sdk = { model: provider(model), prompt: 'Once upon a time', maxOutputTokens: 12,
              temperature: 0, maxRetries: 0 };
const generated = await generateText(sdk);
assert.ok('input' in lastSent() && !('messages' in lastSent()), 'sent to /v1/responses');
assert.equal(generated.text, plain.output_text);
assert.ok(['stop', 'length'].includes(generated.finishReason), generated.finishReason);
assert.ok(generated.usage.outputTokens > 0);
assert.match(generated.response.id, /^resp_/);
const streamed = streamText(sdk);
let streamedText = '';
for await (const piece of streamed.textStream) streamedText += piece;
assert.equal(lastSent().stream, true);
assert.equal(streamedText, plain.output_text);
assert.equal(await streamed.finishReason, generated.finishReason);
assert.equal((await streamed.usage).outputTokens, generated.usage.outputTokens);

// LangChain JS on the Responses API.
const llm = new ChatOpenAI({ model, apiKey, temperature: 0, maxTokens: 12, maxRetries: 0,
                             useResponsesApi: true, configuration: { baseURL, fetch: recordingFetch } });
const reply = await llm.invoke('Once upon a time');
assert.ok('input' in lastSent(), 'LangChain sent a Responses body');
assert.equal(reply.text, plain.output_text);
assert.ok(reply.usage_metadata.output_tokens > 0);
let whole = null;
for await (const chunk of await llm.stream('Once upon a time')) whole = whole ? whole.concat(chunk) : chunk;
assert.equal(lastSent().stream, true);
assert.equal(whole.text, plain.output_text);

console.log(`responses: openai, ai-sdk and langchain OK (${events.length} events): ` +
            JSON.stringify(plain.output_text));
