// Drives the gateway's key bindings with the TypeScript MCP SDK's client,
// as an ACP or UCP agent would, and prints what each call returned as one
// JSON object; the Go suite asserts it, with the downstream's counts.
//
//   MCP_URL=… MCP_TOKEN=… BINDING=acp|ucp KEY=… IN_FLIGHT_KEY=… node matrix.mjs
import { Client } from '@modelcontextprotocol/sdk/client/index.js';
import { StreamableHTTPClientTransport } from '@modelcontextprotocol/sdk/client/streamableHttp.js';

const { MCP_URL, MCP_TOKEN, BINDING, KEY, IN_FLIGHT_KEY } = process.env;
const keyMember = BINDING === 'ucp' ? 'idempotency-key' : 'idempotency_key';

// meta is the binding's request metadata: a fresh request id on every
// call, as real agents send, which must not make a retry another request.
let requests = 0;
function meta(key) {
  const m = BINDING === 'ucp'
    ? { 'ucp-agent': { profile: 'https://agent.example/profile' } }
    : { api_version: '2026-04-17' };
  m.request_id = `req-${++requests}`;
  if (key !== undefined) m[keyMember] = key;
  return m;
}

const client = new Client({ name: 'ts-matrix-agent', version: '1.0.0' });
await client.connect(new StreamableHTTPClientTransport(new URL(MCP_URL), {
  requestInit: { headers: { Authorization: `Bearer ${MCP_TOKEN}` } },
}));

// call returns the tool result's structured content, or the JSON-RPC
// error's code and data.
async function call(name, args) {
  try {
    const result = await client.callTool({ name, arguments: args });
    return { result: result.structuredContent, isError: result.isError ?? false };
  } catch (e) {
    return { error: { code: e.code, data: e.data } };
  }
}

const order = { amount: 2500, currency: 'EUR', customer: 'cus-ts' };
const report = {};

// In flight: the downstream holds the first call longer than the gateway
// waits; a duplicate sent meanwhile is answered in flight too.
const first = call('pay', { meta: meta(IN_FLIGHT_KEY), ...order, customer: 'cus-slow' });
await new Promise((resolve) => setTimeout(resolve, 300));
report.inFlightDuplicate = await call('pay', { meta: meta(IN_FLIGHT_KEY), ...order, customer: 'cus-slow' });
report.inFlightFirst = await first;
// The agent then retries as told, with the same key, until it settles.
for (let i = 0; i < 30; i++) {
  report.inFlightSettled = await call('pay', { meta: meta(IN_FLIGHT_KEY), ...order, customer: 'cus-slow' });
  if (!report.inFlightSettled.error) break;
  const after = report.inFlightSettled.error.data?.retry_after ?? 1;
  await new Promise((resolve) => setTimeout(resolve, Math.min(after, 1) * 1000));
}

report.created = await call('pay', { meta: meta(KEY), ...order });
report.replayed = await call('pay', { meta: meta(KEY), ...order });
report.changed = await call('pay', { meta: meta(KEY), ...order, amount: 2600 });
report.missing = await call('pay-keyed', { meta: meta(), ...order });
const listed = await client.listTools();
report.keyedSchema = listed.tools.find((t) => t.name === 'pay-keyed')?.inputSchema;

await client.close();
process.stdout.write(JSON.stringify(report));
