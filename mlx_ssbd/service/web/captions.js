// The caption page (/captions/{id}): the session's events (SSE) as lines of captions.
// ?lines=N committed lines kept on screen (default 2), ?size=CSS font size (default 44px).
const params = new URLSearchParams(location.search);
const keep = parseInt(params.get("lines") || "2", 10);
if (params.get("size")) document.body.style.setProperty("--size", params.get("size"));
const committed = document.getElementById("committed");
const stable = document.getElementById("stable"), unstable = document.getElementById("unstable");
const status = document.getElementById("status");
const source = new EventSource(document.querySelector('meta[name="events"]').content);
source.onmessage = (message) => {
  const event = JSON.parse(message.data);
  if (event.type === "translation.update") {
    stable.textContent = event.stable; unstable.textContent = event.unstable;
  } else if (event.type === "translation.commit") {
    const line = document.createElement("div");
    line.className = "line done"; line.textContent = event.text;
    committed.appendChild(line);
    while (committed.children.length > keep) committed.removeChild(committed.firstChild);
    stable.textContent = ""; unstable.textContent = "";
  } else if (event.type === "session.closed") {
    status.textContent = "ended"; source.close();
  }
};
source.onerror = () => { status.textContent = "reconnecting"; };
