// Bundles src/index.js for browsers and prints the bundle's size as `METRIC bundle_bytes=N`.
import * as esbuild from "esbuild";

const result = await esbuild.build({
  entryPoints: ["src/index.js"],
  bundle: true,
  write: false,
  format: "esm",
  minify: false,
  target: "es2015",
  logLevel: "error",
});
const bytes = result.outputFiles.reduce((n, f) => n + f.contents.length, 0);
console.log(`METRIC bundle_bytes=${bytes}`);
