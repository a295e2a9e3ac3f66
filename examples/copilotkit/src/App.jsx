import { useState } from "react";
import { z } from "zod";
import {
  CopilotChat,
  CopilotKitProvider,
  UseAgentUpdate,
  useAgent,
  useFrontendTool,
  useInterrupt,
} from "@copilotkit/react-core/v2";

// One thread per page address: a reload (or a restart of either server) comes back to it.
function threadIdFromUrl() {
  const url = new URL(window.location.href);
  let thread = url.searchParams.get("thread");
  if (!thread) {
    thread = `thread-${crypto.randomUUID()}`;
    url.searchParams.set("thread", thread);
    window.history.replaceState(null, "", url);
  }
  return thread;
}

export function App() {
  const [threadId] = useState(threadIdFromUrl);
  const [error, setError] = useState(null);
  const showError = ({ error: failure }) => setError({ text: readable(failure), retry: opening(failure) });
  return (
    <CopilotKitProvider runtimeUrl="/api/copilotkit" onError={showError} showDevConsole={false}>
      <div className="layout">
        <main className="chat">
          <header>
            <h1>Threadline</h1>
            <span className="thread" data-testid="thread-id">{threadId}</span>
          </header>
          {error && (
            <div className="error" role="alert" data-testid="error">
              {error.text}
              {/* A thread that could not be opened is opened again by loading the page again. */}
              {error.retry && (
                <button data-testid="retry" onClick={() => window.location.reload()}>Retry</button>
              )}
              <button onClick={() => setError(null)}>Dismiss</button>
            </div>
          )}
          <ThemeTool />
          <Questions />
          <CopilotChat threadId={threadId} onError={showError} />
        </main>
        <StatePanels />
      </div>
    </CopilotKitProvider>
  );
}

// Whether the error is the runner's: the thread could not be opened (threadline-runner.mjs).
function opening(error) {
  return typeof error?.code === "string" && error.code.startsWith("threadline_");
}

// What went wrong, in words: a refused token, an unreachable server, or the server's own message.
function readable(error) {
  const text = String(error?.message ?? error ?? "unknown error");
  if (opening(error)) return text; // the runner's own sentence: what is wrong and what to do
  if (/\b401\b|token/i.test(text)) {
    return `Threadline refused the request: the AG-UI token is wrong or missing (${text}). Check AGUI_TOKEN where the example's server runs.`;
  }
  if (/fetch failed|ECONNREFUSED|Failed to fetch/i.test(text)) {
    return `Threadline could not be reached (${text}). Is it running (make run)?`;
  }
  return `Something went wrong: ${text}`;
}

// A browser tool: the agent changes this page's theme, and the conversation goes on with the result.
export function ThemeTool() {
  useFrontendTool({
    name: "change_theme",
    description: "Change the page's colour theme to light or dark.",
    parameters: z.object({ theme: z.enum(["light", "dark"]).describe("The theme to switch to.") }),
    handler: async ({ theme }) => {
      document.documentElement.dataset.theme = theme;
      return `The page's theme is now ${theme}.`;
    },
  });
  return null;
}

// Approvals and questions from Threadline arrive as AG-UI interrupts; so do an MCP server's questions
// mid-call (reason "mcp:elicitation"), whose form is drawn from the interrupt's responseSchema.
export function Questions({ agentId } = {}) {
  useInterrupt({
    agentId,
    render: ({ interrupt, resolve }) =>
      interrupt?.reason === "mcp:elicitation" ? (
        <ElicitationCard interrupt={interrupt} resolve={resolve} />
      ) : interrupt?.reason === "input_required" ? (
        <QuestionCard interrupt={interrupt} resolve={resolve} />
      ) : (
        <ApprovalCard interrupt={interrupt} resolve={resolve} />
      ),
  });
  return null;
}

// The value a form field starts with, and the value it sends, by the schema's type.
const FIELD_INPUT = { integer: "number", number: "number", boolean: "checkbox" };
const STRING_FORMATS = { email: "email", uri: "url", date: "date", "date-time": "datetime-local" };

function fieldStart(property) {
  if (property.default !== undefined) return property.default;
  if (property.type === "boolean") return false;
  if (property.type === "array") return [];
  return "";
}

function choicesOf(property) {
  if (Array.isArray(property.enum)) return property.enum.map((value, i) => [value, property.enumNames?.[i] ?? value]);
  if (Array.isArray(property.oneOf)) return property.oneOf.map((option) => [option.const, option.title ?? option.const]);
  return null;
}

