import { useCallback, useEffect, useRef, useState } from "react";
import {
  CopilotChat,
  CopilotKitProvider,
  UseAgentUpdate,
  useAgent,
  useDefaultRenderTool,
  useThreads,
} from "@copilotkit/react-core/v2";
import { Questions, StatePanels, ThemeTool } from "./App.jsx";

// The page Threadline serves at /app/ (project/app_page.py): signed in with Django's session, it
// talks straight to Threadline's CopilotKit routes. The session cookie goes with every same-origin
// request; Django's CSRF check wants the token in a header, which the server put in the page.
const meta = (name) => document.querySelector(`meta[name="${name}"]`)?.content ?? "";
const RUNTIME_URL = meta("copilotkit-url") || "/copilotkit";
const AGENT = "coder";
const CSRF = { "X-CSRFToken": meta("csrf-token") };

// The open thread is in the address, so a reload (or a restart of Threadline) comes back to it.
function threadInUrl() {
  return new URL(window.location.href).searchParams.get("thread");
}

function showThread(threadId) {
  const url = new URL(window.location.href);
  url.searchParams.set("thread", threadId);
  window.history.pushState(null, "", url);
}

function newThreadId() {
  return `thread-${crypto.randomUUID()}`;
}

// useAttachments' onUpload: the file goes to Threadline once, and the message names its address.
async function upload(file) {
  const response = await fetch(`${RUNTIME_URL}/attachments`, {
    method: "POST",
    headers: { ...CSRF, "Content-Type": file.type || "application/octet-stream" },
    body: file,
  });
  const answer = await response.json().catch(() => ({}));
  if (!response.ok) throw new Error(answer?.error?.message ?? `the upload was refused (${response.status})`);
  return answer;
}

export function ThreadlineApp() {
  const [threadId, setThreadId] = useState(() => {
    const found = threadInUrl();
    if (found) return found;
    const made = newThreadId();
    const url = new URL(window.location.href);
    url.searchParams.set("thread", made);
    window.history.replaceState(null, "", url);
    return made;
  });
  const [error, setError] = useState(null);
  useEffect(() => {
    const back = () => setThreadId(threadInUrl() ?? newThreadId());
    window.addEventListener("popstate", back);
    return () => window.removeEventListener("popstate", back);
  }, []);
  const open = useCallback((id) => {
    showThread(id);
    setThreadId(id);
    setError(null);
  }, []);
  const showError = ({ error: failure }) => setError(String(failure?.message ?? failure ?? "unknown error"));
  return (
    <CopilotKitProvider runtimeUrl={RUNTIME_URL} headers={CSRF} onError={showError} showDevConsole={false}>
      <div className="layout app">
        <ThreadList current={threadId} open={open} />
        <main className="chat">
          <header>
            <h1>Threadline</h1>
            <span className="thread" data-testid="thread-id">{threadId}</span>
            <span className="user">
              <span data-testid="user">{meta("threadline-user")}</span>{" "}
              <form method="post" action={meta("logout-url")} className="logout">
                <input type="hidden" name="csrfmiddlewaretoken" value={CSRF["X-CSRFToken"]} />
                <button type="submit">Sign out</button>
              </form>
            </span>
          </header>
          {error && (
            <div className="error" role="alert" data-testid="error">
              {error}
              <button onClick={() => setError(null)}>Dismiss</button>
            </div>
          )}
          <ThemeTool />
          <ToolRenders />
          <Questions key={threadId} agentId={AGENT} />
          <CopilotChat
            key={threadId}
            agentId={AGENT}
            threadId={threadId}
            onError={showError}
            attachments={{
              enabled: true,
              accept: "image/*,application/pdf,text/plain,text/markdown,text/csv",
              onUpload: upload,
              onUploadFailed: ({ message }) => setError(message),
            }}
          />
        </main>
        <StatePanels agentId={AGENT} />
      </div>
    </CopilotKitProvider>
  );
}

// Every tool call the agent made, drawn by CopilotKit's default renderer, live and when reopened.
function ToolRenders() {
  useDefaultRenderTool();
  return null;
}

