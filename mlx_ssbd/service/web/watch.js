// The phone viewer page (/watch/{id}): one language of a session's captions (SSE), a language
// picker among the talk's languages, text size, light/dark, and an opt-in "Listen" that speaks
// each new committed caption with the browser's own speech synthesis (no server cost).
const config = JSON.parse(document.getElementById("config").textContent);
const $ = (id) => document.getElementById(id);
const names = "DisplayNames" in Intl ? new Intl.DisplayNames([navigator.language || "en"], { type: "language" }) : null;
const KEEP = 200; // committed captions kept on the page
let source = null, listening = false;

function status(text) { $("status").textContent = text; }

function speak(text, lang) {
  if (!listening || !text.trim()) return;
  const utterance = new SpeechSynthesisUtterance(text);
  utterance.lang = lang;
  speechSynthesis.speak(utterance);
}

function connect(lang) {
  if (source) source.close();
  $("captions").replaceChildren();
  $("stable").textContent = ""; $("unstable").textContent = "";
  document.documentElement.lang = lang;
  const url = new URL(location.href);
  url.searchParams.set("lang", lang);
  history.replaceState(null, "", url);
  status("connecting");
  source = new EventSource(`/v1/sessions/${encodeURIComponent(config.session)}/events?lang=${lang}`);
  source.onopen = () => status("live");
  source.onerror = () => status("reconnecting");
  source.onmessage = (message) => {
    const event = JSON.parse(message.data);
    if (event.type === "translation.update") {
      $("stable").textContent = event.stable; $("unstable").textContent = event.unstable;
    } else if (event.type === "translation.commit") {
      const line = document.createElement("p");
      line.textContent = event.text;
      $("captions").append(line);
      while ($("captions").children.length > KEEP) $("captions").firstChild.remove();
      $("stable").textContent = ""; $("unstable").textContent = "";
      if (event.seq !== undefined) speak(event.text, lang); // live, not the replay of earlier ones
      line.scrollIntoView({ block: "end" });
    } else if (event.type === "session.closed") {
      status("the talk has ended"); source.close();
    }
  };
}

for (const lang of config.languages) {
  const option = new Option(names ? `${names.of(lang)} (${lang})` : lang, lang);
  $("lang").append(option);
}
$("lang").value = config.lang;
$("lang").onchange = () => connect($("lang").value);

let size = parseFloat(localStorage.getItem("captionSize") || "1.6");
const setSize = (value) => {
  size = Math.min(4, Math.max(1, value));
  document.documentElement.style.setProperty("--size", `${size}rem`);
  localStorage.setItem("captionSize", String(size));
};
setSize(size);
$("smaller").onclick = () => setSize(size - 0.2);
$("larger").onclick = () => setSize(size + 0.2);

const setTheme = (theme) => {
  if (theme) document.documentElement.dataset.theme = theme; else delete document.documentElement.dataset.theme;
  const dark = theme ? theme === "dark" : matchMedia("(prefers-color-scheme: dark)").matches;
  $("theme").setAttribute("aria-pressed", String(dark));
  if (theme) localStorage.setItem("captionTheme", theme);
};
setTheme(localStorage.getItem("captionTheme"));
$("theme").onclick = () => setTheme($("theme").getAttribute("aria-pressed") === "true" ? "light" : "dark");

if ("speechSynthesis" in window) {
  $("listen").hidden = false;
  $("listen").onclick = () => {
    listening = !listening;
    $("listen").setAttribute("aria-pressed", String(listening));
    if (!listening) speechSynthesis.cancel();
  };
}

connect(config.lang);