function ElicitationField({ name, property, required, value, onChange }) {
  const label = `${property.title ?? name}${required ? " *" : ""}`;
  const choices = choicesOf(property);
  const items = property.type === "array" ? choicesOf(property.items ?? {}) ?? choicesOf({ oneOf: property.items?.anyOf }) : null;
  let input;
  if (items) {
    input = items.map(([option, title]) => (
      <label key={option} className="choice">
        <input
          type="checkbox"
          data-testid={`elicit-${name}-${option}`}
          checked={value.includes(option)}
          onChange={(event) => onChange(event.target.checked ? [...value, option] : value.filter((v) => v !== option))}
        />
        {title}
      </label>
    ));
  } else if (choices) {
    input = (
      <select data-testid={`elicit-${name}`} value={value} onChange={(event) => onChange(event.target.value)}>
        <option value="" />
        {choices.map(([option, title]) => <option key={option} value={option}>{title}</option>)}
      </select>
    );
  } else if (property.type === "boolean") {
    input = <input type="checkbox" data-testid={`elicit-${name}`} checked={value} onChange={(event) => onChange(event.target.checked)} />;
  } else {
    input = (
      <input
        type={FIELD_INPUT[property.type] ?? STRING_FORMATS[property.format] ?? "text"}
        data-testid={`elicit-${name}`}
        min={property.minimum}
        max={property.maximum}
        value={value}
        onChange={(event) => onChange(event.target.value)}
      />
    );
  }
  return (
    <div className="field">
      <label>{label}</label> {input}
      {property.description && <small>{property.description}</small>}
    </div>
  );
}

function ElicitationCard({ interrupt, resolve }) {
  const asked = interrupt?.metadata ?? {};
  const schema = interrupt?.responseSchema ?? {};
  const properties = asked.mode === "url" ? {} : schema.properties ?? {};
  const required = new Set(schema.required ?? []);
  const [values, setValues] = useState(() =>
    Object.fromEntries(Object.entries(properties).map(([name, property]) => [name, fieldStart(property)])),
  );
  const [sent, setSent] = useState(false);
  const answer = (payload) => {
    setSent(true);
    resolve(payload, interrupt.id);
  };
  // What the form sends: numbers as numbers, empty optional fields left out (the server's schema decides).
  const content = () =>
    Object.fromEntries(
      Object.entries(values)
        .filter(([name, value]) => required.has(name) || (value !== "" && !(Array.isArray(value) && value.length === 0)))
        .map(([name, value]) => {
          const type = properties[name]?.type;
          return [name, (type === "integer" || type === "number") && value !== "" ? Number(value) : value];
        }),
    );
  const accept = (event) => {
    event.preventDefault();
    answer(asked.mode === "url" ? { action: "accept" } : { action: "accept", content: content() });
  };
  return (
    <form className="card elicitation" data-testid="elicitation" onSubmit={accept}>
      <p className="who">The MCP server <strong>{asked.server}</strong> asks, for its tool {asked.tool}:</p>
      <p className="message">{interrupt?.message}</p>
      {asked.mode === "url" ? (
        <p data-testid="elicitation-url">
          Opens a page on <strong data-testid="elicitation-domain">{asked.domain}</strong>:{" "}
          <a href={asked.url} target="_blank" rel="noopener noreferrer">{asked.url}</a>
        </p>
      ) : (
        Object.entries(properties).map(([name, property]) => (
          <ElicitationField
            key={name}
            name={name}
            property={property}
            required={required.has(name)}
            value={values[name]}
            onChange={(value) => setValues((before) => ({ ...before, [name]: value }))}
          />
        ))
      )}
      <div className="buttons">
        <button data-testid="elicitation-accept" type="submit" disabled={sent}>
          {asked.mode === "url" ? "Done" : "Send"}
        </button>
        <button data-testid="elicitation-decline" type="button" disabled={sent} onClick={() => answer({ action: "decline" })}>
          Decline
        </button>
        <button data-testid="elicitation-cancel" type="button" disabled={sent} onClick={() => answer({ action: "cancel" })}>
          Cancel
        </button>
      </div>
    </form>
  );
}

