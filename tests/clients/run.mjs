#!/usr/bin/env node
// Threadline AG-UI client harness.
//
// Drives an AG-UI endpoint through the official `@ag-ui/client` HttpAgent, at
// either 1.0.0 (npm alias "agui-client-1") or 0.0.59 ("agui-client-0"), so the
// pytest suite can check the server against real client code rather than
// against our own reading of the spec. Called by tests/agui_client.py.
//
// ---------------------------------------------------------------------------
// Findings about the two client versions (read from the installed packages'
// sources and confirmed on the wire against a scripted SSE server):
//
// Request body (POST, JSON, headers Content-Type: application/json and
// Accept: text/event-stream, plus the configured headers):
//   * 0.0.59 sends   {threadId, runId, tools, context, forwardedProps, state,
//                     messages[, resume]}
//     and NO protocolVersion. `resume` is sent only when runAgent() got one.
//   * 1.0.0 sends    {threadId, runId, protocolVersion: "1.0", state, messages,
//                     tools, context, forwardedProps[, resume]}
//     protocolVersion is added by the client itself (AbstractAgent.
//     prepareRunAgentInput adds PROTOCOL_VERSION from @ag-ui/core, "1.0",
//     whenever the agent's maxProtocolVersion is not pinned below 1.0.0, which
//     is the default). The harness therefore does NOT add it; nothing in the
//     body is altered by this file for either version. 1.0.0 also runs the
//     outgoing input through RunAgentInputSchema before sending (null optional
//     fields omitted, unknown keys stripped with a warning, malformed known
//     fields fail the run before any request is made).
//   Both versions drop messages with role "activity" from the body.
//
// Event verification: neither version has an on/off switch. runAgent()'s
// pipeline always contains `verifyEvents(debugLogger)` (the debug logger only
// controls logging):
//   * 0.0.59: SSE frame -> EventSchemas.parse (zod 3, in the HTTP transform;
//     unknown keys are kept, malformed known fields throw a ZodError) ->
//     [middlewares] -> transformChunks -> verifyEvents -> apply.
//   * 1.0.0:  SSE frame (only checked for an object with a string `type`) ->
//     CompatibilityBoundary (translates pre-1.0 shapes, e.g. some nulls) ->
//     enforceEvents (unknown event types dropped and unknown keys stripped,
//     each with a console.warn; malformed known fields throw a ZodError) ->
//     transformChunks -> verifyEvents -> apply.
//   verifyEvents raises AGUIError for sequencing faults (first event not
//   RUN_STARTED, CONTENT/END without START, events after RUN_FINISHED or
//   RUN_ERROR, RUN_FINISHED with open messages/tool calls/steps, ...). Any such
//   error rejects runAgent(); it is reported in the run's `error` field.
//
// Observed schema strictness (inbound events; "rejects" = the run fails):
//   * RUN_FINISHED.outcome {"type":"success"} and {"type":"interrupt",
//     "interrupts":[{id, reason, ...}]}: accepted by BOTH (0.0.59 also sets
//     agent.pendingInterrupts). 0.0.59 rejects outcome "cancelled", any extra
//     key on the outcome object (incl. 1.0's pendingToolCallIds); 1.0 accepts
//     those / strips the unknown key. outcome: null accepted by both.
//   * TOOL_CALL_RESULT content string: accepted by both; content array of
//     parts: 1.0 only (0.0.59 ZodError); role: null rejected by both.
//   * null on an optional field (name, timestamp, metadata, role, ...) is
//     rejected by both, except the legacy nulls both tolerate:
//     TOOL_CALL_START.parentMessageId, RUN_FINISHED.result/outcome, rawEvent.
//   * timestamp must be an integer for 1.0 (a float is rejected); 0.0.59 takes
//     any number. Unknown event types: 0.0.59 rejects, 1.0 drops with a warn.
//     Unknown keys on events: 0.0.59 keeps them, 1.0 strips them with a warn.
//   * RUN_STARTED.input without tools/context: 0.0.59 rejects, 1.0 defaults.
//   * Framing: both split frames on "\n\n" only; CRLF framing breaks both.
//   * A stream that ends without RUN_FINISHED, and a RUN_ERROR run, both
//     RESOLVE runAgent() without error: check the last event yourself.
//   * After an interrupt outcome, a next runAgent() without `resume` entries
//     for every pending interrupt fails client-side (AGUIError) before any
//     request is sent (both versions).
//
// Events are collected with a per-run subscriber's `onEvent`, which both
// versions call from the default apply stage, i.e. after validation and
// verification: `events` is exactly what the client's pipeline delivered.
// ---------------------------------------------------------------------------
//
// Input (stdin, one JSON object):
//   {"version": "1" | "0", "url": "...", "headers": {...},
//    "runs": [{"threadId", "runId", "messages"?, "append"?, "tools"?,
//              "context"?, "state"?, "forwardedProps"?, "resume"?}, ...]}
//   Per run, in order, on ONE HttpAgent instance:
//     threadId       -> agent.threadId (if given)
//     messages       -> agent.setMessages(messages) (if given; otherwise the
//                       agent keeps what it accumulated)
//     append         -> agent.addMessages(append)
//     state          -> agent.setState(state) (if given)
//     runId, tools, context, forwardedProps, resume -> runAgent() parameters
//                       (resume is passed whenever present; both versions
//                       accept it, 1.0 is the one it is meant for)
//
// Output (stdout, one JSON object): {"runs": [<result>, ...]} where each result
// is {"events", "error", "errorName", "messages", "state", "result",
// "pendingInterrupts", "request", "received", "warnings"}:
//   events            events as delivered by the client pipeline (JSON copies)
//   error             null, or the message of the error runAgent() rejected with
//   errorName         null, or that error's name ("AGUIError", "ZodError", ...)
//   messages, state   agent.messages / agent.state after the run
//   result            {"result": ..., "newMessages": [...]} as runAgent()
//                     returned it (an undefined result becomes null), or null
//                     when the run errored
//   pendingInterrupts agent.pendingInterrupts after the run
//   request           {"url", "method", "headers", "body"} of the POST the
//                     client made (body parsed from JSON), or null if none
//   received          events as they left the HTTP transport, BEFORE
//                     verification (0.0.59: already zod-parsed; 1.0.0: raw
//                     JSON). On a failed run `events` can miss events that
//                     arrived before the failing one (the error overtakes the
//                     async apply stage); `received` still has them.
//   warnings          console.warn lines the client printed during the run
//                     (e.g. 1.0's "[ag-ui][enforce] Removed unrecognised ...")
// Processing stops after the first run that errored.
// Exit code: 0 whenever the output was produced (run errors included); 2 for a
// bad spec or any other harness failure (message on stderr).

