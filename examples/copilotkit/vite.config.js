import { defineConfig } from "vite";
import react from "@vitejs/plugin-react";

// The page is built once (`npm run build`) and served by server.mjs with the runtime.
export default defineConfig({
  plugins: [react()],
  build: { outDir: "dist", emptyOutDir: true, chunkSizeWarningLimit: 4096 },
});
