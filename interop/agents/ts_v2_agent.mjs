// A small ACP v2 agent on the TypeScript SDK's v2 API (@agentclientprotocol/sdk 2.4.0,
// `@agentclientprotocol/sdk/experimental/v2`): no model, it answers every prompt itself.
//
//     node ts_v2_agent.mjs INSTALL_DIR
//
// INSTALL_DIR holds node_modules/@agentclientprotocol/sdk. The agent advertises
// `capabilities.session` (the baseline session methods), answers `session/prompt` at
// once with the `messageId` it gives the user message, and plays each accepted prompt as
// one turn, in the order received (a prompt sent while another runs waits for its turn):
// the user message as one `user_message` upsert under that ID, `state_update` running, a
// thought in chunks, an agent message in chunks, a tool call, a second agent message in
// chunks, and `state_update` idle. A prompt with the word "long" gets one long message
// instead, slowly, which `session/cancel` stops. Sessions are kept in a folder
// ($TS_V2_AGENT_SESSIONS, else ./.ts-v2-agent), so `session/resume` with
// `replayFrom: {"type": "start"}` replays a session's messages, each as one
// whole-message upsert under its own ID, on the same process or a new one. Every message
// ID is a fresh UUID. The same behaviour as py_v2_agent.py, on the other SDK.
import { randomUUID } from "node:crypto";
import { existsSync, mkdirSync, readFileSync, readdirSync, renameSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import { Readable, Writable } from "node:stream";
import { pathToFileURL } from "node:url";

const [installDir] = process.argv.slice(2);
if (!installDir) {
  process.stderr.write("usage: node ts_v2_agent.mjs INSTALL_DIR\n");
  process.exit(2);
}
const acp = await import(pathToFileURL(join(installDir, "node_modules", "@agentclientprotocol",
  "sdk", "dist", "v2", "stable", "acp.js")).href);

const folder = process.env.TS_V2_AGENT_SESSIONS || ".ts-v2-agent";
const LONG = /\blong\b/i;
const UPSERTS = { user: "user_message", agent: "agent_message", thought: "agent_thought" };
const CHUNKS = { agent: "agent_message_chunk", thought: "agent_thought_chunk" };
const sessions = new Map(); // sessionId -> {sessionId, cwd, history, queue, cancelled, busy}
let client = null; // the AgentContext of the connection

const newId = (prefix) => `${prefix}-${randomUUID().replaceAll("-", "")}`;
const text = (t) => ({ type: "text", text: t });
const sleep = (ms) => new Promise((resolve) => setTimeout(resolve, ms));

function save(s) {
  mkdirSync(folder, { recursive: true });
  const tmp = join(folder, `.${s.sessionId}.tmp`);
  writeFileSync(tmp, JSON.stringify({ sessionId: s.sessionId, cwd: s.cwd, history: s.history }));
  renameSync(tmp, join(folder, `${s.sessionId}.json`));
}

function stored(sessionId) {
  const path = join(folder, `${sessionId}.json`);
  if (sessionId.includes("/") || !existsSync(path)) return null;
  const data = JSON.parse(readFileSync(path, "utf8"));
  return { ...data, queue: [], cancelled: false, busy: false };
}

function notFound(sessionId) {
  return new acp.RequestError(-32002, "Session not found", { sessionId });
}

const send = (s, update) => client.notify("session/update", { sessionId: s.sessionId, update });

async function message(s, kind, parts, delay = 0) {
  const messageId = newId(kind);
  const sent = [];
  for (const part of parts) {
    if (s.cancelled) break;
    await send(s, { sessionUpdate: CHUNKS[kind], messageId, content: text(part) });
    sent.push(part);
    if (delay) await sleep(delay);
  }
  if (sent.length) s.history.push({ kind, messageId, content: [text(sent.join(""))] });
}

async function turn(s, messageId, blocks) {
  s.history.push({ kind: "user", messageId, content: blocks });
  await send(s, { sessionUpdate: "user_message", messageId, content: blocks });
  await send(s, { sessionUpdate: "state_update", state: "running" });
  const said = blocks.map((b) => b.text).join(" ");
  await message(s, "thought", ["Reading the prompt. ", "It is short."]);
  if (LONG.test(said)) {
    const parts = Array.from({ length: 200 }, (_, n) => `Sentence ${n + 1} of a long answer. `);
    await message(s, "agent", parts, 10);
  } else {
    await message(s, "agent", ["You said: ", said]);
    if (!s.cancelled) {
      const toolCallId = newId("call");
      await send(s, { sessionUpdate: "tool_call_update", toolCallId, title: "Look at the prompt",
        kind: "read", status: "in_progress" });
      await send(s, { sessionUpdate: "tool_call_update", toolCallId, status: "completed" });
    }
    await message(s, "agent", ["That is all. ", "Goodbye."]);
  }
  save(s);
  await send(s, { sessionUpdate: "state_update", state: "idle",
    stopReason: s.cancelled ? "cancelled" : "end_turn" });
}

async function work(s) { // s.busy was set when it was scheduled
  try {
    while (s.queue.length) {
      const [messageId, blocks] = s.queue.shift();
      s.cancelled = false;
      await turn(s, messageId, blocks);
    }
  } finally {
    s.busy = false;
  }
}

const app = acp.agent({ name: "ts-v2-agent" })
  .onRequest("initialize", () => ({
    protocolVersion: acp.PROTOCOL_VERSION,
    info: { name: "ts-v2-agent", version: "0.1.0" },
    capabilities: { session: {} },
  }))
  .onRequest("session/new", ({ params }) => {
    const s = { sessionId: newId("sess"), cwd: params.cwd, history: [], queue: [],
      cancelled: false, busy: false };
    sessions.set(s.sessionId, s);
    save(s);
    return { sessionId: s.sessionId };
  })
  .onRequest("session/list", ({ params }) => {
    const found = [];
    for (const name of existsSync(folder) ? readdirSync(folder).sort() : []) {
      if (!name.endsWith(".json")) continue;
      const s = stored(name.slice(0, -5));
      if (s && (params.cwd == null || s.cwd === params.cwd)) {
        found.push({ sessionId: s.sessionId, cwd: s.cwd });
      }
    }
    return { sessions: found };
  })
  .onRequest("session/resume", async ({ params }) => {
    const s = sessions.get(params.sessionId) || stored(params.sessionId);
    if (!s) throw notFound(params.sessionId);
    sessions.set(s.sessionId, s);
    if (params.replayFrom != null) {
      for (const entry of [...s.history]) {
        await send(s, { sessionUpdate: UPSERTS[entry.kind], messageId: entry.messageId,
          content: entry.content });
      }
    }
    await send(s, { sessionUpdate: "state_update", state: "idle", stopReason: "end_turn" });
    return {};
  })
  .onRequest("session/close", ({ params }) => {
    const s = sessions.get(params.sessionId);
    if (!s) throw notFound(params.sessionId);
    s.cancelled = true;
    s.queue.length = 0;
    sessions.delete(params.sessionId);
    return {};
  })
  .onRequest("session/prompt", ({ params }) => {
    const s = sessions.get(params.sessionId);
    if (!s) throw notFound(params.sessionId);
    const messageId = newId("user");
    s.queue.push([messageId, params.prompt.map((b) => text(b.text ?? ""))]);
    if (!s.busy) {
      s.busy = true;
      setImmediate(() => work(s).catch((e) => process.stderr.write(`${e}\n`)));
    }
    return { messageId };
  })
  .onNotification("session/cancel", ({ params }) => {
    const s = sessions.get(params.sessionId);
    if (s) s.cancelled = true;
  });

const connection = app.connect(acp.ndJsonStream(Writable.toWeb(process.stdout),
  Readable.toWeb(process.stdin)));
client = connection.client;
await connection.closed;
