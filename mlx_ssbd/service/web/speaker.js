// The speaker's page: opens a caption session on /v1/stream, feeds it the microphone (PCM16 at
// 16 kHz from an AudioWorklet), typed text (growing partials) or a recording, and shows what the
// server heard and the captions, live. Protocol: docs/service.md. Caption text only via textContent.
"use strict";

const config = JSON.parse(document.getElementById("config").textContent);
const $ = (id) => document.getElementById(id);
const RATE = 16000;
const WORDS_PER_SECOND = 2.5; // text mode: how fast typed text is revealed, like speech
const FAST_LEAD_S = 10; // recording mode, fast: audio sent ahead of what the server has heard

const state = {
  ws: null, sid: null, settings: null, targets: [], input: null, live: false, sending: false, closing: false,
  finished: false, methodChosen: false,
  sentS: 0, heardS: 0, lag: null, stats: null, stop: null,
};

// -- the form ---------------------------------------------------------------------------------

function init() {
  $("model").textContent = `Model: ${config.model}`;
  for (const name of Object.keys(config.methods)) {
    $("method").add(new Option(name, name, false, name === config.method));
  }
  $("beta").value = config.beta;
  $("method").addEventListener("change", () => {
    state.methodChosen = true;
    $("beta").value = config.methods[$("method").value];
  });
  $("beta").addEventListener("change", () => { state.methodChosen = true; });
  $("key-row").hidden = !config.api_key_required;
  const params = new URLSearchParams(location.search);
  for (const field of ["source", "target", "method", "beta"]) {
    if (params.get(field)) $(field).value = params.get(field);
  }
  state.methodChosen = Boolean(params.get("method") || params.get("beta"));
  if (params.get("targets")) $("target").value = params.get("targets").split(",").join(", ");
  if (["mic", "text", "file"].includes(params.get("mode"))) {
    document.querySelector(`input[name=mode][value=${params.get("mode")}]`).checked = true;
  }
  document.querySelectorAll("input[name=mode]").forEach((radio) => radio.addEventListener("change", showMode));
  showMode();
  $("settings").addEventListener("submit", (event) => { event.preventDefault(); start(); });
  $("stop").addEventListener("click", stop);
  $("resume").addEventListener("click", () => connect(state.sid));
}

function mode() { return document.querySelector("input[name=mode]:checked").value; }

function showMode() {
  $("text-input").hidden = mode() !== "text";
  $("file-input").hidden = mode() !== "file";
  if (!state.methodChosen) {
    // speech (the microphone, a recording) has a method of its own until the speaker picks one
    $("method").value = mode() === "text" ? config.method : config.speech_method;
    $("beta").value = config.methods[$("method").value];
  }
}

function setStatus(text) { $("status").textContent = text; }

function showUncovered(uncovered) {
  // the caption languages that the glossary or the example translations have nothing for
  const parts = [];
  if (uncovered && uncovered.glossary) parts.push(`the glossary has no terms for ${uncovered.glossary.join(", ")}`);
  if (uncovered && uncovered.examples) parts.push(`the example translations have none for ${uncovered.examples.join(", ")}`);
  const said = parts.join("; ");
  $("note").textContent = said ? `${said[0].toUpperCase()}${said.slice(1)}: those captions go without them.` : "";
}

function showError(code, message) {
  const item = document.createElement("li");
  item.textContent = `${code}: ${message}`;
  $("errors").appendChild(item);
}

// -- the session ------------------------------------------------------------------------------

function start() {
  if (mode() === "file" && !$("file").files.length) { showError("no_file", "choose a recording first"); return; }
  if (mode() === "text" && !$("text").value.trim()) { showError("no_text", "type or paste some text first"); return; }
  $("errors").replaceChildren();
  $("languages-out").replaceChildren();
  for (const id of ["heard-done", "heard-open", "figures", "links", "note"]) $(id).textContent = "";
  $("qr").hidden = true;
  Object.assign(state, { sid: null, resumeToken: null, input: mode(), live: false, sending: false, closing: false, finished: false,
                         sentS: 0, heardS: 0, lag: null, stats: null });
  const targets = $("target").value.split(",").map((code) => code.trim()).filter((code) => code);
  state.settings = { type: "session.update", source: $("source").value.trim(), targets,
                     method: $("method").value, beta: Number($("beta").value) };
  if ($("glossary").value.trim()) state.settings.glossary = $("glossary").value;
  $("start").disabled = true;
  $("stop").disabled = false;
  connect(null);
}

