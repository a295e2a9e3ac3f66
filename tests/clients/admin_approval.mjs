#!/usr/bin/env node
// An operator in a real browser: logs into the Django admin, opens the timeline
// of a run that waits for an approval, answers the approval from the admin's
// queue in a second tab, and watches the timeline (never reloaded) show the
// run going on. Driven by tests/test_e2e_admin.py; Debian's Chromium through
// playwright-core (Playwright's own browser download does not work here).
//
// Input (stdin, one JSON object):
//   {"chromium": "/usr/bin/chromium", "userDataDir": "<a fresh empty dir>",
//    "baseUrl": "http://127.0.0.1:PORT", "username": "...", "password": "...",
//    "timelinePath": "/admin/threads/run/<pk>/timeline/", "approvalId": "...",
//    "expectText": "text the continued run writes", "screenshot": "<png path>",
//    "timeoutMs": 30000}
// Output (stdout, one JSON object):
//   {"error": null | "what failed", "step": "the step it failed at",
//    "before": {"timeline text"...}, "message": "the admin's message after the action",
//    "sameDocument": true when the timeline changed without a reload,
//    "after": "the timeline's text at the end", "consoleErrors": [...]}

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

async function readStdin() {
  const chunks = [];
  for await (const chunk of process.stdin) chunks.push(chunk);
  return JSON.parse(Buffer.concat(chunks).toString("utf8"));
}

const spec = await readStdin();
const out = { error: null, step: "launch", before: null, message: null, sameDocument: null, after: null, consoleErrors: [] };
let context;
try {
  context = await chromium.launchPersistentContext(spec.userDataDir, {
    executablePath: spec.chromium,
    headless: true,
    args: FLAGS,
    timeout: spec.timeoutMs,
  });
  context.setDefaultTimeout(spec.timeoutMs);
  // The flow needs no stylesheet or script of the admin's own (the pages under
  // test carry theirs inline, and an admin action is a plain form post), and
  // static files served through the ASGI handler are not what this test is
  // about: the browser does not fetch them.
  await context.route("**/static/**", (route) => route.abort());
  const timeline = await context.newPage();
  timeline.on("console", (msg) => {
    // The admin's static files are not fetched (above); only errors of the
    // page's own making matter.
    if (msg.type() === "error" && !/Failed to load resource/.test(msg.text())) out.consoleErrors.push(msg.text());
  });

  out.step = "log in through the admin's login form";
  await timeline.goto(`${spec.baseUrl}/admin/login/?next=${encodeURIComponent(spec.timelinePath)}`);
  await timeline.fill("#id_username", spec.username);
  await timeline.fill("#id_password", spec.password);
  await Promise.all([timeline.waitForURL(`**${spec.timelinePath}`), timeline.click("input[type=submit]")]);

  out.step = "read the timeline of the waiting run";
  const queueLink = timeline.locator("a", { hasText: "answer it in the queue" });
  await queueLink.waitFor();
  out.before = await timeline.locator("#timeline").innerText();
  // A mark on the document: if the page were reloaded, it would be gone.
  await timeline.evaluate(() => { window.__stillTheSamePage = true; });

  out.step = "approve the call from the admin's approval queue";
  const queue = await context.newPage();
  await queue.goto(new URL(await queueLink.getAttribute("href"), spec.baseUrl).href);
  await queue.check(`input[name="_selected_action"][value="${spec.approvalId}"]`);
  await queue.selectOption('select[name="action"]', "approve");
  await Promise.all([queue.waitForURL("**/admin/threads/approval/**"), queue.click('button[name="index"]')]);
  out.message = await queue.locator("ul.messagelist").innerText();

  out.step = "watch the run go on in the open timeline";
  await timeline.bringToFront();
  await timeline.locator("#timeline", { hasText: spec.expectText }).waitFor();
  out.sameDocument = await timeline.evaluate(() => window.__stillTheSamePage === true);
  out.after = await timeline.locator("#timeline").innerText();
  await timeline.screenshot({ path: spec.screenshot, fullPage: true });
  out.step = "done";
} catch (error) {
  out.error = String(error && error.message ? error.message : error);
} finally {
  if (context) await context.close();
}
process.stdout.write(JSON.stringify(out));
