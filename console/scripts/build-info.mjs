// Writes layers/stepcrawl/console/static/build.json: {"sources_sha256": H}, where H is the
// SHA-256 over the console's sources, so a test can tell sources edited without a rebuild.
// The files: package-lock.json, package.json, index.html, vite.config.*, and every file under
// src/ (recursively), as POSIX paths relative to console/, sorted by code point; for each,
// in that order, the hash is updated with  path + "\n" + <the file's bytes> + "\n".
import { createHash } from "node:crypto";
import { readdirSync, readFileSync, writeFileSync } from "node:fs";
import { dirname, join, relative, sep } from "node:path";
import { fileURLToPath } from "node:url";

const root = dirname(dirname(fileURLToPath(import.meta.url)));
const out = join(root, "..", "layers", "stepcrawl", "console", "static", "build.json");

function walk(dir) {
  return readdirSync(dir, { withFileTypes: true }).flatMap((e) =>
    e.isDirectory() ? walk(join(dir, e.name)) : e.isFile() ? [join(dir, e.name)] : [],
  );
}

const top = ["package-lock.json", "package.json", "index.html"];
const files = [
  ...top.map((f) => join(root, f)),
  ...readdirSync(root)
    .filter((f) => /^vite\.config\.[^/]+$/.test(f))
    .map((f) => join(root, f)),
  ...walk(join(root, "src")),
]
  .map((f) => relative(root, f).split(sep).join("/"))
  .sort((a, b) => (a < b ? -1 : a > b ? 1 : 0));

const hash = createHash("sha256");
for (const rel of files) {
  hash.update(rel + "\n");
  hash.update(readFileSync(join(root, rel)));
  hash.update("\n");
}
const sources_sha256 = hash.digest("hex");
writeFileSync(out, JSON.stringify({ sources_sha256 }) + "\n");
console.log(`build.json: sources_sha256 ${sources_sha256} over ${files.length} files`);
