// A CopilotKit AgentRunner that asks Threadline about threads instead of remembering them.
//
// CopilotKit's runtime answers a page's `connect` (sent when a page opens a thread) from
// its runner. The default, InMemoryAgentRunner, answers from this Node process's memory,
// so after a restart a reloaded page shows an empty chat although Threadline has the
// whole thread. This runner keeps `run` as it is (through the agent's HttpAgent) and
// answers the rest from Threadline:
//
//   connect   a hydrate POST (the thread's messages, its state document and any open
//             approval or question, without running the agent), then, when no question
//             is open, the thread's reattach stream (the latest run, followed live if it
//             is still going). Events the hydrate already showed are not sent twice.
//   isRunning this process's run in flight, else the thread's reattach stream: running
//             until it ends with a terminal event.
//   stop      Threadline's cancel (a run survives its HTTP request there, so closing the
//             connection alone would not stop it), then the local stop.
//
// A connect that fails (Threadline unreachable, the token refused, a server error) ends as an
// AG-UI RUN_ERROR whose message says in a sentence what is wrong and what to do, and whose code
// is `threadline_unreachable`, `threadline_unauthorized` or `threadline_unavailable`. CopilotKit's
// runtime closes a connect stream that errors without a word to the page (it logs it here), so
// an error thrown would leave the page an empty chat, as if the conversation were gone.
//
// To use it in your own runtime: new CopilotRuntime({ agents, runner: new
// ThreadlineAgentRunner({ baseUrl, token }) }), with agents that are HttpAgents pointed at
// `${baseUrl}/agui/<agent>`. Only this file and `@ag-ui/client` are needed.

import { InMemoryAgentRunner } from "@copilotkit/runtime/v2";
import { EventType, runHttpRequest, transformHttpEventStream } from "@ag-ui/client";
import { Observable } from "rxjs";

const MESSAGE_EVENTS = new Set([
  EventType.TEXT_MESSAGE_START,
  EventType.TEXT_MESSAGE_CONTENT,
  EventType.TEXT_MESSAGE_END,
  EventType.TEXT_MESSAGE_CHUNK,
]);
const TOOL_EVENTS = new Set([
  EventType.TOOL_CALL_START,
  EventType.TOOL_CALL_ARGS,
  EventType.TOOL_CALL_END,
  EventType.TOOL_CALL_CHUNK,
  EventType.TOOL_CALL_RESULT,
]);
const REASONING_EVENTS = new Set([
  EventType.REASONING_START,
  EventType.REASONING_MESSAGE_START,
  EventType.REASONING_MESSAGE_CONTENT,
  EventType.REASONING_MESSAGE_END,
  EventType.REASONING_MESSAGE_CHUNK,
  EventType.REASONING_END,
]);
const TERMINAL = new Set([EventType.RUN_FINISHED, EventType.RUN_ERROR]);

export class ThreadlineAgentRunner extends InMemoryAgentRunner {
  /**
   * @param {object} options
   * @param {string} options.baseUrl   Threadline's address, e.g. http://127.0.0.1:8000
   * @param {string} options.token     the AG-UI bearer token (kept on the server side)
   * @param {(agentId: string) => string} [options.agentName]  CopilotKit agent id -> Threadline agent
   * @param {typeof fetch} [options.fetch]
   */
  constructor({ baseUrl, token, agentName = (agentId) => agentId, fetch: fetchFn = fetch, ...rest }) {
    super(rest);
    this.baseUrl = baseUrl.replace(/\/+$/, "");
    this.token = token;
    this.agentName = agentName;
    this.fetch = fetchFn;
    // threadId -> { agent: Threadline agent name, runId } of the run this process started last.
    this.lastRuns = new Map();
  }

  headers(extra = {}) {
    return { ...extra, Authorization: `Bearer ${this.token}` };
  }

  threadUrl(agent, threadId) {
    return `${this.baseUrl}/agui/${encodeURIComponent(agent)}/threads/${encodeURIComponent(threadId)}`;
  }

