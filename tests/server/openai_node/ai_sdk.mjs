// The Vercel AI SDK (`ai` with `@ai-sdk/openai`, its chat completions model) against flashserve:
// generateObject and streamObject with a zod schema (sent as response_format json_schema), and a
// tool call, by toolChoice 'required' (generateText) and by a named tool (streamText), whose
// input validates.
// Usage: node ai_sdk.mjs PORT API_KEY   (run by run.sh, which installs the packages beside it)
import assert from 'node:assert/strict';
import { createOpenAI } from '@ai-sdk/openai';
import { generateObject, generateText, streamObject, streamText, tool } from 'ai';
import { z } from 'zod';
import { apiKey, assertValid, baseURL, lastSent, model, recordingFetch } from './common.mjs';

const provider = createOpenAI({ baseURL, apiKey, fetch: recordingFetch });
const chat = provider.chat(model);
const common = { model: chat, temperature: 0, maxOutputTokens: 120, maxRetries: 0 };

const Character = z.object({
  name: z.string().max(12),
  mood: z.enum(['happy', 'sad', 'sleepy']),
  age: z.number().int().min(1).max(20),
  brave: z.boolean(),
});
const generated = await generateObject({ ...common, schema: Character, schemaName: 'character',
                                         prompt: 'Describe the cat in the story.' });
assert.equal(lastSent().response_format.type, 'json_schema');
assert.equal(generated.finishReason, 'stop');
assertValid(z.toJSONSchema(Character), generated.object, 'generateObject');
assert.deepEqual(Character.parse(generated.object), generated.object);
assert.ok(generated.usage.outputTokens > 0);

// Streamed: partial objects, then the same object as the whole request's.
const streamedObject = streamObject({ ...common, schema: Character, schemaName: 'character',
                                      prompt: 'Describe the cat in the story.' });
let partials = 0;
for await (const partial of streamedObject.partialObjectStream) partials += partial ? 1 : 0;
assert.ok(partials > 1, 'several partial objects');
assert.deepEqual(await streamedObject.object, generated.object);
assert.equal(await streamedObject.finishReason, 'stop');
assert.equal(lastSent().stream, true);

// One tiny tool without a description: the server writes the tools into the prompt, and
// stories260K has a 512-token context (see tools.mjs).
const Weather = z.object({ city: z.enum(['Paris', 'Oslo']) });
const tools = { weather: tool({ inputSchema: Weather }) };
const schemaOf = { weather: Weather };
const toolParams = { ...common, tools, maxOutputTokens: 80 };

function checkCalls(toolCalls, names, what) {
  assert.ok(toolCalls.length >= 1, `${what}: a tool call`);
  for (const c of toolCalls) {
    assert.ok(names.includes(c.toolName), `${what}: ${c.toolName}`);
    assert.match(c.toolCallId, /^\S+$/);
    assert.ok(!c.invalid, `${what}: the SDK found the input valid: ${JSON.stringify(c)}`);
    assertValid(z.toJSONSchema(schemaOf[c.toolName]), c.input, `${what} input`);
  }
}

const called = await generateText({ ...toolParams, toolChoice: 'required',
                                    prompt: 'Weather in Oslo?' });
assert.equal(lastSent().tool_choice, 'required');
assert.equal(called.finishReason, 'tool-calls');
checkCalls(called.toolCalls, ['weather'], 'generateText required');

const streamed = streamText({ ...toolParams, toolChoice: { type: 'tool', toolName: 'weather' },
                              prompt: 'Weather in Paris?' });
const streamedCalls = await streamed.toolCalls;
assert.deepEqual(lastSent().tool_choice, { type: 'function', function: { name: 'weather' } });
assert.equal(await streamed.finishReason, 'tool-calls');
checkCalls(streamedCalls, ['weather'], 'streamText named');

console.log(`ai-sdk: generateObject and tool calls OK: ${JSON.stringify(generated.object)} ` +
            `${JSON.stringify(called.toolCalls.map((c) => [c.toolName, c.input]))}`);
