// A one-shot ACP v2 client on the TypeScript SDK's v2 API (@agentclientprotocol/sdk
// 2.4.0, `@agentclientprotocol/sdk/experimental/v2`).
//
//     node ts_v2_client.mjs INSTALL_DIR [--resume SESSION] --prompt TEXT AGENT_COMMAND
//
// INSTALL_DIR holds node_modules/@agentclientprotocol/sdk. The client spawns the agent
// (AGENT_COMMAND split at spaces), initialises with protocol version 2 (it stops if the
// agent answers another version or does not advertise `capabilities.session`, as a
// v2-only client must), opens a session with the SDK's `buildSession(cwd).start()` (or,
// with --resume, resumes SESSION with `replayFrom: {"type": "start"}`), sends one prompt
// and, when the session reports `state_update` idle after the prompt was accepted, prints
// the conversation it holds: one line per message in the order each message first
// appeared, `user: TEXT`, `agent: TEXT` or `thought: TEXT`. Messages are kept by their
// kind and `messageId` as the v2 draft says: a chunk appends its content to its message,
// a whole-message upsert (`user_message`, `agent_message`, `agent_thought`) replaces the
// message's content (`content: []` or `null` clears it; an upsert without `content` keeps
// it).
// Updates of a new session are read with the SDK's `ActiveSession.nextUpdate()`; those of
// a resumed one with a `session/update` handler (the SDK has no active-session helper
// for a resumed session). Permission requests are allowed once; other agent requests get
// the SDK's answer to an unknown method. The same display as py_v2_client.py.
import { spawn } from "node:child_process";
import { join } from "node:path";
import { Readable, Writable } from "node:stream";
import { pathToFileURL } from "node:url";

const argv = process.argv.slice(2);
const installDir = argv.shift();
let resume = null;
let prompt = null;
while (argv.length > 1 && argv[0].startsWith("--")) {
  const flag = argv.shift();
  if (flag === "--resume") resume = argv.shift();
  else if (flag === "--prompt") prompt = argv.shift();
  else break;
}
const agentCommand = argv.join(" ").split(/\s+/).filter(Boolean);
if (!installDir || prompt === null || !agentCommand.length) {
  process.stderr.write("usage: node ts_v2_client.mjs INSTALL_DIR [--resume SESSION] " +
    "--prompt TEXT AGENT_COMMAND\n");
  process.exit(2);
}
const acp = await import(pathToFileURL(join(installDir, "node_modules", "@agentclientprotocol",
  "sdk", "dist", "v2", "stable", "acp.js")).href);

const CHUNKS = { user_message_chunk: "user", agent_message_chunk: "agent",
  agent_thought_chunk: "thought" };
const UPSERTS = { user_message: "user", agent_message: "agent", agent_thought: "thought" };
const messages = new Map(); // `${kind}\u0000${messageId}` -> [kind, [text, ...]], first-seen order
let accepted = false; // the prompt is sent: the next idle state ends the turn
let finish = null;
const finished = new Promise((resolve) => { finish = resolve; });

const textOf = (block) => (block && typeof block.text === "string" ? block.text : "");

function apply(update) {
  const kind = update && update.sessionUpdate;
  if (kind in CHUNKS) {
    const key = `${CHUNKS[kind]}\u0000${update.messageId}`;
    if (!messages.has(key)) messages.set(key, [CHUNKS[kind], []]);
    messages.get(key)[1].push(textOf(update.content));
  } else if (kind in UPSERTS) {
    const key = `${UPSERTS[kind]}\u0000${update.messageId}`;
    if (!messages.has(key)) messages.set(key, [UPSERTS[kind], []]);
    if (Array.isArray(update.content)) messages.get(key)[1] = update.content.map(textOf);
    else if (update.content === null) messages.get(key)[1] = []; // null clears, like []
  } else if (kind === "state_update" && update.state === "idle" && accepted) {
    finish();
  }
}

const child = spawn(agentCommand[0], agentCommand.slice(1), { stdio: ["pipe", "pipe", "inherit"] });
child.on("error", (e) => { process.stderr.write(`cannot start the agent: ${e.message}\n`); process.exit(2); });

const app = acp.client({ name: "ts-v2-client" })
  .onRequest("session/request_permission", ({ params }) => {
    const allow = params.options.filter((o) => String(o.kind).startsWith("allow"));
    const option = (allow.length ? allow : params.options)[0];
    return { outcome: { outcome: "selected", optionId: option.optionId } };
  })
  .onNotification("session/update", ({ params }) => {
    if (resume) apply(params.update); // a new session's updates come from nextUpdate()
  });
const connection = app.connect(acp.ndJsonStream(Writable.toWeb(child.stdin),
  Readable.toWeb(child.stdout)));
const agent = connection.agent;

let code = 0;
try {
  const init = await agent.request("initialize", {
    protocolVersion: acp.PROTOCOL_VERSION, info: { name: "ts-v2-client", version: "0.1.0" } });
  if (init.protocolVersion !== acp.PROTOCOL_VERSION) {
    process.stderr.write(`the agent answered protocol version ${init.protocolVersion}; this ` +
      `client speaks only ${acp.PROTOCOL_VERSION}\n`);
    code = 2;
  } else if (!init.capabilities || init.capabilities.session == null) {
    process.stderr.write("the agent does not advertise capabilities.session\n");
    code = 2;
  } else if (resume) {
    await agent.request("session/resume", { sessionId: resume, cwd: process.cwd(),
      replayFrom: { type: "start" } });
    accepted = true;
    await agent.request("session/prompt", { sessionId: resume,
      prompt: [{ type: "text", text: prompt }] });
    await finished;
  } else {
    const session = await agent.buildSession(process.cwd()).start();
    accepted = true;
    const turn = session.prompt(prompt);
    for (;;) {
      const next = await session.nextUpdate();
      if (next.kind === "stop") break;
      apply(next.update);
    }
    await turn;
    session.dispose();
  }
  if (code === 0) {
    for (const [kind, parts] of messages.values()) {
      process.stdout.write(`${kind}: ${parts.join("")}`.replaceAll("\n", " ") + "\n");
    }
  }
} catch (e) {
  process.stderr.write(`${e && e.message ? e.message : e}\n`);
  code = 1;
}
connection.close();
child.stdin.end();
process.exitCode = code;
setTimeout(() => { child.kill(); process.exit(code); }, 2000).unref();
