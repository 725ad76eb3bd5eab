/**
 * The import rules of docs/architecture.md, checked on every source file: each file belongs
 * to the layer whose folder holds it (longest match in the rules table), and may import only
 * the layers that table lists for its own; shipped code (src/, harness/) imports only Node
 * built-ins and the package's `dependencies`, never a devDependency; only
 * src/native/binding.ts loads the addon. The table is read from the doc itself, so the doc
 * and the check cannot drift apart.
 */
import { test } from 'uvu';
import * as assert from 'uvu/assert';
import { readdirSync, readFileSync, statSync } from 'node:fs';
import path from 'node:path';
import { fileURLToPath } from 'node:url';

const root = path.resolve(path.dirname(fileURLToPath(import.meta.url)), '..', '..', '..');

interface Layer {
  name: string;
  /** Folder or file, relative to the package root (folders end in '/'). */
  where: string;
  /** Names of the layers it may import, or '*' for any of src/. */
  mayImport: Set<string>;
}

/** The rows of the table under "## Import rules": | `name` | `where` | `a`, `b` ... |. */
function rules(): Layer[] {
  const doc = readFileSync(path.join(root, 'docs', 'architecture.md'), 'utf8');
  const section = doc.split(/^## /m).find((s) => s.startsWith('Import rules'));
  assert.ok(section, 'docs/architecture.md has no "## Import rules" section');
  const layers: Layer[] = [];
  for (const line of section.split('\n')) {
    const m = /^\|\s*`([\w-]+)`\s*\|\s*`([^`]+)`\s*\|([^|]*)\|/.exec(line);
    if (!m) continue;
    const names = [...m[3].matchAll(/`([\w*-]+)`/g)].map((x) => x[1]);
    layers.push({ name: m[1], where: m[2], mayImport: new Set(names) });
  }
  assert.ok(layers.length >= 10, `only ${layers.length} rules parsed from docs/architecture.md`);
  return layers;
}

function sources(dir: string): string[] {
  const out: string[] = [];
  for (const name of readdirSync(path.join(root, dir))) {
    const rel = path.join(dir, name);
    if (statSync(path.join(root, rel)).isDirectory()) out.push(...sources(rel));
    else if (/\.(ts|mts|mjs)$/.test(name) && !name.endsWith('.d.ts')) out.push(rel);
  }
  return out;
}

function layerOf(layers: Layer[], file: string): Layer | undefined {
  let best: Layer | undefined;
  for (const l of layers) {
    const hit = l.where.endsWith('/') ? file.startsWith(l.where) : file === l.where;
    if (hit && (!best || l.where.length > best.where.length)) best = l;
  }
  return best;
}

/** Module specifiers of real import statements and dynamic imports (comments stripped). */
function imports(file: string): string[] {
  const text = readFileSync(path.join(root, file), 'utf8')
    .replace(/\/\*[\s\S]*?\*\//g, '')
    .replace(/(^|[^:'"`])\/\/.*$/gm, '$1');
  const out: string[] = [];
  for (const m of text.matchAll(/^\s*(?:import|export)\b[^;'"]*?\bfrom\s*['"]([^'"]+)['"]|^\s*import\s+['"]([^'"]+)['"]|\bimport\(\s*['"]([^'"]+)['"]\s*\)/gm)) {
    out.push(m[1] ?? m[2] ?? m[3]);
  }
  return out;
}

const pkg = JSON.parse(readFileSync(path.join(root, 'package.json'), 'utf8')) as { dependencies: Record<string, string>; devDependencies: Record<string, string> };
const SHIPPED = ['src/', 'harness/'];
const files = ['src', 'harness', 'bench', 'test'].flatMap(sources);

test('every source file belongs to a layer of the rules table', () => {
  const layers = rules();
  const orphans = files.filter((f) => !layerOf(layers, f));
  assert.equal(orphans, [], `files outside every layer of docs/architecture.md: ${orphans.join(', ')}`);
});

test('no import crosses a rule of docs/architecture.md', () => {
  const layers = rules();
  const broken: string[] = [];
  for (const file of files) {
    const from = layerOf(layers, file);
    if (!from) continue;
    for (const spec of imports(file)) {
      if (!spec.startsWith('.')) continue;
      let target = path.normalize(path.join(path.dirname(file), spec));
      // Plain .mjs workers import the compiled files: judge them by their sources.
      if (target.startsWith('dist/')) target = target.slice(5);
      if (target.endsWith('.js')) target = `${target.slice(0, -3)}.ts`;
      const to = layerOf(layers, target);
      if (!to) {
        broken.push(`${file} imports ${spec}, which is outside every layer`);
        continue;
      }
      if (to === from) continue;
      const anySrc = from.mayImport.has('*') && to.where.startsWith('src/');
      if (!anySrc && !from.mayImport.has(to.name)) broken.push(`${file} (${from.name}) imports ${spec} (${to.name}); ${from.name} may import ${[...from.mayImport].join(', ') || 'nothing of weft'}`);
    }
  }
  assert.equal(broken, []);
});

test('shipped code imports Node built-ins and dependencies only, never a devDependency', () => {
  const broken: string[] = [];
  for (const file of files.filter((f) => SHIPPED.some((s) => f.startsWith(s)))) {
    for (const spec of imports(file)) {
      if (spec.startsWith('.') || spec.startsWith('node:')) continue;
      const name = spec.startsWith('@') ? spec.split('/').slice(0, 2).join('/') : spec.split('/')[0];
      if (!(name in pkg.dependencies)) broken.push(`${file} imports ${spec}${name in pkg.devDependencies ? ' (a devDependency)' : ' (not a dependency)'}`);
    }
  }
  assert.equal(broken, []);
});

test("benchkv (bench/kv/) reaches weft only through the package's public entry points", () => {
  const PUBLIC = new Set(['weftjs', 'weftjs/rpc', 'weftjs/delegation']);
  const broken: string[] = [];
  for (const file of files.filter((f) => f.startsWith('bench/kv/'))) {
    for (const spec of imports(file)) {
      if (spec.startsWith('weftjs') && !PUBLIC.has(spec)) broken.push(`${file} imports ${spec}`);
      if (spec.startsWith('.') && path.normalize(path.join(path.dirname(file), spec)).startsWith('src/')) broken.push(`${file} imports ${spec} (use 'weftjs', 'weftjs/rpc' or 'weftjs/delegation')`);
    }
  }
  assert.equal(broken, []);
});

test('only src/native/binding.ts loads native code', () => {
  const loaders = files.filter((f) => f.startsWith('src/') && /\bcreateRequire\b|\.node['"]/.test(readFileSync(path.join(root, f), 'utf8')));
  assert.equal(loaders, ['src/native/binding.ts']);
});

test.run();
