// Structured outputs through the official `openai` npm client: response_format json_schema
// (strict) whole and streamed, on chat and on completions, json_object, chat.completions.parse
// with a zod schema, and the guided_* extension fields. Replies finish with "stop" and validate
// (ajv); a schema the server cannot honour is a 400.
// Usage: node structured.mjs PORT API_KEY   (run by run.sh, which installs the packages beside it)
import assert from 'node:assert/strict';
import OpenAI from 'openai';
import { zodResponseFormat } from 'openai/helpers/zod';
import { z } from 'zod';
import { apiKey, assertValid, baseURL, model, parseValid } from './common.mjs';

const client = new OpenAI({ baseURL, apiKey, maxRetries: 0, timeout: 60000 });
const messages = [{ role: 'system', content: 'You describe characters as JSON.' },
                  { role: 'user', content: 'Describe the cat in the story.' }];
const base = { model, messages, max_tokens: 120, temperature: 0 };

// Small and closed so that a tiny model finishes well inside max_tokens.
const schema = {
  type: 'object',
  properties: {
    name: { type: 'string', maxLength: 12 },
    mood: { type: 'string', enum: ['happy', 'sad', 'sleepy'] },
    age: { type: 'integer', minimum: 1, maximum: 20 },
    friends: { type: 'array', items: { type: 'string', enum: ['dog', 'bird', 'fish'] },
               maxItems: 2 },
    brave: { type: 'boolean' },
  },
  required: ['name', 'mood', 'age', 'friends', 'brave'],
  additionalProperties: false,
};
const response_format = { type: 'json_schema',
                          json_schema: { name: 'character', schema, strict: true } };

const whole = await client.chat.completions.create({ ...base, response_format });
assert.equal(whole.object, 'chat.completion');
assert.match(whole.id, /\S/);
const wholeChoice = whole.choices[0];
assert.equal(wholeChoice.finish_reason, 'stop', JSON.stringify(wholeChoice));
assert.equal(wholeChoice.message.role, 'assistant');
assert.ok(!wholeChoice.message.tool_calls?.length, 'no tool calls without tools');
const character = parseValid(schema, wholeChoice.message.content, 'json_schema reply');

// Streamed: the concatenated deltas are the whole reply, and validate on their own.
const stream = await client.chat.completions.create({ ...base, response_format, stream: true });
let text = '';
let finish = null;
for await (const chunk of stream) {
  assert.equal(chunk.object, 'chat.completion.chunk');
  for (const c of chunk.choices) {
    text += c.delta.content ?? '';
    if (c.finish_reason) finish = c.finish_reason;
  }
}
assert.equal(finish, 'stop');
assert.equal(text, wholeChoice.message.content);
parseValid(schema, text, 'streamed json_schema reply');

// Seeded sampling stays inside the schema too.
const sampled = await client.chat.completions.create({ ...base, response_format, temperature: 1,
                                                      seed: 11, n: 2 });
for (const c of sampled.choices) {
  assert.equal(c.finish_reason, 'stop', JSON.stringify(c));
  parseValid(schema, c.message.content, 'seeded json_schema reply');
}

// The legacy completions endpoint takes response_format too.
const completion = await client.completions.create({ model, prompt: 'The cat:', max_tokens: 120,
                                                     temperature: 0, response_format });
assert.equal(completion.choices[0].finish_reason, 'stop');
parseValid(schema, completion.choices[0].text, 'completions json_schema reply');

// json_object: any JSON object.
const anyObject = await client.chat.completions.create({
  ...base, max_tokens: 60, response_format: { type: 'json_object' } });
if (anyObject.choices[0].finish_reason === 'stop') {
  parseValid({ type: 'object' }, anyObject.choices[0].message.content, 'json_object reply');
} else {  // a tiny model's free-text key may run to max_tokens: still the start of an object
  assert.equal(anyObject.choices[0].finish_reason, 'length');
  assert.match(anyObject.choices[0].message.content, /^\{\s*("|\})/);
}

// The client's zod helper: the schema it derives is sent, and `parsed` comes back typed.
const Pet = z.object({
  kind: z.enum(['cat', 'dog', 'bird']),
  legs: z.number().int().min(0).max(4),
  sleepy: z.boolean(),
});
const pf = zodResponseFormat(Pet, 'pet');
const parsed = await client.chat.completions.parse({ ...base, response_format: pf });
const pc = parsed.choices[0];
assert.equal(pc.finish_reason, 'stop', JSON.stringify(pc));
assert.deepEqual(Pet.parse(pc.message.parsed), pc.message.parsed);
assertValid(pf.json_schema.schema, pc.message.parsed, 'parse() reply');
assert.deepEqual(pc.message.parsed, JSON.parse(pc.message.content));

// vLLM's extension fields, passed through the client as extra body fields.
const choice = await client.chat.completions.create({
  ...base, guided_choice: ['yes', 'no', 'maybe'] });
assert.equal(choice.choices[0].finish_reason, 'stop');
assert.ok(['yes', 'no', 'maybe'].includes(choice.choices[0].message.content),
          choice.choices[0].message.content);
const regex = await client.chat.completions.create({ ...base, guided_regex: '[a-z]{2,6}-[0-9]{3}' });
assert.equal(regex.choices[0].finish_reason, 'stop');
assert.match(regex.choices[0].message.content, /^[a-z]{2,6}-[0-9]{3}$/);
const guidedJson = await client.chat.completions.create({ ...base, guided_json: schema });
assert.equal(guidedJson.choices[0].finish_reason, 'stop');
parseValid(schema, guidedJson.choices[0].message.content, 'guided_json reply');

// Under strict, a schema the server cannot enforce exactly is a typed 400, never a looser
// grammar (without strict it is best effort: docs/STRUCTURED_OUTPUTS.md).
await assert.rejects(
  client.chat.completions.create({ ...base, response_format: {
    type: 'json_schema',
    json_schema: { name: 'x', strict: true, schema: { type: 'object', not: {} } } } }),
  (e) => e instanceof OpenAI.BadRequestError && e.status === 400 &&
         String(e.param).startsWith('response_format'));

console.log(`openai-node: structured outputs OK: ` +
            `${JSON.stringify(character)} ${pc.message.content}`);
