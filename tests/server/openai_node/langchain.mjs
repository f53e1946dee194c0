// LangChain JS (`@langchain/openai` ChatOpenAI on chat completions) against flashserve:
// withStructuredOutput(zod) by its default method for this model name (jsonSchema: it sends
// response_format json_schema) and by functionCalling (a tool forced by a named tool_choice), and
// bindTools with tool_choice "any" (sent as "required"), invoked and streamed. Every result
// validates (ajv).
// Usage: node langchain.mjs PORT API_KEY   (run by run.sh, which installs the packages beside it)
import assert from 'node:assert/strict';
import { ChatOpenAI } from '@langchain/openai';
import { z } from 'zod';
import { apiKey, assertValid, baseURL, lastSent, model, recordingFetch } from './common.mjs';

const options = { model, apiKey, temperature: 0, maxRetries: 0,
                  configuration: { baseURL, fetch: recordingFetch } };
const llm = new ChatOpenAI({ ...options, maxTokens: 120 });
const small = new ChatOpenAI({ ...options, maxTokens: 80 });  // beside tools in the prompt

const Character = z.object({
  name: z.string().max(12),
  mood: z.enum(['happy', 'sad', 'sleepy']),
  age: z.number().int().min(1).max(20),
  brave: z.boolean(),
});
const prompt = 'Describe the cat in the story.';

const byDefault = await llm.withStructuredOutput(Character, { name: 'character' }).invoke(prompt);
assert.equal(lastSent().response_format.type, 'json_schema', 'the default method is jsonSchema');
assertValid(z.toJSONSchema(Character), byDefault, 'withStructuredOutput (jsonSchema)');

// Through a tool the schema goes into the prompt, where stories260K's 512-token context leaves
// room for a tiny one (see tools.mjs).
const Pet = z.object({ kind: z.enum(['cat', 'dog']), sleepy: z.boolean() });
const viaTool = await small.withStructuredOutput(Pet, { name: 'pet', method: 'functionCalling',
                                                      includeRaw: true }).invoke('A pet?');
assert.deepEqual(lastSent().tool_choice, { type: 'function', function: { name: 'pet' } });
assert.equal(viaTool.raw.response_metadata.finish_reason, 'tool_calls');
assertValid(z.toJSONSchema(Pet), viaTool.parsed, 'withStructuredOutput (functionCalling)');

const Weather = z.object({ city: z.enum(['Paris', 'Oslo']) });
const withTools = small.bindTools([{ name: 'weather', schema: Weather }], { tool_choice: 'any' });
const reply = await withTools.invoke('Weather in Oslo?');
assert.equal(lastSent().tool_choice, 'required');
assert.equal(reply.tool_calls.length >= 1, true, JSON.stringify(reply));
for (const call of reply.tool_calls) {
  assert.equal(call.name, 'weather');
  assert.match(call.id, /^\S+$/);
  assertValid(z.toJSONSchema(Weather), call.args, 'bindTools call');
}
assert.equal(reply.invalid_tool_calls?.length ?? 0, 0);

// Streamed: the chunks' tool_call_chunks add up to the same call.
let whole = null;
for await (const chunk of await withTools.stream('Weather in Oslo?')) {
  whole = whole ? whole.concat(chunk) : chunk;
}
assert.equal(lastSent().stream, true);
assert.deepEqual(whole.tool_calls.map((c) => [c.name, c.args]),
                 reply.tool_calls.map((c) => [c.name, c.args]));

console.log(`langchain: withStructuredOutput and bindTools OK: ${JSON.stringify(byDefault)} ` +
            `${JSON.stringify(viaTool.parsed)} ${JSON.stringify(reply.tool_calls[0].args)}`);