function connect(resumeId) {
  const key = $("key").value;
  const url = new URL("/v1/stream", location.href);
  url.protocol = location.protocol === "https:" ? "wss:" : "ws:";
  if (key) url.searchParams.set("api_key", key);
  setStatus(resumeId ? "Resuming the session…" : "Connecting…");
  $("resume").hidden = true;
  const ws = new WebSocket(url);
  ws.binaryType = "arraybuffer";
  ws.onmessage = (message) => handle(JSON.parse(message.data), resumeId);
  ws.onclose = (close) => lost(ws, close);
  state.ws = ws;
}

function send(message) {
  if (state.ws && state.ws.readyState === WebSocket.OPEN) {
    state.ws.send(typeof message === "string" || message instanceof ArrayBuffer ? message : JSON.stringify(message));
    return true;
  }
  return false;
}

function sendSource(message) {
  // source text and audio only once the session is live on this connection (a resumed
  // connection must say session.resume before any source, or it would start a new session)
  return state.live && send(message);
}

function handle(event, resumeId) {
  switch (event.type) {
    case "session.created":
      // the token that lets this page, and only it, resume its own session: kept in memory only
      if (!resumeId) state.resumeToken = event.resume_token;
      send(resumeId ? { type: "session.resume", session: resumeId, resume_token: state.resumeToken }
                    : state.settings);
      break;
    case "session.updated":
    case "session.resumed":
      state.sid = event.session;
      state.live = true;
      state.targets = event.targets;
      showLanguages(event.targets);
      showUncovered(event.uncovered);
      setStatus(event.type === "session.resumed" ? `Resumed; ${event.captions} captions so far.` : "Live.");
      showLinks(false);
      if (!state.sending) startInput();
      state.sending = true;
      break;
    case "transcription.update":
      state.heardS = Math.max(state.heardS, event.end || 0);
      if (event.final) {
        $("heard-done").textContent = `${$("heard-done").textContent} ${event.text}`.trim();
        $("heard-open").textContent = "";
      } else {
        $("heard-open").textContent = event.text;
      }
      break;
    case "translation.update": {
      const out = languageOut(event.target);
      out.querySelector(".stable").textContent = event.stable;
      out.querySelector(".unstable").textContent = event.unstable;
      showFigures(event);
      break;
    }
    case "translation.commit": {
      const out = languageOut(event.target), line = document.createElement("li");
      line.textContent = event.text;
      out.querySelector(".committed").appendChild(line);
      out.querySelector(".stable").textContent = "";
      out.querySelector(".unstable").textContent = "";
      showFigures(event);
      break;
    }
    case "error":
      showError(event.code, event.message);
      if (!state.sid && resumeId) {
        $("resume").hidden = false;
        setStatus("The session could not be resumed.");
      } else if (!state.sid) { // the settings were refused: nothing started; fix them and start again
        finished("error");
      }
      break;
    case "session.closed":
      finished(event.reason);
      break;
    default:
      break;
  }
}

function showLanguages(targets) {
  // one section per caption language (kept when a resumed session brings the same languages)
  for (const target of targets) {
    if (languageOut(target)) continue;
    const section = $("language-template").content.firstElementChild.cloneNode(true);
    section.id = `lang-${target}`;
    section.lang = target;
    section.querySelector(".lang").textContent = `(${target})`;
    $("languages-out").appendChild(section);
  }
}

function languageOut(target) { return document.getElementById(`lang-${target}`); }

function showFigures(event) {
  // lag: audio sent so far minus the audio time of the newest word this event translates;
  // the last update's cost (commits carry no stats: the last ones stay)
  if (event.end != null && state.input !== "text") state.lag = state.sentS - event.end;
  if (event.stats) state.stats = event.stats;
  const parts = [];
  if (state.lag != null) parts.push(`lag ${state.lag.toFixed(1)} s`);
  if (state.stats) {
    parts.push(`update ${state.stats.wall_s.toFixed(2)} s`, `${state.stats.forward_passes} passes`,
               `${state.stats.accepted}/${state.stats.draft_tokens} draft tokens kept`);
  }
  $("figures").textContent = parts.join(" · ");
}

function showLinks(ended) {
  const links = $("links");
  links.replaceChildren();
  const add = (href, text) => {
    const a = document.createElement("a");
    a.href = href; a.textContent = text; a.target = "_blank"; a.rel = "noopener";
    links.append(a, " ");
  };
  const qr = $("qr");
  qr.hidden = false;
  qr.querySelector("img").src = `/v1/sessions/${state.sid}/qr.svg`;
  qr.querySelector("a").href = `/watch/${state.sid}`;
  for (const target of state.targets) {
    add(`/watch/${state.sid}?lang=${target}`, `Phone page ${target}`);
    add(`/captions/${state.sid}?lang=${target}`, `Viewer page ${target} (for OBS)`);
    if (ended) {
      for (const kind of ["srt", "vtt"]) add(`/v1/sessions/${state.sid}/transcript.${target}.${kind}`,
                                             `Transcript ${target} .${kind}`);
    }
  }
  if (ended) add(`/v1/sessions/${state.sid}/transcript.json`, "Transcript .json (every language)");
}

