// mockllm inspector, the live page: follows the server's events (GET /_mockllm/events) and swaps in a
// run's fresh HTML (GET /_mockllm/runs/{run}/view, rendered by the server as the report is) when it
// changes. A request body is fetched only when its call is opened. No framework, no build step.
"use strict";
(function () {
  const ADMIN = "/_mockllm";
  const runs = document.getElementById("runs");
  const status = document.getElementById("status");
  const SHOWN = 30; // runs on the page at most: a long suite's ended runs go, oldest first
  const pending = new Map(); // run id -> "busy" | "again": one request in flight per run, the latest wins
  const bodies = new Map(); // call key -> body text, kept across swaps

  function runUrl(run) {
    return ADMIN + "/runs/" + encodeURIComponent(run);
  }

  async function refresh(run) {
    if (pending.has(run)) {
      pending.set(run, "again");
      return;
    }
    pending.set(run, "busy");
    try {
      const answer = await fetch(runUrl(run) + "/view", { cache: "no-store" });
      if (answer.ok) place(run, await answer.text());
      else gone(run);
    } catch (error) {
      setStatus(false, "server unreachable");
    } finally {
      const again = pending.get(run) === "again";
      pending.delete(run);
      if (again) refresh(run);
    }
  }

  function place(run, html) {
    const old = document.getElementById("run-" + run);
    const template = document.createElement("template");
    template.innerHTML = html.trim();
    const fresh = template.content.firstElementChild;
    if (old) {
      // What the reader had open stays open; the timeline keeps its scroll position.
      old.querySelectorAll("details[open]").forEach((d) => {
        const same = d.id ? fresh.querySelector("#" + CSS.escape(d.id)) : fresh.querySelector("details.calls");
        if (same) same.open = true;
      });
      old.querySelectorAll(".selected").forEach((el) => {
        const same = el.id ? fresh.querySelector("#" + CSS.escape(el.id))
          : fresh.querySelector('a.mark[href="' + el.getAttribute("href") + '"]');
        if (same) same.classList.add("selected");
      });
      const lanes = old.querySelector(".lanes");
      const scroll = lanes ? lanes.scrollLeft : 0;
      old.replaceWith(fresh);
      const newLanes = fresh.querySelector(".lanes");
      if (newLanes) newLanes.scrollLeft = scroll;
    } else {
      runs.prepend(fresh); // newest first
      const empty = document.getElementById("no-runs");
      if (empty) empty.remove();
      const ended = runs.querySelectorAll('.run[data-ended="true"]');
      for (let i = ended.length - 1, extra = runs.children.length - SHOWN; i >= 0 && extra > 0; i--, extra--) {
        ended[i].remove();
      }
    }
    fresh.querySelectorAll("details.call[open]").forEach(loadBody);
  }

  function gone(run) {
    const old = document.getElementById("run-" + run);
    if (old) old.setAttribute("data-gone", "no longer kept by the server");
  }

  async function loadBody(call) {
    const pre = call.querySelector("pre.body[data-src]");
    if (!pre || pre.dataset.state) return; // opening it again, or its toggle after a swap: once is enough
    pre.dataset.state = "loading";
    const key = pre.dataset.src + "@" + call.dataset.at; // a reset run numbers its calls from 0 again
    if (bodies.has(key)) {
      pre.textContent = bodies.get(key);
      return;
    }
    pre.textContent = "loading…";
    try {
      const answer = await fetch(pre.dataset.src, { cache: "no-store" });
      if (!answer.ok) {
        pre.textContent = "(no longer kept: the journal keeps the run's latest calls)";
        return;
      }
      const record = await answer.json();
      let text = record.body;
      try {
        text = JSON.stringify(JSON.parse(record.body), null, 1);
      } catch (notJson) { /* shown as kept */ }
      bodies.set(key, text);
      pre.textContent = text;
    } catch (error) {
      pre.textContent = "(could not fetch it: " + error + "; close and open the call to try again)";
      delete pre.dataset.state;
    }
  }

  document.addEventListener("toggle", (event) => {
    const call = event.target;
    if (call.matches && call.matches("details.call") && call.open) loadBody(call);
  }, true);

  document.addEventListener("click", async (event) => {
    const button = event.target.closest("button[data-action]");
    if (!button) return;
    const run = button.closest(".run").dataset.run;
    const action = button.dataset.action;
    button.disabled = true;
    const answer = await fetch(action === "end" ? runUrl(run) : runUrl(run) + "/reset",
      { method: action === "end" ? "DELETE" : "POST" });
    if (!answer.ok) button.title = "refused: " + answer.status;
    refresh(run);
  });

  function setStatus(connected, text) {
    status.classList.toggle("connected", connected);
    status.textContent = text;
  }

  async function resync() {
    const answer = await fetch(ADMIN + "/runs", { cache: "no-store" });
    if (!answer.ok) return;
    const listed = (await answer.json()).runs.map((r) => r.run);
    // Oldest first, so that prepending leaves the newest on top.
    listed.forEach(refresh);
    runs.querySelectorAll(".run").forEach((section) => {
      if (!listed.includes(section.dataset.run)) gone(section.dataset.run);
    });
  }

  const events = new EventSource(ADMIN + "/events");
  events.addEventListener("open", () => {
    setStatus(true, "live");
    resync(); // after a reconnect, catch up on what changed meanwhile
  });
  events.addEventListener("error", () => setStatus(false, "reconnecting…"));
  events.addEventListener("run", (event) => refresh(JSON.parse(event.data).run));
})();
