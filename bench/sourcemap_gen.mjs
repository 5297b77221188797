// Generates the source map benchmark's service (bench/bench_sourcemap.sh):
// FILES TypeScript files of FUNCS functions each, a main that calls every
// function once (so V8 names each in its perf map) and then waits, bundled
// and minified by esbuild (tests/jsbundle's) with a linked map.
//
//   node bench/sourcemap_gen.mjs OUTDIR [FILES] [FUNCS]
import { mkdirSync, writeFileSync, statSync } from "node:fs";
import { createRequire } from "node:module";
import { dirname, join } from "node:path";
import { fileURLToPath } from "node:url";

const here = dirname(fileURLToPath(import.meta.url));
const require = createRequire(join(here, "../tests/jsbundle/package.json"));
const esbuild = require("esbuild");

const [out, files = "450", funcs = "100"] = process.argv.slice(2);
const nf = Number(files), nfn = Number(funcs);
const src = join(out, "src");
mkdirSync(src, { recursive: true });
let main = "";
for (let f = 0; f < nf; f++) {
  let text = `// generated: module ${f}\n`;
  const names = [];
  for (let k = 0; k < nfn; k++) {
    const name = `handlerNumber${k}OfModule${f}`;
    names.push(name);
    text +=
      `export function ${name}(request: { id: number; items: number[] }): number {\n` +
      `  let total = request.id * ${k + 1};\n` +
      `  for (const item of request.items) total = (total * 31 + item) % 1000003;\n` +
      `  if (total % ${(k % 7) + 2} === 0) total += request.items.length;\n` +
      `  return total;\n}\n`;
  }
  writeFileSync(join(src, `module${f}.ts`), text);
  main += `import { ${names.join(", ")} } from "./module${f}";\n`;
  main += `export const table${f} = [${names.join(", ")}];\n`;
}
main += `const tables = [${Array.from({ length: nf }, (_, f) => `table${f}`).join(", ")}];\n`;
main += `let sink = 0;\nfor (const t of tables) for (const fn of t) sink += fn({ id: 3, items: [1, 2, 3] });\n`;
main += `process.stdout.write(\`ready \${sink}\\n\`);\nsetTimeout(() => {}, 3600000);\n`;
writeFileSync(join(src, "main.ts"), main);
await esbuild.build({
  entryPoints: [join(src, "main.ts")],
  bundle: true,
  minify: true,
  sourcemap: "linked",
  platform: "node",
  outfile: join(out, "dist", "app.js"),
  logLevel: "warning",
});
const js = statSync(join(out, "dist", "app.js")).size;
const map = statSync(join(out, "dist", "app.js.map")).size;
console.log(`bundle ${js} bytes, map ${map} bytes, ${nf * nfn} functions`);
