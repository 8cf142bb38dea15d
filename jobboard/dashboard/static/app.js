// jobboard dashboard: live updates by server-sent events, actions with the token header.
// Job data never passes through this script as HTML: pages come escaped from the server
// (and the Content-Security-Policy forbids inline scripts); what this script writes uses textContent.
"use strict";
(function () {
  const MIN_REFRESH_MS = 250;
  const main = document.getElementById("main");
  const health = document.getElementById("health");
  const notice = document.getElementById("notice");
  const token = document.getElementById("token");
  let busy = false, again = false, last = 0, graphCount = 0;
  let actions = 0; // actions clicked so far: only the latest one's reply is shown
  const drawn = new Map(); // mermaid source -> svg markup (mermaid's own output, labels entity-encoded)

  function setHealth(ok, text) {
    health.textContent = text || (ok ? "live" : "board unreachable: showing the last known state");
    health.className = ok ? "ok" : "down";
    document.body.dataset.healthy = ok ? "yes" : "no";
  }

  async function refresh() {
    if (busy) { again = true; return; }
    const wait = last + MIN_REFRESH_MS - Date.now();
    if (wait > 0) { busy = true; await new Promise((r) => setTimeout(r, wait)); busy = false; }
    busy = true;
    try {
      const response = await fetch(location.href, { headers: { "X-Fragment": "1" }, cache: "no-store" });
      if (response.ok || response.status === 503) {
        const parsed = new DOMParser().parseFromString(await response.text(), "text/html");
        main.replaceChildren(...parsed.body.childNodes);
        document.body.dataset.refreshed = String(Date.now());
        await drawGraphs();
      }
    } catch (error) {
      setHealth(false, "dashboard unreachable");
    } finally {
      last = Date.now();
      busy = false;
      if (again) { again = false; refresh(); }
    }
  }

  async function drawGraphs() {
    if (!window.mermaid) return;
    for (const source of document.querySelectorAll("pre.mermaid-src")) {
      const target = source.nextElementSibling;
      const text = source.textContent;
      if (!drawn.has(text)) {
        try {
          const { svg } = await window.mermaid.render("plan-graph-" + (graphCount += 1), text);
          drawn.clear();
          drawn.set(text, svg);
        } catch (error) {
          target.textContent = "the graph could not be drawn: " + error;
          continue;
        }
      }
      target.innerHTML = drawn.get(text);
      target.dataset.drawn = String(Date.now());
    }
  }

  function startEvents() {
    const events = new EventSource("/events");
    events.addEventListener("change", (message) => {
      const data = JSON.parse(message.data);
      setHealth(Boolean(data.healthy));
      refresh();
    });
    events.onerror = () => setHealth(false, "dashboard unreachable: reconnecting");
  }

  async function act(button) {
    if (button.dataset.confirm && !window.confirm(button.dataset.confirm)) return;
    const headers = { "X-Jobboard-Token": token ? token.value : "" };
    const action = (actions += 1);
    notice.textContent = "sending...";
    notice.className = "";
    let text, ok;
    try {
      const response = await fetch(button.dataset.action, { method: "POST", headers, cache: "no-store" });
      const body = await response.json();
      [text, ok] = [response.ok ? "done" : "refused: " + (body.error || response.status), response.ok];
    } catch (error) {
      [text, ok] = ["failed: " + error, false];
    }
    if (action === actions) { // an earlier click's late reply does not overwrite a later one's
      notice.textContent = text;
      notice.className = ok ? "ok" : "down";
    }
    refresh();
  }

  if (token) {
    token.value = sessionStorage.getItem("jobboard-token") || "";
    token.addEventListener("change", () => sessionStorage.setItem("jobboard-token", token.value));
  }
  document.addEventListener("click", (event) => {
    const button = event.target.closest("button[data-action]");
    if (button) act(button);
  });
  window.addEventListener("load", () => {
    if (window.mermaid) {
      window.mermaid.initialize({ startOnLoad: false, securityLevel: "strict", htmlLabels: false,
                                  flowchart: { htmlLabels: false }, theme: "neutral" });
    }
    drawGraphs();
    startEvents();
  });
})();
