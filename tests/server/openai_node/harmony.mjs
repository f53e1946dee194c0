// A model that speaks harmony (gpt-oss's chat template and markers, random weights:
// make_harmony_model.py) through the official `openai` npm client: forced tool calls, whole and
// streamed, in chat and in the Responses API, with reasoning effort; the conversation goes on
// with the assistant's call (content null) and the tool's result; a free output never calls a
// function that was not offered. Random weights write junk, so only what the grammar and the
// parser guarantee is checked, and greedy outputs only against themselves.
// Usage: node harmony.mjs PORT API_KEY   (run by run_harmony.sh through run.sh)
import assert from 'node:assert/strict';
import OpenAI from 'openai';
import { apiKey, baseURL, parseValid } from './common.mjs';

const client = new OpenAI({ baseURL, apiKey, maxRetries: 0, timeout: 60000 });
const model = (await client.models.list()).data[0].id;
const weather = {
  type: 'object',
  properties: { city: { enum: ['Paris', 'Oslo'] },
                days: { type: 'integer', minimum: 1, maximum: 7 } },
  required: ['city', 'days'],
};
const time = { type: 'object', properties: { tz: { enum: ['UTC', 'CET'] } }, required: ['tz'] };
const tools = [
  { type: 'function', function: { name: 'weather', description: 'Weather', parameters: weather } },
  { type: 'function', function: { name: 'time', parameters: time } },  // no description
];
const messages = [{ role: 'user', content: 'Weather in Paris?' }];
const base = { model, messages, tools, max_tokens: 60, temperature: 0 };
const named = (name) => ({ type: 'function', function: { name } });

// Whole: the forced call, and nothing else.
const whole = await client.chat.completions.create(
  { ...base, tool_choice: named('weather'), reasoning_effort: 'high' });
const choice = whole.choices[0];
assert.equal(choice.finish_reason, 'tool_calls');
assert.equal(choice.message.content, null);
assert.equal(choice.message.tool_calls.length, 1);
const call = choice.message.tool_calls[0];
assert.match(call.id, /^call_/);
assert.equal(call.function.name, 'weather');
parseValid(weather, call.function.arguments, 'forced call arguments');

// Streamed: the same call, assembled from its deltas.
let args = '', name = '', finish = null;
for await (const chunk of await client.chat.completions.create(
  { ...base, tool_choice: named('weather'), reasoning_effort: 'high', stream: true })) {
  const c = chunk.choices[0];
  if (!c) continue;
  assert.equal(c.delta.content ?? '', '', 'no content beside the forced call');
  for (const d of c.delta.tool_calls ?? []) {
    assert.equal(d.index, 0);
    name += d.function?.name ?? '';
    args += d.function?.arguments ?? '';
  }
  finish = c.finish_reason ?? finish;
}
assert.equal(name, 'weather');
assert.equal(args, call.function.arguments, 'streamed arguments equal the whole ones');
assert.equal(finish, 'tool_calls');

// "required" with one tool, which has no description (the template needs one: it gets "").
const required = await client.chat.completions.create(
  { ...base, tools: [tools[1]], tool_choice: 'required', reasoning_effort: 'xhigh' });
assert.equal(required.choices[0].message.tool_calls[0].function.name, 'time');
parseValid(time, required.choices[0].message.tool_calls[0].function.arguments, 'required call');

// "required" with several: the grammar picks one of the names, and that function's arguments.
for (const seed of [1, 2, 3]) {
  const any = await client.chat.completions.create(
    { ...base, tool_choice: 'required', temperature: 1, seed });
  const c = any.choices[0];
  assert.equal(c.finish_reason, 'tool_calls', JSON.stringify(c.message));
  const f = c.message.tool_calls[0].function;
  parseValid({ weather, time }[f.name], f.arguments, `required among several (${f.name})`);
}

// The conversation goes on with the call (content null, as the client sends it) and its result.
const followed = [...messages, choice.message,
                  { role: 'tool', tool_call_id: call.id, content: '{"sky": "clear"}' }];
const next = await client.chat.completions.create(
  { ...base, messages: followed, tool_choice: named('time') });
assert.equal(next.choices[0].message.tool_calls[0].function.name, 'time');
parseValid(time, next.choices[0].message.tool_calls[0].function.arguments, 'second call');
const answer = await client.chat.completions.create(
  { ...base, messages: followed, tool_choice: 'none', max_tokens: 8 });
assert.equal(answer.choices[0].message.tool_calls, undefined);
assert.equal(typeof answer.choices[0].message.content, 'string');

// Free output: whatever the model writes, a call goes only to an offered function.
const free = await client.chat.completions.create({ ...base, tool_choice: 'auto', seed: 5,
                                                    temperature: 1 });
const freeChoice = free.choices[0];
assert.ok(['stop', 'length', 'tool_calls'].includes(freeChoice.finish_reason), freeChoice.finish_reason);
for (const c of freeChoice.message.tool_calls ?? []) {
  assert.ok(['weather', 'time'].includes(c.function.name), c.function.name);
}
if (!freeChoice.message.tool_calls) assert.equal(typeof freeChoice.message.content, 'string');

// Responses: a forced function_call item with reasoning.effort, whole and streamed.
const rtools = [{ type: 'function', name: 'weather', parameters: weather, strict: false }];
const ask = { model, input: 'Weather in Oslo?', tools: rtools, tool_choice: 'required',
              max_output_tokens: 60, temperature: 0, reasoning: { effort: 'low' } };
const r = await client.responses.create(ask);
assert.equal(r.status, 'completed');
const item = r.output.find((o) => o.type === 'function_call');
assert.ok(item, JSON.stringify(r.output));
assert.equal(item.name, 'weather');
parseValid(weather, item.arguments, 'responses call');
assert.equal(r.reasoning.effort, 'low');
let streamed = '', done = null;
for await (const e of await client.responses.create({ ...ask, stream: true })) {
  if (e.type === 'response.function_call_arguments.delta') streamed += e.delta;
  if (e.type === 'response.function_call_arguments.done') done = e.arguments;
}
assert.equal(streamed, item.arguments);
assert.equal(done, item.arguments);
// Its result goes back as a function_call_output after previous_response_id.
const after = await client.responses.create({
  model, previous_response_id: r.id, max_output_tokens: 8, temperature: 0,
  input: [{ type: 'function_call_output', call_id: item.call_id, output: '{"sky":"clear"}' }] });
assert.ok(['completed', 'incomplete'].includes(after.status), after.status);
console.log('harmony.mjs: ok');
