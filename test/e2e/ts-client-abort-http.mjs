// The TypeScript SDK's client, over Streamable HTTP through the sidecar,
// aborts a call to the example server's block tool. The SDK POSTs the cancel
// and leaves the call's stream open. The driving Go test writes GO on stdin
// once the sidecar has accepted the cancel; the script then releases the
// blocked tool, which ignores cancellation: it reports progress again and
// answers, on the old stream. The client must see neither; its session goes
// on. Prints ABORTED, then one JSON summary line. With TRANSPORT=sse the
// client speaks the 2024-11-05 HTTP+SSE transport (SIDECAR_URL is then the
// event stream's URL): all the server's messages come on that one stream.
//
// env: SIDECAR_URL, TRANSPORT (streamable, the default, or sse)
import { createInterface } from 'node:readline';
import { Client } from '@modelcontextprotocol/sdk/client/index.js';
import { StreamableHTTPClientTransport } from '@modelcontextprotocol/sdk/client/streamableHttp.js';
import { SSEClientTransport } from '@modelcontextprotocol/sdk/client/sse.js';

const errors = [];
const client = new Client({ name: 'ts-sdk-http-e2e', version: '1.0.0' });
client.onerror = (e) => errors.push(String(e));
const url = new URL(process.env.SIDECAR_URL);
await client.connect(process.env.TRANSPORT === 'sse' ? new SSEClientTransport(url) : new StreamableHTTPClientTransport(url));

const ac = new AbortController();
let before = 0;
let after = 0;
let outcome = 'answered';
try {
  await client.callTool({ name: 'block', arguments: { key: 'http' } }, undefined, {
    signal: ac.signal,
    onprogress: () => {
      if (ac.signal.aborted) { after++; return; }
      before++;
      ac.abort('user pressed stop');
    },
  });
} catch (e) {
  outcome = 'aborted: ' + String(e);
}
console.log('ABORTED');
const lines = createInterface({ input: process.stdin });
for await (const line of lines) { if (line === 'GO') break; }
await client.callTool({ name: 'release', arguments: { key: 'http' } });
const tools = await client.listTools();
await client.close();
console.log(JSON.stringify({ outcome, before, after, errors, tools: tools.tools.length }));
process.exit(0);
