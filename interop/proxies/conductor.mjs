// A one-agent ACP proxy chain over stdio on @thinkwell/conductor (a library, not a
// command): `node conductor.mjs INSTALL_DIR AGENT_COMMAND [TRACE_FILE]`.
// The conductor spawns AGENT_COMMAND (a shell-less command line: one word here, the
// suite's {agent}) and routes the client, read as JSON lines from stdin and written as
// JSON lines to stdout, to it. The MCP bridge is off. With TRACE_FILE the conductor
// writes every hop as JSONL.
import { createInterface } from "node:readline";
import { join } from "node:path";
import { pathToFileURL } from "node:url";

const [installDir, agentCommand, tracePath] = process.argv.slice(2);
if (!installDir || !agentCommand) {
  process.stderr.write("usage: node conductor.mjs INSTALL_DIR AGENT_COMMAND [TRACE_FILE]\n");
  process.exit(2);
}
const lib = await import(pathToFileURL(
  join(installDir, "node_modules", "@thinkwell", "conductor", "dist", "index.js")).href);

// The client side: stdin/stdout as newline-delimited JSON.
function stdioClient() {
  const queue = [];
  const waiting = [];
  let ended = false;
  const lines = createInterface({ input: process.stdin, crlfDelay: Infinity });
  const push = (item) => (waiting.length ? waiting.shift()(item) : queue.push(item));
  lines.on("line", (line) => {
    if (!line.trim()) return;
    let msg;
    try { msg = JSON.parse(line); } catch { return; }  // not JSON: nothing to route
    push({ value: msg, done: false });
  });
  lines.on("close", () => { ended = true; push({ value: undefined, done: true }); });
  const messages = {
    [Symbol.asyncIterator]() {
      return {
        next() {
          if (queue.length) return Promise.resolve(queue.shift());
          if (ended) return Promise.resolve({ value: undefined, done: true });
          return new Promise((resolve) => waiting.push(resolve));
        },
      };
    },
  };
  return {
    async connect() {
      return {
        send(message) { process.stdout.write(JSON.stringify(message) + "\n"); },
        messages,
        async close() { lines.close(); },
      };
    },
  };
}

const conductor = new lib.Conductor({
  name: "acp-conformance-interop",
  instantiator: lib.fromCommands([agentCommand]),
  mcpBridgeMode: "disabled",
  ...(tracePath ? { trace: { path: tracePath } } : {}),
});
try {
  await conductor.connect(stdioClient());
} finally {
  await conductor.shutdown().catch(() => {});
}
process.exit(0);