  run(request) {
    this.lastRuns.set(request.threadId, {
      agent: this.agentName(request.agent.agentId ?? "default"),
      runId: request.input.runId,
    });
    return super.run(request);
  }

  connect(request) {
    const agent = this.agentName(request.agentId ?? "default");
    return new Observable((subscriber) => {
      const seen = new Set();
      let inner;
      let closed = false;
      const hydrateInput = {
        threadId: request.threadId,
        runId: `connect-${crypto.randomUUID()}`,
        messages: [],
        tools: [],
        context: [],
        state: {},
        forwardedProps: {},
      };
      let waiting = false;
      inner = this.events(`${this.baseUrl}/agui/${encodeURIComponent(agent)}`, {
        method: "POST",
        headers: this.headers({ "Content-Type": "application/json", Accept: "text/event-stream" }),
        body: JSON.stringify(hydrateInput),
      }).subscribe({
        next: (event) => {
          if (event.type === EventType.MESSAGES_SNAPSHOT) {
            for (const message of event.messages ?? []) {
              seen.add(message.id);
              for (const call of message.toolCalls ?? []) seen.add(call.id);
              if (message.toolCallId) seen.add(`result:${message.toolCallId}`);
            }
          }
          if (event.type === EventType.RUN_FINISHED && event.outcome?.type === "interrupt") waiting = true;
          subscriber.next(event);
        },
        error: (error) => this.failed(subscriber, error, request.threadId, hydrateInput.runId),
        complete: () => {
          if (closed) return;
          if (waiting) {
            // A question is open: the page asks it again; nothing runs until it is answered.
            subscriber.complete();
            return;
          }
          inner = this.followLatestRun(agent, request.threadId, seen).subscribe({
            next: (event) => subscriber.next(event),
            error: (error) => this.failed(subscriber, error, request.threadId, hydrateInput.runId),
            complete: () => subscriber.complete(),
          });
        },
      });
      return () => {
        closed = true;
        inner?.unsubscribe();
      };
    });
  }

  // A connect that could not reach the thread: a run of its own that ends in RUN_ERROR, which
  // the page shows, instead of an error CopilotKit's runtime would only log.
  failed(subscriber, error, threadId, runId) {
    const { code, message } = this.explain(error);
    console.error(`Threadline: could not open thread ${threadId}: ${describe(error)}`);
    subscriber.next({ type: EventType.RUN_STARTED, threadId, runId });
    subscriber.next({ type: EventType.RUN_ERROR, message, code });
    subscriber.complete();
  }

  // What a failed request to Threadline means to the person at the page, and what to do.
  explain(error) {
    const status = error?.status;
    const cannot = "so this conversation cannot be shown";
    if (status === 401 || status === 403) {
      return {
        code: "threadline_unauthorized",
        message:
          `Threadline refused this page's server (HTTP ${status}: its AG-UI token is wrong or missing), ${cannot}. ` +
          "Set AGUI_TOKEN where the example's server runs to the token Threadline printed at start, restart that server, then retry.",
      };
    }
    if (typeof status === "number") {
      const detail = error?.payload?.error?.message ?? "";
      return {
        code: "threadline_unavailable",
        message:
          `Threadline answered with an error (HTTP ${status}${detail ? `: ${detail}` : ""}), ${cannot} right now. ` +
          "Check Threadline's log, then retry.",
      };
    }
    return {
      code: "threadline_unreachable",
      message:
        `Threadline could not be reached at ${this.baseUrl} (${describe(error)}), ${cannot}. ` +
        "Start Threadline (make run) or point THREADLINE_URL at it, then retry.",
    };
  }

