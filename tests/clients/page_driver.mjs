#!/usr/bin/env node
// A real headless Chromium (Debian's, through playwright-core) driven one command at a time:
// each line on stdin is a JSON command, each line on stdout its JSON answer. The Python
// side (tests/example_page.py) keeps one browser for a whole scenario, across restarts of
// the servers behind the page.
//
// Commands: {"op": "goto", "url"} | {"op": "reload"} | {"op": "fill", "selector", "text"}
//   | {"op": "press", "selector", "key"} | {"op": "attach", "selector", "path"} (a file input's file) | {"op": "click", "selector", "text"?}
//   | {"op": "waitFor", "selector", "text"?, "state"?} | {"op": "text", "selector"}
//   | {"op": "count", "selector"} | {"op": "eval", "expression"} | {"op": "screenshot", "path"}
//   | {"op": "console"} | {"op": "close"}
// Answers: {"ok": true, "value": ...} or {"ok": false, "error": "..."}.
// First argument: a JSON object {"chromium", "userDataDir", "timeoutMs"}.

import { createInterface } from "node:readline";
import { chromium } from "playwright-core";

const FLAGS = [
  "--no-sandbox",
  "--disable-gpu",
  "--disable-quic",
  "--no-first-run",
  "--disable-background-networking",
  "--disable-component-update",
  "--disable-sync",
];

const options = JSON.parse(process.argv[2]);
const context = await chromium.launchPersistentContext(options.userDataDir, {
  executablePath: options.chromium,
  headless: true,
  args: FLAGS,
  timeout: options.timeoutMs,
  viewport: { width: 1280, height: 900 },
});
context.setDefaultTimeout(options.timeoutMs);
const page = context.pages()[0] ?? (await context.newPage());
const consoleLines = [];
page.on("console", (msg) => consoleLines.push(`${msg.type()}: ${msg.text()}`));
page.on("pageerror", (error) => consoleLines.push(`pageerror: ${error.message}`));

function locate(command) {
  const found = page.locator(command.selector);
  return command.text === undefined ? found.first() : found.filter({ hasText: command.text }).first();
}

async function perform(command) {
  switch (command.op) {
    case "goto":
      await page.goto(command.url);
      return page.url();
    case "reload":
      await page.reload();
      return page.url();
    case "fill":
      await locate(command).fill(command.value);
      return null;
    case "attach":
      await locate(command).setInputFiles(command.path);
      return null;
    case "press":
      await locate(command).press(command.key);
      return null;
    case "click":
      await locate(command).click();
      return null;
    case "waitFor":
      await locate(command).waitFor({ state: command.state ?? "visible" });
      return null;
    case "text":
      return await page.locator(command.selector).first().innerText();
    case "count":
      return await page.locator(command.selector).count();
    case "eval":
      return await page.evaluate(command.expression);
    case "screenshot":
      await page.screenshot({ path: command.path, fullPage: true });
      return command.path;
    case "console":
      return consoleLines.splice(0);
    case "close":
      await context.close();
      process.stdout.write(`${JSON.stringify({ ok: true, value: null })}\n`);
      process.exit(0);
    default:
      throw new Error(`unknown op ${command.op}`);
  }
}

process.stdout.write(`${JSON.stringify({ ok: true, value: "ready" })}\n`);
for await (const line of createInterface({ input: process.stdin })) {
  if (!line.trim()) continue;
  let answer;
  try {
    answer = { ok: true, value: await perform(JSON.parse(line)) };
  } catch (error) {
    answer = { ok: false, error: String(error?.message ?? error) };
  }
  process.stdout.write(`${JSON.stringify(answer)}\n`);
}
await context.close();
