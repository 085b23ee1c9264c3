// Builds the console into the Python package (layers/stepcrawl/console/static) with fixed file
// names (no content hashes): index.html, assets/app.js, assets/app.css. `npm run build` then
// writes static/build.json (scripts/build-info.mjs). Relative URLs (base "./") so the page
// works under any prefix; nothing is loaded from the network at run time.
import { fileURLToPath } from "node:url";
import { defineConfig } from "vite";

const outDir = fileURLToPath(new URL("../layers/stepcrawl/console/static", import.meta.url));

export default defineConfig({
  base: "./",
  publicDir: false,
  esbuild: { jsx: "automatic", legalComments: "none" },
  server: {
    // `npm run dev` against a running `stepcrawl serve` (STEPCRAWL_API=http://127.0.0.1:PORT).
    proxy: process.env.STEPCRAWL_API
      ? { "/api": { target: process.env.STEPCRAWL_API, changeOrigin: true } }
      : undefined,
  },
  build: {
    outDir,
    emptyOutDir: true,
    target: "es2020",
    sourcemap: false,
    cssCodeSplit: false,
    modulePreload: false,
    reportCompressedSize: false,
    chunkSizeWarningLimit: 2000,
    rollupOptions: {
      // @xyflow/react's "use client" banner means nothing in a plain client bundle.
      onwarn(warning, warn) {
        if (warning.code !== "MODULE_LEVEL_DIRECTIVE") warn(warning);
      },
      output: {
        entryFileNames: "assets/app.js",
        chunkFileNames: "assets/[name].js",
        assetFileNames: (info) =>
          (info.names ?? []).some((n) => n.endsWith(".css")) ? "assets/app.css" : "assets/[name][extname]",
        inlineDynamicImports: true,
      },
    },
  },
});
