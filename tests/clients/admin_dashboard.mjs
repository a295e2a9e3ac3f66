#!/usr/bin/env node
// An operator in a real browser reads the admin's dashboard: logs in, opens
// the dashboard, and picks each period from its selector, reading every
// section as the browser laid it out: the chart (an inline SVG, its size on
// the page and its bars' labels and figures) and the table under it.
// Driven by tests/project/test_e2e_dashboard.py; Debian's Chromium through
// playwright-core.
//
// Input (stdin, one JSON object):
//   {"chromium": "/usr/bin/chromium", "userDataDir": "<a fresh empty dir>",
//    "baseUrl": "http://127.0.0.1:PORT", "username": "...", "password": "...",
//    "periods": ["Today (UTC)", ...], "screenshot": "<png path prefix>", "timeoutMs": 30000}
// Output (stdout, one JSON object):
//   {"error": null | "what failed", "step": "the step it failed at",
//    "periods": {"<link text>": {"url": "...", "sections": {"<name>": {"title", "width",
//      "height", "bars": [[label, figure]], "rows": [[cell, ...]]}}}}, "consoleErrors": [...]}

import { chromium } from "playwright-core";

const FLAGS = ["--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
  "--disable-background-networking", "--disable-component-update", "--disable-sync"];

async function readStdin() {
  const chunks = [];
  for await (const chunk of process.stdin) chunks.push(chunk);
  return JSON.parse(Buffer.concat(chunks).toString("utf8"));
}

const spec = await readStdin();
const out = { error: null, step: "launch", periods: {}, consoleErrors: [] };
let context;
try {
  context = await chromium.launchPersistentContext(spec.userDataDir, {
    executablePath: spec.chromium, headless: true, args: FLAGS, timeout: spec.timeoutMs,
  });
  context.setDefaultTimeout(spec.timeoutMs);
  // The admin's own static files are not what this test is about (the dashboard's
  // charts and styles are inline); the browser does not fetch them.
  await context.route("**/static/**", (route) => route.abort());
  const page = await context.newPage();
  page.on("console", (msg) => {
    if (msg.type() === "error" && !/Failed to load resource/.test(msg.text())) out.consoleErrors.push(msg.text());
  });

  out.step = "log in and follow the admin index's link to the dashboard";
  await page.goto(`${spec.baseUrl}/admin/login/?next=/admin/`);
  await page.fill("#id_username", spec.username);
  await page.fill("#id_password", spec.password);
  await Promise.all([page.waitForURL("**/admin/"), page.click("input[type=submit]")]);
  await Promise.all([page.waitForURL("**/admin/dashboard/"), page.click("a:has-text('Dashboard')")]);

  for (const period of spec.periods) {
    out.step = `pick the period ${period}`;
    await Promise.all([page.waitForLoadState("load"), page.click(`ul.db-periods a:text-is("${period}")`)]);
    await page.locator(`ul.db-periods a[aria-current="page"]:text-is("${period}")`).waitFor();
    out.step = `read the sections of ${period}`;
    const sections = await page.evaluate(() => {
      const found = {};
      for (const section of document.querySelectorAll("section.db-section")) {
        const svg = section.querySelector("svg.chart");
        const box = svg ? svg.getBoundingClientRect() : { width: 0, height: 0 };
        found[section.id] = {
          title: svg ? svg.querySelector("title").textContent : null,
          width: box.width,
          height: box.height,
          bars: svg ? [...svg.querySelectorAll("g.bar")].map((bar) => {
            const rect = bar.querySelector("rect").getBoundingClientRect();
            return [bar.dataset.label, bar.dataset.figure, rect.width, rect.height];
          }) : [],
          rows: [...section.querySelectorAll("tbody tr")].map((tr) => [...tr.cells].map((td) => td.innerText.trim())),
        };
      }
      return found;
    });
    out.periods[period] = { url: page.url(), sections };
    await page.screenshot({ path: `${spec.screenshot}-${out.periods[period].url.split("=").pop()}.png`, fullPage: true });
  }
  out.step = "done";
} catch (error) {
  out.error = String(error && error.message ? error.message : error);
} finally {
  if (context) await context.close();
}
process.stdout.write(JSON.stringify(out));
