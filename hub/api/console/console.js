// The web console's one script (hub/api/console.py): live updates, the
// approval buttons, and the buttons that resume a run or retry a dispatch. The server renders and escapes every page; this only
// fetches the page again and swaps in its <main>, so it never turns data
// into markup itself.
"use strict";

(function () {
  const live = document.getElementById("live");
  const notice = document.getElementById("notice");
  let busy = false;
  let again = false;

  function say(text) {
    notice.textContent = text;
    notice.hidden = !text;
  }

  // One fetch at a time; changes that arrive meanwhile cost one more fetch,
  // not one each (a burst of mail is many events).
  async function refresh() {
    if (busy) {
      again = true;
      return;
    }
    busy = true;
    try {
      do {
        again = false;
        const r = await fetch(location.href, { cache: "no-store", credentials: "same-origin" });
        if (!r.ok) {
          say("Could not refresh this page (" + r.status + "); reload it.");
          return;
        }
        const page = new DOMParser().parseFromString(await r.text(), "text/html");
        const fresh = page.querySelector("main");
        if (fresh) document.querySelector("main").replaceChildren(...fresh.childNodes);
      } while (again);
    } catch (err) {
      say("Could not refresh this page: " + err);
    } finally {
      busy = false;
    }
  }

  const events = new EventSource(document.body.dataset.events);
  // On open too: what changed between this page's render and the stream's
  // start (the stream begins at "now") would otherwise never show.
  events.addEventListener("open", () => {
    live.textContent = "live";
    live.className = "on";
    refresh();
  });
  events.addEventListener("error", () => {
    live.textContent = "reconnecting";
    live.className = "off";
  });
  for (const kind of ["dispatch", "run", "deployment", "reset"]) {
    events.addEventListener(kind, refresh);
  }

  // The buttons are re-rendered with <main>: one listener on the document.
  document.addEventListener("click", async (event) => {
    const action = event.target.closest("button[data-post]");
    if (action) {
      action.disabled = true;
      await post(action.dataset.post, {});
      return;
    }
    const button = event.target.closest("button[data-approval]");
    if (!button) return;
    button.disabled = true;
    try {
      const r = await fetch("/approvals/" + encodeURIComponent(button.dataset.approval), {
        method: "POST",
        headers: { "Content-Type": "application/json" },
        body: JSON.stringify({ decision: button.dataset.decision }),
        credentials: "same-origin",
        // The page's own policy is no-referrer, under which a POST says
        // "Origin: null"; the hub wants its own origin on a cookie's write.
        referrerPolicy: "same-origin",
      });
      const body = await r.json().catch(() => ({}));
      say(r.ok ? "" : "The hub refused: " + (body.detail || r.status));
    } catch (err) {
      say("Could not send the decision: " + err);
    }
    refresh();
  });

  // A resume or a retry: the path says which, the body is empty.
  async function post(path, body) {
    try {
      const r = await fetch(path, {
        method: "POST",
        headers: { "Content-Type": "application/json" },
        body: JSON.stringify(body),
        credentials: "same-origin",
        referrerPolicy: "same-origin",
      });
      const answer = await r.json().catch(() => ({}));
      say(r.ok ? "" : "The hub refused: " + (answer.detail || r.status));
    } catch (err) {
      say("Could not send it: " + err);
    }
    refresh();
  }
})();