function ApprovalCard({ interrupt, resolve }) {
  const [reason, setReason] = useState("");
  const [sent, setSent] = useState(false);
  const answer = (payload) => {
    setSent(true);
    resolve(payload, interrupt.id);
  };
  const diff = interrupt?.metadata?.diff;
  return (
    <div className="card approval" data-testid="approval">
      <pre className="message">{interrupt?.message}</pre>
      {diff && <pre className="diff" data-testid="approval-diff">{diff}</pre>}
      <div className="buttons">
        <button data-testid="approve" disabled={sent} onClick={() => answer({ approved: true })}>Approve</button>
        <button data-testid="approve-always" disabled={sent} onClick={() => answer({ approved: true, always: true })}>
          Approve always
        </button>
        <input
          data-testid="deny-reason"
          aria-label="Reason to deny"
          placeholder="Why not? (optional)"
          value={reason}
          onChange={(event) => setReason(event.target.value)}
        />
        <button data-testid="deny" disabled={sent} onClick={() => answer({ approved: false, reason })}>Deny</button>
      </div>
    </div>
  );
}

function QuestionCard({ interrupt, resolve }) {
  const [text, setText] = useState("");
  const [sent, setSent] = useState(false);
  const send = (event) => {
    event.preventDefault();
    setSent(true);
    resolve({ answer: text }, interrupt.id);
  };
  return (
    <form className="card question" data-testid="question" onSubmit={send}>
      <p className="message">{interrupt?.message}</p>
      <input
        data-testid="answer-text"
        aria-label="Your answer"
        value={text}
        onChange={(event) => setText(event.target.value)}
      />
      <button data-testid="answer" type="submit" disabled={sent}>Answer</button>
    </form>
  );
}

// The thread's shared state, as Threadline keeps it; it updates live as STATE_DELTA events arrive.
export function StatePanels({ agentId } = {}) {
  const { agent } = useAgent({ agentId, updates: [UseAgentUpdate.OnStateChanged, UseAgentUpdate.OnRunStatusChanged] });
  const state = agent.state ?? {};
  const todos = state.todos ?? [];
  const files = state.files ?? [];
  const subAgents = state.subAgents ?? [];
  const usage = state.tokenUsage;
  return (
    <aside className="panels">
      <section data-testid="plan">
        <h2>Plan</h2>
        {todos.length === 0 ? <p className="empty">No plan yet.</p> : (
          <ul>
            {todos.map((todo) => (
              <li key={todo.id ?? todo.content} className={todo.status}>
                <span className="mark">{{ completed: "✓", in_progress: "…" }[todo.status] ?? "○"}</span> {todo.content}
              </li>
            ))}
          </ul>
        )}
      </section>
      <section data-testid="files">
        <h2>Files touched</h2>
        {files.length === 0 ? <p className="empty">None yet.</p> : (
          <ul>
            {files.map((file) => <li key={file.path}><code>{file.path}</code> {file.action}</li>)}
          </ul>
        )}
      </section>
      <section data-testid="subagents">
        <h2>Sub-agents</h2>
        {subAgents.length === 0 ? <p className="empty">None yet.</p> : (
          <ul>
            {subAgents.map((child) => (
              <li key={child.id}>
                <strong>{child.role || "sub-agent"}</strong> <span className="status">{child.status}</span>
                {child.summary && <p>{child.summary}</p>}
                {child.error && <p className="failed">{child.error}</p>}
              </li>
            ))}
          </ul>
        )}
      </section>
      <section data-testid="usage">
        <h2>Tokens</h2>
        {!usage ? <p className="empty">No model call yet.</p> : (
          <dl>
            {/* promptTokens is the live context (the latest model call's whole prompt), against
                contextWindow; the total* counts are what the thread has spent, sub-agents included. */}
            <dt>context</dt>
            <dd>
              <span data-testid="prompt-tokens">{usage.promptTokens ?? 0}</span> of {usage.contextWindow ?? "?"}
              {usage.contextWindow ? ` (${Math.round((100 * (usage.promptTokens ?? 0)) / usage.contextWindow)}%)` : ""}
            </dd>
            <dt>spent in / out</dt>
            <dd data-testid="spent-tokens">{usage.totalPromptTokens ?? 0} / {usage.totalCompletionTokens ?? 0}</dd>
            <dt>cache read / write</dt>
            <dd>{usage.totalCacheReadTokens ?? 0} / {usage.totalCacheWriteTokens ?? 0}</dd>
            <dt>cost</dt><dd data-testid="cost">${Number(usage.cost ?? 0).toFixed(6)}</dd>
          </dl>
        )}
      </section>
    </aside>
  );
}