function ThreadList({ current, open }) {
  const [showArchived, setShowArchived] = useState(false);
  const {
    threads,
    isLoading,
    error,
    hasMoreThreads,
    isFetchingMoreThreads,
    fetchMoreThreads,
    renameThread,
    archiveThread,
    unarchiveThread,
    deleteThread,
    refetchThreads,
  } = useThreads({ agentId: AGENT, includeArchived: showArchived, limit: 50 });
  // A new thread's name is its first message, known once its run has started: the list is read
  // again when a run of the open thread ends.
  const { agent } = useAgent({ agentId: AGENT, updates: [UseAgentUpdate.OnRunStatusChanged] });
  // @ag-ui/client keeps the open approvals on the agent, not per thread, and refuses a run in any
  // thread while one is unanswered: they are dropped whenever another thread opens (from the list,
  // New thread, or the browser's Back), before it connects and brings its own back.
  useEffect(() => {
    agent.pendingInterrupts = [];
  }, [agent, current]);
  const wasRunning = useRef(false);
  useEffect(() => {
    if (wasRunning.current && !agent.isRunning) refetchThreads();
    wasRunning.current = agent.isRunning;
  }, [agent.isRunning, refetchThreads]);
  const [problem, setProblem] = useState(null);
  const attempt = (promise) => promise.then(() => setProblem(null), (failure) => setProblem(String(failure?.message ?? failure)));
  const remove = (id) => {
    if (!window.confirm("Delete this thread, its messages and its workspace?")) return;
    if (id === current) open(newThreadId());
    // A refused delete (a run still working on the thread) puts the thread back in the list.
    attempt(
      deleteThread(id).catch((failure) => {
        refetchThreads();
        throw failure;
      }),
    );
  };
  return (
    <nav className="threads" data-testid="threads">
      <button className="new" data-testid="new-thread" onClick={() => open(newThreadId())}>New thread</button>
      <label className="archived-toggle">
        <input
          type="checkbox"
          data-testid="show-archived"
          checked={showArchived}
          onChange={(event) => setShowArchived(event.target.checked)}
        />{" "}
        Show archived
      </label>
      {(error || problem) && <p className="failed" role="alert">{String(problem ?? error?.message ?? error)}</p>}
      {isLoading && threads.length === 0 && <p className="empty">Loading…</p>}
      {!isLoading && threads.length === 0 && <p className="empty">No threads yet.</p>}
      <ul>
        {threads.map((thread) => (
          <ThreadRow
            key={thread.id}
            thread={thread}
            current={thread.id === current}
            open={() => open(thread.id)}
            rename={(name) => attempt(renameThread(thread.id, name))}
            archive={() => attempt(thread.archived ? unarchiveThread(thread.id) : archiveThread(thread.id))}
            remove={() => remove(thread.id)}
          />
        ))}
      </ul>
      {hasMoreThreads && (
        <button className="more" data-testid="more-threads" disabled={isFetchingMoreThreads} onClick={fetchMoreThreads}>
          {isFetchingMoreThreads ? "Loading…" : "Older threads"}
        </button>
      )}
    </nav>
  );
}

function ThreadRow({ thread, current, open, rename, archive, remove }) {
  const [editing, setEditing] = useState(false);
  const [name, setName] = useState(thread.name ?? "");
  const save = (event) => {
    event.preventDefault();
    setEditing(false);
    if (name.trim() && name !== thread.name) rename(name.trim());
  };
  return (
    <li className={`thread-row${current ? " current" : ""}${thread.archived ? " archived" : ""}`} data-testid="thread-row" data-thread-id={thread.id}>
      {editing ? (
        <form onSubmit={save}>
          <input data-testid="rename-text" aria-label="Thread name" autoFocus value={name} onChange={(event) => setName(event.target.value)} />
          <button data-testid="rename-save" type="submit">Save</button>
        </form>
      ) : (
        <button className="open" data-testid="open-thread" onClick={open} aria-current={current ? "page" : undefined}>
          {thread.name || "New thread"}
        </button>
      )}
      <span className="actions">
        <button data-testid="rename" title="Rename" onClick={() => { setName(thread.name ?? ""); setEditing(true); }}>✎</button>
        <button data-testid="archive" title={thread.archived ? "Unarchive" : "Archive"} onClick={archive}>
          {thread.archived ? "⤒" : "⤓"}
        </button>
        <button data-testid="delete" title="Delete" onClick={remove}>✕</button>
      </span>
    </li>
  );
}
