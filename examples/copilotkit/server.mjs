// The example's server: the built page (dist/) and CopilotKit's runtime at /api/copilotkit,
// which reaches Threadline through HttpAgent. The AG-UI token stays here; the browser never
// sees it.
//
//   THREADLINE_URL    Threadline's address            (default http://127.0.0.1:8000)
//   THREADLINE_AGENT  the Threadline agent to talk to (default coder)
//   AGUI_TOKEN        Threadline's AG-UI token         (required; `make run` prints it)
//   PORT, HOST        where this server listens        (default 127.0.0.1:3000)

import { createServer } from "node:http";
import { readFile, stat } from "node:fs/promises";
import { extname, join, normalize } from "node:path";
import { fileURLToPath } from "node:url";
import { HttpAgent } from "@ag-ui/client";
import { CopilotRuntime } from "@copilotkit/runtime/v2";
import { createCopilotNodeListener } from "@copilotkit/runtime/v2/node";
import { ThreadlineAgentRunner } from "./threadline-runner.mjs";

const THREADLINE_URL = (process.env.THREADLINE_URL ?? "http://127.0.0.1:8000").replace(/\/+$/, "");
const AGENT = process.env.THREADLINE_AGENT ?? "coder";
const TOKEN = process.env.AGUI_TOKEN;
const HOST = process.env.HOST ?? "127.0.0.1";
const PORT = Number(process.env.PORT ?? 3000);
const DIST = fileURLToPath(new URL("./dist/", import.meta.url));
const BASE_PATH = "/api/copilotkit";

if (!TOKEN) {
  console.error("AGUI_TOKEN is not set: give this server Threadline's AG-UI token (make run prints it).");
  process.exit(2);
}

const runtime = new CopilotRuntime({
  // The page talks to the "default" agent; it is Threadline's THREADLINE_AGENT.
  agents: {
    default: new HttpAgent({
      url: `${THREADLINE_URL}/agui/${AGENT}`,
      headers: { Authorization: `Bearer ${TOKEN}` },
    }),
  },
  runner: new ThreadlineAgentRunner({
    baseUrl: THREADLINE_URL,
    token: TOKEN,
    agentName: (agentId) => (agentId === "default" ? AGENT : agentId),
  }),
});
const copilot = createCopilotNodeListener({ runtime, basePath: BASE_PATH });

const TYPES = {
  ".html": "text/html; charset=utf-8",
  ".js": "text/javascript; charset=utf-8",
  ".css": "text/css; charset=utf-8",
  ".svg": "image/svg+xml",
  ".png": "image/png",
  ".woff2": "font/woff2",
  ".json": "application/json",
};

async function servePage(req, res) {
  const path = normalize(decodeURIComponent(new URL(req.url, "http://page").pathname)).replace(/^(\.\.[/\\])+/, "");
  let file = join(DIST, path);
  if (!file.startsWith(DIST) || !(await stat(file).then((s) => s.isFile(), () => false))) {
    file = join(DIST, "index.html"); // the page's own routes (?thread=...) all load the page
  }
  try {
    const body = await readFile(file);
    res.writeHead(200, { "Content-Type": TYPES[extname(file)] ?? "application/octet-stream" });
    res.end(body);
  } catch {
    res.writeHead(500, { "Content-Type": "text/plain" });
    res.end("The page is not built: run `npm run build` in examples/copilotkit.\n");
  }
}

const server = createServer((req, res) => {
  if (req.url === BASE_PATH || req.url.startsWith(`${BASE_PATH}/`)) return copilot(req, res);
  return servePage(req, res);
});
server.listen(PORT, HOST, () => {
  console.log(`The CopilotKit example is at http://${HOST}:${PORT}/ (Threadline: ${THREADLINE_URL}/agui/${AGENT})`);
});
for (const signal of ["SIGINT", "SIGTERM"]) {
  process.on(signal, () => {
    server.close();
    server.closeAllConnections();
    process.exit(0);
  });
}
