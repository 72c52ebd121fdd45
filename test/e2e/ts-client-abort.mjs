// The TypeScript SDK's client aborts a call to server-everything's
// long-running tool through mcp-cancel-proxy. server-everything aborts its
// signal but keeps sending progress to the end; the proxy must keep all of
// it, and any answer, from the client. Prints one JSON summary line.
//
// env: PROXY_BIN (the proxy binary), EVERYTHING_JS (server-everything's dist/index.js)
import { Client } from '@modelcontextprotocol/sdk/client/index.js';
import { StdioClientTransport } from '@modelcontextprotocol/sdk/client/stdio.js';
import { proxyEvents } from './proxy-events.mjs';

const steps = 4;
const transport = new StdioClientTransport({
  command: process.env.PROXY_BIN,
  args: ['--log-level', 'debug', '--term-after', '300ms', '--kill-after', '2s', '--',
    process.execPath, process.env.EVERYTHING_JS, 'stdio'],
  stderr: 'pipe',
});

const events = proxyEvents(transport.stderr);
const { matching } = events;
const waitForEvents = (match, count) => events.waitFor(match, count);
const progressSuppressed = (e) => e.event === 'suppressed' && e.method === 'notifications/progress';

const errors = [];
const client = new Client({ name: 'ts-sdk-e2e', version: '1.0.0' });
client.onerror = (e) => errors.push(String(e));
await client.connect(transport);

const ac = new AbortController();
let before = 0;
let after = 0;
let outcome = 'answered';
try {
  await client.callTool(
    { name: 'trigger-long-running-operation', arguments: { duration: steps, steps } },
    undefined,
    {
      signal: ac.signal,
      onprogress: () => {
        if (ac.signal.aborted) { after++; return; }
        before++;
        ac.abort('user pressed stop');
      },
    },
  );
} catch (e) {
  outcome = 'aborted: ' + String(e);
}
// server-everything sends the remaining progress one second apart; each is
// suppressed by the proxy, which says so.
await waitForEvents(progressSuppressed, steps - before);
await client.ping();
await client.close();
// server-everything ignores stdin EOF: the proxy must stop it (SIGTERM).
await waitForEvents((e) => e.event === 'server_exited', 1);
console.log(JSON.stringify({
  outcome, before, after, errors,
  cancelAccepted: matching((e) => e.event === 'cancel_accepted' && e.reason === 'user pressed stop') > 0,
  suppressedProgress: matching(progressSuppressed),
  serverExited: true,
}));