import { randomUUID } from "node:crypto";
import { tap } from "rxjs";

const MODULES = { 1: "agui-client-1", 0: "agui-client-0" };

class SpecError extends Error {}

// The client libraries log through console; keep stdout for our JSON only.
const realWarn = console.warn.bind(console);
const stderrLog = (...args) => console.error(...args);
console.log = stderrLog;
console.info = stderrLog;
console.debug = stderrLog;

let warningSink = null;
console.warn = (...args) => {
  if (warningSink !== null) {
    warningSink.push(args.map((a) => (typeof a === "string" ? a : safeString(a))).join(" "));
  }
  realWarn(...args);
};

function safeString(value) {
  if (value instanceof Error) return `${value.name}: ${value.message}`;
  try {
    return JSON.stringify(value);
  } catch {
    return String(value);
  }
}

/** The most specific name for an error: AGUIError does not set `name`. */
function errorNameOf(err) {
  if (!(err instanceof Error)) return typeof err;
  if (err.name && err.name !== "Error") return err.name;
  return err.constructor?.name || "Error";
}

/** A JSON-safe deep copy (undefined keys dropped, as on the wire). */
function jsonCopy(value) {
  if (value === undefined) return null;
  return JSON.parse(JSON.stringify(value));
}

async function readStdin() {
  const chunks = [];
  for await (const chunk of process.stdin) chunks.push(chunk);
  return Buffer.concat(chunks).toString("utf8");
}

