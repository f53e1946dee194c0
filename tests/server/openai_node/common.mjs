// What the structured-output and tool-call client tests share: the server address from argv, a
// fetch that records each request body (to check what a client library really sent), and JSON
// Schema validation by ajv (draft-07 or 2020-12, as the schema's $schema says; 2020-12 without).
// Imported by the *.mjs tests that run.sh copies beside node_modules.
import assert from 'node:assert/strict';
import Ajv07 from 'ajv';
import Ajv2020 from 'ajv/dist/2020.js';

const [port, apiKey] = process.argv.slice(2);
export const baseURL = `http://127.0.0.1:${port}/v1`;
export { apiKey };
export const model = 'stories260K';

// The bodies of the requests sent through recordingFetch, parsed, in order.
export const sentBodies = [];
export async function recordingFetch(url, init) {
  if (init?.body) sentBodies.push(JSON.parse(init.body));
  return fetch(url, init);
}
export function lastSent() { return sentBodies[sentBodies.length - 1]; }

const options = { strict: false, allErrors: true };
const ajv07 = new Ajv07(options);
const ajv2020 = new Ajv2020(options);

// Asserts that `value` is valid under the JSON Schema `schema`, with ajv's errors on failure.
export function assertValid(schema, value, what) {
  const ajv = String(schema.$schema).includes('draft-07') ? ajv07 : ajv2020;
  const validate = ajv.compile(schema);
  assert.ok(validate(value), `${what}: ${JSON.stringify(value)} does not match the schema: ` +
                             ajv.errorsText(validate.errors));
}

// Parses a JSON text (a message's content or a call's arguments) and validates it.
export function parseValid(schema, text, what) {
  assert.equal(typeof text, 'string', `${what} is a string`);
  let value;
  assert.doesNotThrow(() => { value = JSON.parse(text); }, `${what} is JSON: ${text}`);
  assertValid(schema, value, what);
  return value;
}