  // The thread's latest run from its start, followed live while it goes on; what the
  // hydrate showed (messages, tool calls and their results) is left out. The transcript has
  // no reasoning, so the run's reasoning is held until the run shows something the hydrate
  // did not (it is live: the reasoning goes before it) and dropped if the run ends first (it
  // was over: the reasoning would land after the answer it led to). A thread with no run
  // yet (404) is simply over.
  followLatestRun(agent, threadId, seen) {
    return new Observable((subscriber) => {
      let live = false;
      let held = [];
      const subscription = this.events(`${this.threadUrl(agent, threadId)}/events`, {
        method: "GET",
        headers: this.headers({ Accept: "text/event-stream" }),
      }, { notFoundIsEmpty: true }).subscribe({
        next: (event) => {
          if (event.type === EventType.MESSAGES_SNAPSHOT) return; // the hydrate's is newer
          if (MESSAGE_EVENTS.has(event.type) && seen.has(event.messageId)) return;
          if (TOOL_EVENTS.has(event.type)) {
            const key = event.type === EventType.TOOL_CALL_RESULT ? `result:${event.toolCallId}` : event.toolCallId;
            if (seen.has(key) || seen.has(event.toolCallId) && event.type !== EventType.TOOL_CALL_RESULT) return;
          }
          if (!live && REASONING_EVENTS.has(event.type)) {
            held.push(event);
            return;
          }
          if (!live && (MESSAGE_EVENTS.has(event.type) || TOOL_EVENTS.has(event.type))) {
            live = true;
            for (const reasoning of held) subscriber.next(reasoning);
            held = [];
          }
          if (TERMINAL.has(event.type)) {
            held = [];
            live = false;
          }
          subscriber.next(event);
        },
        error: (error) => subscriber.error(error),
        complete: () => subscriber.complete(),
      });
      return () => subscription.unsubscribe();
    });
  }

  // An SSE request to Threadline as AG-UI events (the parser HttpAgent itself uses).
  events(url, init, { notFoundIsEmpty = false } = {}) {
    return new Observable((subscriber) => {
      const controller = new AbortController();
      const subscription = transformHttpEventStream(
        runHttpRequest(() => this.fetch(url, { ...init, signal: controller.signal })),
      ).subscribe({
        next: (event) => subscriber.next(event),
        error: (error) => {
          if (notFoundIsEmpty && error?.status === 404) subscriber.complete();
          else subscriber.error(error);
        },
        complete: () => subscriber.complete(),
      });
      return () => {
        subscription.unsubscribe();
        controller.abort();
      };
    });
  }

  async isRunning(request) {
    if (await super.isRunning(request)) return true;
    const agent = this.lastRuns.get(request.threadId)?.agent ?? this.agentName("default");
    return new Promise((resolve) => {
      let open = false;
      const subscription = this.events(`${this.threadUrl(agent, request.threadId)}/events`, {
        method: "GET",
        headers: this.headers({ Accept: "text/event-stream" }),
      }, { notFoundIsEmpty: true }).subscribe({
        next: (event) => {
          if (event.type === EventType.RUN_STARTED) open = true;
          if (TERMINAL.has(event.type)) open = false;
        },
        error: () => resolve(false),
        complete: () => resolve(open),
      });
      // A live run's stream stays open: once its replay has arrived and no terminal event
      // came with it, the run is going on.
      setTimeout(() => {
        subscription.unsubscribe();
        resolve(open);
      }, 1000);
    });
  }

  async stop(request) {
    const last = this.lastRuns.get(request.threadId);
    const runId = request.runId ?? last?.runId;
    const agent = last?.agent ?? this.agentName("default");
    let cancelled = false;
    if (runId) {
      // A run that went on after an answer continues under `<runId>-continued`.
      for (const candidate of [runId, `${runId}-continued`]) {
        const response = await this.fetch(
          `${this.threadUrl(agent, request.threadId)}/runs/${encodeURIComponent(candidate)}/cancel`,
          { method: "POST", headers: this.headers() },
        ).catch(() => null);
        if (response?.status === 202) {
          cancelled = true;
          console.log(`Threadline: cancelled run ${candidate} of thread ${request.threadId}`);
        }
      }
    }
    const local = await super.stop(request);
    return cancelled || Boolean(local);
  }
}

// A failure in a few words: the system's own code for a connection that failed (ECONNREFUSED),
// else the error's message.
function describe(error) {
  const cause = error?.cause;
  return cause?.code ?? cause?.message ?? error?.message ?? String(error);
}