function parseSpec(text) {
  let spec;
  try {
    spec = JSON.parse(text);
  } catch (err) {
    throw new SpecError(`spec on stdin is not JSON: ${err.message}`);
  }
  if (typeof spec !== "object" || spec === null || Array.isArray(spec)) {
    throw new SpecError("spec must be a JSON object");
  }
  if (!Object.hasOwn(MODULES, String(spec.version))) {
    throw new SpecError(`spec.version must be "1" or "0", got ${JSON.stringify(spec.version)}`);
  }
  if (typeof spec.url !== "string" || spec.url === "") {
    throw new SpecError("spec.url must be a non-empty string");
  }
  if (spec.headers !== undefined && (typeof spec.headers !== "object" || spec.headers === null)) {
    throw new SpecError("spec.headers must be an object");
  }
  if (!Array.isArray(spec.runs) || spec.runs.length === 0) {
    throw new SpecError("spec.runs must be a non-empty array");
  }
  spec.runs.forEach((run, index) => {
    if (typeof run !== "object" || run === null || Array.isArray(run)) {
      throw new SpecError(`spec.runs[${index}] must be an object`);
    }
    for (const key of ["messages", "append", "tools", "context", "resume"]) {
      if (run[key] !== undefined && !Array.isArray(run[key])) {
        throw new SpecError(`spec.runs[${index}].${key} must be an array`);
      }
    }
  });
  return spec;
}

async function main() {
  const spec = parseSpec(await readStdin());
  const { HttpAgent } = await import(MODULES[String(spec.version)]);

  let lastRequest = null;
  const recordingFetch = (url, init) => {
    let body = init?.body ?? null;
    if (typeof body === "string") {
      try {
        body = JSON.parse(body);
      } catch {
        // keep the raw string
      }
    }
    lastRequest = {
      url: String(url),
      method: init?.method ?? "GET",
      headers: { ...(init?.headers ?? {}) },
      body,
    };
    return fetch(url, init);
  };

  const agent = new HttpAgent({
    url: spec.url,
    headers: spec.headers ?? {},
    threadId: spec.runs[0].threadId,
    fetch: recordingFetch,
  });

  // Record what the transport produced, before verification, without adding a
  // middleware (which would change the pipeline): the pipeline calls
  // agent.run() (0.0.59 directly, 1.0.0 through its CompatibilityBoundary).
  let received = [];
  const transportRun = agent.run.bind(agent);
  agent.run = (input) =>
    transportRun(input).pipe(
      tap((event) => {
        received.push(jsonCopy(event));
      }),
    );

  const results = [];
  for (const run of spec.runs) {
    if (run.threadId !== undefined) agent.threadId = run.threadId;
    if (run.messages !== undefined) agent.setMessages(run.messages);
    if (run.append !== undefined && run.append.length > 0) agent.addMessages(run.append);
    if (run.state !== undefined) agent.setState(run.state);

    const parameters = { runId: run.runId ?? randomUUID() };
    for (const key of ["tools", "context", "forwardedProps", "resume"]) {
      if (run[key] !== undefined) parameters[key] = run[key];
    }
    // `answerAll: {status, payload}` answers every interrupt the agent has pending
    // with the same entry, as a page's "approve all" would; the ids are the server's.
    if (run.answerAll !== undefined) {
      parameters.resume = (agent.pendingInterrupts ?? []).map((interrupt) => ({
        interruptId: interrupt.id,
        ...run.answerAll,
      }));
    }

    const events = [];
    const warnings = [];
    received = [];
    lastRequest = null;
    warningSink = warnings;
    let error = null;
    let errorName = null;
    let result = null;
    try {
      const returned = await agent.runAgent(parameters, {
        onEvent: ({ event }) => {
          events.push(jsonCopy(event));
        },
      });
      result = {
        result: returned?.result === undefined ? null : jsonCopy(returned.result),
        newMessages: jsonCopy(returned?.newMessages ?? []),
      };
    } catch (err) {
      error = err instanceof Error ? err.message : String(err);
      errorName = errorNameOf(err);
    } finally {
      warningSink = null;
    }

    results.push({
      events,
      error,
      errorName,
      messages: jsonCopy(agent.messages),
      state: jsonCopy(agent.state),
      result,
      pendingInterrupts: jsonCopy(agent.pendingInterrupts ?? []),
      request: lastRequest,
      received,
      warnings,
    });
    if (error !== null) break;
  }

  const text = `${JSON.stringify({ runs: results })}\n`;
  process.stdout.write(text, () => process.exit(0));
}

main().catch((err) => {
  const detail = err instanceof SpecError ? err.message : (err?.stack ?? String(err));
  process.stderr.write(`run.mjs: harness failure: ${detail}\n`);
  process.exit(2);
});
