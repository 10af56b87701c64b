// Vite build of opsd's web UI. opsd serves index.html at `/` and every other built file
// under `/ui/` (see src/api/static.c), so the assets are addressed from /ui/.
import { defineConfig } from 'vite';

export default defineConfig({
  base: '/ui/',
  build: {
    outDir: 'dist',
    assetsDir: 'assets',
    emptyOutDir: true,
    target: 'es2022',
    chunkSizeWarningLimit: 400,
    // No inline data: URLs for modules, no external requests: every asset is a file opsd serves.
    assetsInlineLimit: 0,
  },
  server: {
    // `npm run dev` proxies the API to a running opsd (OPSD_URL, default the demo's address).
    proxy: {
      '/api': { target: process.env.OPSD_URL || 'http://127.0.0.1:8080', ws: true },
      '/metrics': process.env.OPSD_URL || 'http://127.0.0.1:8080',
      '/healthz': process.env.OPSD_URL || 'http://127.0.0.1:8080',
    },
  },
});
