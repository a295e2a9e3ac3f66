import { defineConfig } from "vite";
import react from "@vitejs/plugin-react";

// Two builds of the one page:
// - `npm run build` (dist/): the example's page, served by server.mjs with CopilotKit's runtime;
// - `npx vite build --mode app` (dist-app/): the page Threadline itself serves at /app/, signed in with
//   Django's session and talking straight to Threadline's /copilotkit routes (project/app_page.py).
export default defineConfig(({ mode }) => ({
  plugins: [react()],
  base: mode === "app" ? "/app/" : "/",
  build: { outDir: mode === "app" ? "dist-app" : "dist", emptyOutDir: true, chunkSizeWarningLimit: 4096 },
}));
