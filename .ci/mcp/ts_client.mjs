// The official MCP TypeScript SDK (@modelcontextprotocol/sdk from npm) as a client of a
// running idem. Usage: node ts_client.mjs BASE_URL (with NODE_PATH at the SDK's node_modules).
//
// Declares an action in namespace `agents-ts` (a loopback destination that counts what it
// receives), connects over Streamable HTTP (the SDK's initialize handshake: it offers its
// newest revision and takes the server's answer), lists the tools and calls one: delivered
// once, a regenerated draft replayed with nothing new sent, a missing identity refused as a
// tool error. Prints one `N passed, N failed` line; exits non-zero on a failure.
import http from "node:http";
import { createRequire } from "node:module";

const require = createRequire(process.env.IDEM_MCP_TS_MODULES + "/");
const { Client } = require("@modelcontextprotocol/sdk/client/index.js");
const { StreamableHTTPClientTransport } = require("@modelcontextprotocol/sdk/client/streamableHttp.js");
const { LATEST_PROTOCOL_VERSION } = require("@modelcontextprotocol/sdk/types.js");

const BASE = process.argv[2].replace(/\/$/, "");
const received = [];
let passed = 0;
let failed = 0;
const check = (what, ok, detail) => {
  if (ok) passed++;
  else {
    failed++;
    console.log(`FAIL ${what}: ${JSON.stringify(detail)}`);
  }
};

const dest = http.createServer((req, res) => {
  let body = "";
  req.on("data", (c) => (body += c));
  req.on("end", () => {
    received.push([req.url, body]);
    res.writeHead(201, { "content-type": "application/json" });
    res.end(JSON.stringify({ id: `msg_${received.length}` }));
  });
});
await new Promise((r) => dest.listen(0, "127.0.0.1", r));
const port = dest.address().port;

const admin = async (method, path, body) => {
  const r = await fetch(BASE + path, {
    method,
    headers: { "content-type": "application/json" },
    body: JSON.stringify(body),
  });
  if (!r.ok) throw new Error(`${method} ${path}: ${r.status} ${await r.text()}`);
};
await admin("PATCH", "/v1/namespaces/agents-ts", { egress: { allow: [`127.0.0.1:${port}`] } });
await admin("PUT", "/v1/namespaces/agents-ts/actions/send_followup", {
  title: "Send the follow-up",
  description: "Sends the follow-up e-mail of an order to its customer.",
  input_schema: {
    type: "object",
    properties: { order_id: { type: "string" }, to: { type: "string" }, text: { type: "string" } },
    required: ["order_id", "to", "text"],
  },
  key: "{order_id}:followup:v1",
  identity: ["order_id", "to"],
  deliver: {
    http: {
      method: "POST",
      url: `http://127.0.0.1:${port}/send/{{order_id}}`,
      body: { to: "{{to}}", text: "{{text}}" },
    },
  },
});

const client = new Client({ name: "idem-ci", version: "1.0.0" });
const transport = new StreamableHTTPClientTransport(new URL(`${BASE}/mcp/agents-ts`));
try {
  await client.connect(transport);
  const label = LATEST_PROTOCOL_VERSION;
  check(`${label} session id`, typeof transport.sessionId === "string", transport.sessionId);
  check(`${label} server`, client.getServerVersion()?.name === "idem", client.getServerVersion());
  const { tools } = await client.listTools();
  check(`${label} tools/list`, tools.map((t) => t.name).join() === "send_followup", tools);
  const a = tools[0]?.annotations ?? {};
  check(`${label} annotations`, a.destructiveHint && a.idempotentHint && a.openWorldHint, a);
  const args = { order_id: "ts-1", to: "ann@example.com", text: "Hello Ann" };
  const first = await client.callTool({ name: "send_followup", arguments: args });
  check(`${label} performed`, first.structuredContent?.outcome === "performed" && !first.isError, first);
  check(`${label} text`, first.content?.[0]?.text?.startsWith("Done"), first.content);
  const again = await client.callTool({ name: "send_followup", arguments: { ...args, text: "Regenerated" } });
  check(`${label} replayed`, again.structuredContent?.outcome === "completed" && again.structuredContent?.replayed === true, again);
  const missing = await client.callTool({ name: "send_followup", arguments: { to: "a@example.com", text: "x" } });
  check(`${label} missing identity`, missing.isError && missing.structuredContent?.outcome === "missing_identity_field", missing);
  check(`${label} one delivery`, received.length === 1, received);
  await client.close();
} catch (e) {
  check("connects and calls", false, String(e));
}
dest.close();
console.log(`${passed} passed, ${failed} failed`);
process.exit(failed ? 1 : 0);
