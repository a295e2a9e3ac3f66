// Drives Threadline's /copilotkit routes with CopilotKit's own browser-side core, @copilotkit/core
// (the version examples/copilotkit installs), with no CopilotKit runtime in between: what a page's
// CopilotKitProvider, CopilotChat and useThreads do, without the page.
//
// Input (argv[2], JSON): { runtimeUrl, headers, agentId, threadId, text, transport? }
// Output (stdout, JSON): { agents, threadEndpoints, transport, runMessages, connectedMessages,
//                          listed, renamed, archivedHidden, unarchived, afterDelete, errors }
import { createRequire } from "node:module";
import { fileURLToPath } from "node:url";

const example = fileURLToPath(new URL("../../examples/copilotkit/package.json", import.meta.url));
const require = createRequire(example);
const core = await import(require.resolve("@copilotkit/core"));
const { CopilotKitCore, CopilotKitCoreRuntimeConnectionStatus, ɵcreateThreadStore } = core;

// The core connects to its runtime only in a browser (it asks whether `window` exists).
globalThis.window ??= globalThis;
const spec = JSON.parse(process.argv[2]);
const errors = [];
const out = { errors };

async function until(check, what, ms = 20000) {
  const start = Date.now();
  for (;;) {
    const value = check();
    if (value) return value;
    if (Date.now() - start > ms) throw new Error(`timed out waiting for ${what}`);
    await new Promise((resolve) => setTimeout(resolve, 25));
  }
}

function plain(messages) {
  return messages.map((m) => ({ id: m.id, role: m.role, content: m.content ?? null, toolCalls: m.toolCalls?.length ?? 0 }));
}

try {
  // transport: "single" is CopilotKit's single-route form (an app's useSingleEndpoint); by default
  // core asks GET /info first and uses the routes.
  const options = { runtimeUrl: spec.runtimeUrl, headers: spec.headers, runtimeTransport: spec.transport };
  const kit = new CopilotKitCore(options);
  await until(() => kit.runtimeConnectionStatus === CopilotKitCoreRuntimeConnectionStatus.Connected
    || kit.runtimeConnectionStatus === CopilotKitCoreRuntimeConnectionStatus.Error, "the runtime's /info");
  out.agents = Object.keys(kit.agents);
  out.threadEndpoints = kit.threadEndpoints ?? null;
  out.transport = kit.runtimeTransport;

  // A chat: the proxied agent runs through /agent/<id>/run.
  const agent = kit.getAgent(spec.agentId);
  agent.threadId = spec.threadId;
  agent.addMessage({ id: "u1", role: "user", content: spec.text });
  await kit.runAgent({ agent });
  out.runMessages = plain(agent.messages);

  // Another page opening the thread: a fresh core, its agent connects through /agent/<id>/connect.
  const other = new CopilotKitCore(options);
  await until(() => other.runtimeConnectionStatus === CopilotKitCoreRuntimeConnectionStatus.Connected, "the second /info");
  const reopened = other.getAgent(spec.agentId);
  reopened.threadId = spec.threadId;
  await other.connectAgent({ agent: reopened });
  out.connectedMessages = plain(reopened.messages);

  // The thread list, as useThreads keeps it.
  // As useThreads makes it: through core's fetch, which wraps a call in the envelope in single-route form.
  const store = ɵcreateThreadStore({ fetch: kit.ɵruntimeFetch, onError: (error) => errors.push(String(error)) });
  store.start();
  const context = { runtimeUrl: spec.runtimeUrl, headers: spec.headers, agentId: spec.agentId };
  store.setContext(context);
  const loaded = () => { const s = store.getState(); return !s.isLoading && (s.threads.length || s.error) ? s : null; };
  let state = await until(loaded, "the thread list");
  out.listed = state.threads.map((t) => ({ id: t.id, name: t.name, archived: t.archived, agentId: t.agentId }));
  await store.renameThread(spec.threadId, "Renamed from CopilotKit");
  store.refresh();
  await new Promise((resolve) => setTimeout(resolve, 300));
  state = await until(loaded, "the list again");
  out.renamed = state.threads.find((t) => t.id === spec.threadId)?.name ?? null;
  await store.archiveThread(spec.threadId);
  store.refresh();
  await new Promise((resolve) => setTimeout(resolve, 300));
  out.archivedHidden = !store.getState().threads.some((t) => t.id === spec.threadId);
  store.setContext({ ...context, includeArchived: true });
  state = await until(loaded, "the list with archived threads");
  await store.unarchiveThread(spec.threadId);
  store.setContext(context);
  state = await until(loaded, "the list after unarchiving");
  out.unarchived = state.threads.some((t) => t.id === spec.threadId && !t.archived);
  await store.deleteThread(spec.threadId);
  store.refresh();
  await new Promise((resolve) => setTimeout(resolve, 300));
  out.afterDelete = store.getState().threads.map((t) => t.id);
  store.stop();
} catch (error) {
  errors.push(String(error?.stack ?? error));
}
process.stdout.write(JSON.stringify(out));
process.exit(0);
