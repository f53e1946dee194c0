// Tool calling through the official `openai` npm client: tool_choice "required" (greedy and
// seeded) and a named function, whole and streamed (raw deltas, and the client's stream helper
// that assembles them), "auto", and parse() with zodFunction. Each call has an id, the tool's
// name and arguments that validate (ajv) against its parameters, with finish_reason
// "tool_calls". The conversation then goes on with the assistant's tool_calls message and a role
// "tool" result; bad tools and tool messages are typed 400s.
// Usage: node tools.mjs PORT API_KEY   (run by run.sh, which installs the packages beside it)
import assert from 'node:assert/strict';
import OpenAI from 'openai';
import { zodFunction } from 'openai/helpers/zod';
import { z } from 'zod';
import { apiKey, baseURL, model, parseValid } from './common.mjs';

const client = new OpenAI({ baseURL, apiKey, maxRetries: 0, timeout: 60000 });
// stories260K has a 512-token context and a 512-token vocabulary: the tools block that the server
// adds to the prompt costs ~230 tokens plus ~1 token per character of the tools' JSON, and a call
// ~80 tokens, so there is room for one tiny tool without a description.
const messages = [{ role: 'user', content: 'Weather in Paris?' }];
const weather = {
  type: 'object',
  properties: { city: { enum: ['Paris', 'Oslo'] },
                days: { type: 'integer', minimum: 1, maximum: 7 } },
  required: ['city', 'days'],
};
const tools = [{ type: 'function', function: { name: 'weather', parameters: weather } }];
const schemaOf = { weather };
const base = { model, messages, tools, max_tokens: 100, temperature: 0 };

// A finished assistant message with only tool calls, each valid; returns the calls.
function checkCalls(message, finish, names, what) {
  assert.equal(finish, 'tool_calls', `${what}: finish_reason`);
  assert.equal(message.role, 'assistant');
  assert.ok(message.content === null || message.content === '',
            `${what}: no content beside the forced call: ${JSON.stringify(message.content)}`);
  assert.ok(message.tool_calls?.length >= 1, `${what}: tool_calls`);
  const ids = new Set();
  for (const call of message.tool_calls) {
    assert.match(call.id, /^\S+$/, `${what}: call id`);
    ids.add(call.id);
    assert.equal(call.type, 'function');
    assert.ok(names.includes(call.function.name), `${what}: name ${call.function.name}`);
    parseValid(schemaOf[call.function.name], call.function.arguments, `${what} arguments`);
  }
  assert.equal(ids.size, message.tool_calls.length, `${what}: call ids are distinct`);
  return message.tool_calls;
}

// Reads a raw stream: content, finish_reason and the tool calls rebuilt from their deltas
// (index first, then id, type and name, then argument fragments).
async function collect(stream) {
  const calls = [];
  let content = '';
  let finish = null;
  let usage = null;
  for await (const chunk of stream) {
    if (chunk.usage) usage = chunk.usage;
    assert.equal(chunk.object, 'chat.completion.chunk');
    for (const c of chunk.choices) {
      content += c.delta.content ?? '';
      for (const d of c.delta.tool_calls ?? []) {
        assert.equal(typeof d.index, 'number');
        if (!calls[d.index]) {
          assert.equal(d.index, calls.length, 'calls start in order');
          assert.match(d.id ?? '', /^\S+$/, 'the first delta of a call has its id');
          assert.equal(d.type, 'function');
          assert.ok(d.function?.name, 'the first delta of a call has its name');
          calls[d.index] = { id: d.id, type: d.type,
                             function: { name: d.function.name, arguments: '' } };
        } else {
          assert.ok(!d.id && !d.function?.name, 'id and name come once');
        }
        calls[d.index].function.arguments += d.function?.arguments ?? '';
      }
      if (c.finish_reason) finish = c.finish_reason;
    }
  }
  return { message: { role: 'assistant', content: content || null, tool_calls: calls }, finish,
           usage };
}

// Without ids (they are per response), the calls as data.
const shape = (calls) => calls.map((c) => [c.function.name, c.function.arguments]);

// tool_choice "required": a call.
const required = await client.chat.completions.create({ ...base, tool_choice: 'required' });
assert.equal(required.object, 'chat.completion');
const requiredCalls = checkCalls(required.choices[0].message, required.choices[0].finish_reason,
                                 ['weather'], 'required');
const streamedRequired = await collect(await client.chat.completions.create(
  { ...base, tool_choice: 'required', stream: true, stream_options: { include_usage: true } }));
checkCalls(streamedRequired.message, streamedRequired.finish, ['weather'],
           'streamed required');