function stop() {
  $("stop").disabled = true;
  stopInput();
  state.closing = true;
  setStatus("Finishing the last captions…");
  if (!send({ type: "session.close" })) finished("closed");
}

function finished(reason) {
  state.finished = true;
  state.live = false;
  stopInput();
  setStatus(reason === "closed" ? "Ended. The transcripts are below." : `The session ended (${reason}).`);
  if (state.sid) showLinks(true);
  $("start").disabled = false;
  $("stop").disabled = true;
  $("resume").hidden = true;
  if (state.ws) state.ws.close();
}

function lost(ws, close) {
  if (ws !== state.ws || state.finished) return;
  state.live = false;
  if (!state.sid) {
    showError("connection_failed", close.code === 1006 ? "the server cannot be reached (or refused the key)"
                                                       : `closed (${close.code}) ${close.reason}`);
    finished("error");
    return;
  }
  setStatus("The connection was lost.");
  $("resume").hidden = false;
  $("resume").focus();
}

// -- the inputs -------------------------------------------------------------------------------

function startInput() {
  const inputs = { mic: startMicrophone, text: startText, file: startFile };
  inputs[state.input]().catch((error) => { showError("input_failed", String(error)); stop(); });
}

function stopInput() {
  if (state.stop) { state.stop(); state.stop = null; }
}

function sendAudio(buffer) {
  if (sendSource(buffer)) state.sentS += buffer.byteLength / 2 / RATE;
}

async function startMicrophone() {
  const stream = await navigator.mediaDevices.getUserMedia({ audio: { channelCount: 1, echoCancellation: true,
                                                                       noiseSuppression: true } });
  const context = new AudioContext();
  await context.audioWorklet.addModule("/static/pcm-worklet.js");
  const encoder = new AudioWorkletNode(context, "pcm-encoder");
  encoder.port.onmessage = (message) => { if (!state.closing) sendAudio(message.data); };
  const silent = new GainNode(context, { gain: 0 }); // pulls the graph without playing anything
  context.createMediaStreamSource(stream).connect(encoder).connect(silent).connect(context.destination);
  state.stop = () => { stream.getTracks().forEach((track) => track.stop()); context.close(); };
}

const sleep = (ms) => new Promise((resolve) => setTimeout(resolve, ms));

async function startText() {
  let stopped = false;
  state.stop = () => { stopped = true; };
  const words = $("text").value.trim().split(/\s+/);
  let sentence = [], segment = 0;
  for (const [i, word] of words.entries()) {
    if (stopped) return;
    sentence.push(word);
    const final = /[.!?]["»”)]*$/.test(word) || i === words.length - 1;
    while (!sendSource({ type: "source.update", segment: `t${segment}`, text: sentence.join(" "), final })) {
      if (stopped) return;
      await sleep(500); // the connection is being resumed
    }
    if (final) { sentence = []; segment += 1; }
    await sleep(1000 / WORDS_PER_SECOND);
  }
  if (!stopped) setStatus("All the text is sent; press Stop to end the session.");
}

async function startFile() {
  let stopped = false;
  state.stop = () => { stopped = true; };
  const encoded = await $("file").files[0].arrayBuffer();
  const decoded = await new AudioContext().decodeAudioData(encoded);
  const offline = new OfflineAudioContext(1, Math.ceil(decoded.duration * RATE), RATE);
  const source = new AudioBufferSourceNode(offline, { buffer: decoded });
  source.connect(offline.destination);
  source.start();
  const samples = (await offline.startRendering()).getChannelData(0);
  const fast = $("fast").checked, frame = RATE / 10, t0 = performance.now();
  for (let i = 0; i < samples.length && !stopped; i += frame) {
    const chunk = samples.subarray(i, i + frame), pcm = new Int16Array(chunk.length);
    for (let j = 0; j < chunk.length; j++) pcm[j] = Math.max(-1, Math.min(1, chunk[j])) * 0x7fff;
    while (!state.live && !stopped) await sleep(500); // being resumed
    sendAudio(pcm.buffer);
    const ahead = fast ? state.sentS - state.heardS - FAST_LEAD_S : state.sentS - (performance.now() - t0) / 1000;
    if (ahead > 0) await sleep(ahead * 1000);
  }
  if (!stopped) stop();
}

init();
