// Drives headless chromium through the DevTools protocol over a pipe (Node.js alone, no
// packages), so that tests can use a page as a person does: type into it, press keys.
//
//   node chromium_cdp.js CHROMIUM STEPS_JSON
//
// Steps, in order, in one tab:
//   {"open": url}                  load url (and wait until it has loaded)
//   {"wait": expr}                 until the JavaScript expression is truthy (30 s at most)
//   {"type": selector, "text": s}  focus the element and type s
//   {"key": "Enter"}               press Enter
//   {"eval": expr, "as": name}     record the expression's value under name
//   {"screenshot": path}           save a PNG of the page
// Prints the recorded values as one JSON object. A failed step exits 1, naming the step and
// showing the page's DOM.
"use strict";
const { spawn } = require("child_process");
const fs = require("fs");
const os = require("os");
const path = require("path");

const STEP_LIMIT_MS = 30000;
const [bin, stepsJson] = process.argv.slice(2);
const steps = JSON.parse(stepsJson);
const profile = fs.mkdtempSync(path.join(os.tmpdir(), "sluice-chromium-"));
const chrome = spawn(bin, [
  "--headless=new", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage",
  "--no-first-run", "--hide-scrollbars", "--window-size=1400,1000",
  "--remote-debugging-pipe", "--user-data-dir=" + profile, "about:blank",
], { stdio: ["ignore", "ignore", "pipe", "pipe", "pipe"] });
let chromeLog = "";
chrome.stdio[2].on("data", d => { chromeLog = (chromeLog + d).slice(-20000); });
chrome.stdio[3].on("error", () => {}); // chromium gone: its answers time out instead
chrome.on("error", e => fail(e));

// Messages are JSON, each ended by a NUL byte: commands on fd 3, answers on fd 4.
let nextId = 1;
const pending = new Map();
let input = Buffer.alloc(0);
chrome.stdio[4].on("data", chunk => {
  input = Buffer.concat([input, chunk]);
  let end;
  while ((end = input.indexOf(0)) >= 0) {
    const msg = JSON.parse(input.subarray(0, end).toString());
    input = input.subarray(end + 1);
    const waiter = msg.id && pending.get(msg.id);
    if (!waiter) continue;
    pending.delete(msg.id);
    if (msg.error) waiter.reject(new Error(JSON.stringify(msg.error)));
    else waiter.resolve(msg.result);
  }
});

function send(method, params = {}, sessionId = undefined) {
  const id = nextId++;
  return new Promise((resolve, reject) => {
    const timer = setTimeout(() => {
      pending.delete(id);
      reject(new Error(method + ": no answer from chromium"));
    }, STEP_LIMIT_MS);
    pending.set(id, {
      resolve: v => { clearTimeout(timer); resolve(v); },
      reject: e => { clearTimeout(timer); reject(e); },
    });
    chrome.stdio[3].write(JSON.stringify({ id, method, params, sessionId }) + "\0");
  });
}

const sleep = ms => new Promise(r => setTimeout(r, ms));

async function main() {
  const { targetId } = await send("Target.createTarget", { url: "about:blank" });
  const { sessionId } = await send("Target.attachToTarget", { targetId, flatten: true });
  const tab = (method, params) => send(method, params, sessionId);
  await tab("Page.enable");
  const evaluate = async expression => {
    const r = await tab("Runtime.evaluate", { expression, returnByValue: true, awaitPromise: true });
    if (r.exceptionDetails) throw new Error(expression + ": " + r.exceptionDetails.text);
    return r.result.value;
  };
  const until = async (expression, what) => {
    const deadline = Date.now() + STEP_LIMIT_MS;
    while (!(await evaluate(expression).catch(() => false))) {
      if (Date.now() > deadline) throw new Error("timed out waiting for " + what);
      await sleep(100);
    }
  };
  const results = {};
  for (const [i, step] of steps.entries()) {
    try {
      if (step.open) {
        // Mark the old document, so that the wait below sees the new one.
        await evaluate("window.__leaving = true").catch(() => {});
        await tab("Page.navigate", { url: step.open });
        await until("!window.__leaving && document.readyState === 'complete'", "the page to load");
      } else if (step.wait) {
        await until(step.wait, step.wait);
      } else if (step.type) {
        await evaluate(`document.querySelector(${JSON.stringify(step.type)}).focus()`);
        await tab("Input.insertText", { text: step.text });
      } else if (step.key === "Enter") {
        await tab("Input.dispatchKeyEvent", {
          type: "keyDown", key: "Enter", code: "Enter", text: "\r",
          windowsVirtualKeyCode: 13, nativeVirtualKeyCode: 13,
        });
        await tab("Input.dispatchKeyEvent", {
          type: "keyUp", key: "Enter", code: "Enter", windowsVirtualKeyCode: 13, nativeVirtualKeyCode: 13,
        });
      } else if (step.eval) {
        results[step.as] = await evaluate(step.eval);
      } else if (step.screenshot) {
        const { data } = await tab("Page.captureScreenshot", { format: "png" });
        fs.writeFileSync(step.screenshot, Buffer.from(data, "base64"));
      } else {
        throw new Error("unknown step");
      }
    } catch (e) {
      const dom = await evaluate("document.documentElement.outerHTML").catch(() => "(no DOM)");
      throw new Error(`step ${i} ${JSON.stringify(step)}: ${e.message}\n--- DOM ---\n${dom}`);
    }
  }
  return results;
}

const watchdog = setTimeout(() => fail(new Error("the whole run took over 5 minutes")), 300000);

// Closes the browser (killing it if it does not close in 5 s), then exits.
async function finish(code) {
  clearTimeout(watchdog);
  const exited = chrome.exitCode !== null ? Promise.resolve() : new Promise(r => chrome.once("exit", r));
  await Promise.race([send("Browser.close").catch(() => {}), sleep(5000)]);
  await Promise.race([exited, sleep(5000)]);
  chrome.kill("SIGKILL");
  fs.rmSync(profile, { recursive: true, force: true });
  process.exit(code);
}

function fail(e) {
  process.stderr.write(e.message + "\n--- chromium ---\n" + chromeLog + "\n");
  finish(1);
}

main().then(results => {
  process.stdout.write(JSON.stringify(results) + "\n");
  finish(0);
}, fail);