assert.deepEqual(shape(streamedRequired.message.tool_calls), shape(requiredCalls));
assert.equal(streamedRequired.usage.completion_tokens, required.usage.completion_tokens);

// Sampled (seeded, two choices): each choice is a valid call.
const sampled = await client.chat.completions.create({ ...base, tool_choice: 'required', n: 2,
                                                      temperature: 1, seed: 5 });
assert.equal(sampled.choices.length, 2);
for (const c of sampled.choices) checkCalls(c.message, c.finish_reason, ['weather'], 'sampled');

// A named function, one call.
const named = { type: 'function', function: { name: 'weather' } };
const one = await client.chat.completions.create({ ...base, tool_choice: named,
                                                  parallel_tool_calls: false });
const oneCalls = checkCalls(one.choices[0].message, one.choices[0].finish_reason, ['weather'],
                            'named');
assert.equal(oneCalls.length, 1);
const streamedOne = await collect(await client.chat.completions.create(
  { ...base, tool_choice: named, parallel_tool_calls: false, stream: true }));
checkCalls(streamedOne.message, streamedOne.finish, ['weather'], 'streamed named');
assert.deepEqual(shape(streamedOne.message.tool_calls), shape(oneCalls));

// "auto": the model may answer or call; a call it makes is well formed.
const auto = await client.chat.completions.create({ ...base, tool_choice: 'auto' });
if (auto.choices[0].finish_reason === 'tool_calls') {
  checkCalls(auto.choices[0].message, 'tool_calls', ['weather'], 'auto');
} else {
  assert.ok(['stop', 'length'].includes(auto.choices[0].finish_reason));
  assert.equal(typeof auto.choices[0].message.content, 'string');
}

// The client's stream helper assembles the deltas itself (and throws on malformed ones).
const runner = client.chat.completions.stream({ ...base, tool_choice: 'required' });
const final = await runner.finalChatCompletion();
checkCalls(final.choices[0].message, final.choices[0].finish_reason,
           ['weather'], 'stream helper');
assert.deepEqual(shape(final.choices[0].message.tool_calls), shape(requiredCalls));

// parse() with zodFunction: the arguments come back parsed.
const Lookup = z.object({ city: z.enum(['Paris', 'Oslo']) });
const parsed = await client.chat.completions.parse({
  ...base, max_tokens: 90, tools: [zodFunction({ name: 'lookup', parameters: Lookup })],
  tool_choice: { type: 'function', function: { name: 'lookup' } } });
const parsedCall = parsed.choices[0].message.tool_calls[0];
assert.equal(parsed.choices[0].finish_reason, 'tool_calls');
assert.equal(parsedCall.function.name, 'lookup');
assert.deepEqual(Lookup.parse(parsedCall.function.parsed_arguments),
                 parsedCall.function.parsed_arguments);
parseValid(z.toJSONSchema(Lookup), parsedCall.function.arguments, 'parse() arguments');

// The conversation goes on: the assistant's calls and a tool result are accepted, with the tools
// kept but tool_choice "none", and without tools. (With "auto" the tools block would not fit the
// 512-token context beside this history.)
const call = requiredCalls[0];
const followUp = [...messages, required.choices[0].message,
                  { role: 'tool', tool_call_id: call.id, content: 'sunny' }];
for (const extra of [{ tool_choice: 'none' }, { tools: undefined }]) {
  const next = await client.chat.completions.create({ ...base, ...extra, messages: followUp,
                                                     max_tokens: 10 });
  assert.equal(next.object, 'chat.completion');
  assert.ok(!next.choices[0].message.tool_calls?.length, 'no calls');
  assert.ok(['stop', 'length'].includes(next.choices[0].finish_reason));
  assert.equal(typeof next.choices[0].message.content, 'string');
}

// Bad input is a typed 400 naming the parameter.
await assert.rejects(
  client.chat.completions.create({ ...base, tool_choice: { type: 'function',
                                                           function: { name: 'nope' } } }),
  (e) => e instanceof OpenAI.BadRequestError && String(e.param).startsWith('tool_choice'));
await assert.rejects(
  client.chat.completions.create({ ...base, tool_choice: 'required', tools: [
    { type: 'function', function: { name: 'f', parameters: { type: 'object', not: {} } } }] }),
  (e) => e instanceof OpenAI.BadRequestError && String(e.param).startsWith('tools'));
await assert.rejects(
  client.chat.completions.create({ ...base, messages: [...messages, required.choices[0].message,
                                                       { role: 'tool', content: 'x' }] }),
  (e) => e instanceof OpenAI.BadRequestError && String(e.param).startsWith('messages'));

console.log(`openai-node: tool calls OK: ` +
            `${JSON.stringify(shape(requiredCalls))} ${JSON.stringify(shape(oneCalls))}`);
