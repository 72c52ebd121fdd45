// The TypeScript SDK's client times out on a call of a paid tool (the
// example server's block, which waits until released) and issues it again,
// as an application retrying would. Through mcp-cancel-proxy with
// `reissue: join` for that tool, the re-issue joins the call still running
// instead of starting it a second time: the server runs it once, and the
// re-issue gets its answer and its later progress. Prints one JSON summary
// line.
//
// env: PROXY_BIN (the proxy binary), CONFIG (its configuration file),
// UPSTREAM (if set, the proxy bridges to the example server there, whose
// log is not seen here: executions is then the test's to count),
// SIDECAR_URL (if set, the script is the SDK's client of a sidecar the test
// runs: its Streamable HTTP client for a URL ending in /mcp, else its
// HTTP+SSE client; once the re-issue is sent it prints REISSUED and waits
// for GO on stdin, which the test writes when the sidecar says it joined;
// the test counts executions and joins)
import { createInterface } from 'node:readline';
import { Client } from '@modelcontextprotocol/sdk/client/index.js';
import { StdioClientTransport } from '@modelcontextprotocol/sdk/client/stdio.js';
import { SSEClientTransport } from '@modelcontextprotocol/sdk/client/sse.js';
import { StreamableHTTPClientTransport } from '@modelcontextprotocol/sdk/client/streamableHttp.js';
import { proxyEvents } from './proxy-events.mjs';

const sidecar = process.env.SIDECAR_URL;
const common = ['--config', process.env.CONFIG, '--log-level', 'debug'];
const httpClient = (url) => url.pathname.endsWith('/mcp') ? new StreamableHTTPClientTransport(url) : new SSEClientTransport(url);
const transport = sidecar ? httpClient(new URL(sidecar)) : new StdioClientTransport({
  command: process.env.PROXY_BIN,
  args: process.env.UPSTREAM
    ? [...common, '--upstream', process.env.UPSTREAM]
    : [...common, '--', process.env.PROXY_BIN, 'example-server'],
  stderr: 'pipe',
});

// The proxy's events, and the example server's own lines, which pass
// through on stderr.
let executions = 0;
const events = sidecar ? null : proxyEvents(transport.stderr, (line) => {
  if (line.includes('example server: block pay: started')) executions++;
});
const seen = events ? events.seen : [];

// The SDK hands a response to its caller at once but a notification a
// moment later (a microtask), and forgets a call's progress handler with
// its response: progress read in the same chunk as its call's answer comes
// to onerror as "unknown token". That one is the re-issue's progress all
// the same (under its token, before its answer), and is counted so.
const errors = [];
let progressRaced = 0;
const client = new Client({ name: 'ts-sdk-e2e', version: '1.0.0' });
client.onerror = (e) => {
  const s = String(e);
  if (s.includes('progress notification for an unknown token') && s.includes('released pay')) progressRaced++;
  else errors.push(s);
};
await client.connect(transport);

const call = { name: 'block', arguments: { key: 'pay' } };
let first = 'answered';
try {
  // The SDK cancels it at its timeout; it asks for progress, as the retry does.
  await client.callTool(call, undefined, { timeout: 1000, onprogress: () => {} });
} catch (e) {
  first = String(e.message || e);
}
let progress = 0;
const again = client.callTool(call, undefined, { timeout: 60000, onprogress: () => { progress++; } });
if (sidecar) {
  console.log('REISSUED');
  for await (const line of createInterface({ input: process.stdin })) { if (line === 'GO') break; }
} else {
  await events.waitFor((e) => e.event === 'reissue_joined'); // held by the proxy, never sent
}
await client.callTool({ name: 'release', arguments: { key: 'pay' } });
const second = await again;
await client.close();
console.log(JSON.stringify({ first, second: second.structuredContent, progress: progress + progressRaced, executions, errors,
  joined: seen.filter((e) => e.event === 'joined').length }));
process.exit(0);
