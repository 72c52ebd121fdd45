// The TypeScript SDK's client aborts a call to server-everything's
// long-running tool through mcp-cancel-proxy. server-everything aborts its
// signal but keeps sending progress to the end; the proxy must keep all of
// it, and any answer, from the client. Prints one JSON summary line.
//
// env: PROXY_BIN (the proxy binary), EVERYTHING_JS (server-everything's dist/index.js)
import { Client } from '@modelcontextprotocol/sdk/client/index.js';
import { StdioClientTransport } from '@modelcontextprotocol/sdk/client/stdio.js';

const steps = 4;
const transport = new StdioClientTransport({
  command: process.env.PROXY_BIN,
  args: ['--log-level', 'debug', '--term-after', '300ms', '--kill-after', '2s', '--',
    process.execPath, process.env.EVERYTHING_JS, 'stdio'],
  stderr: 'pipe',
});

// Proxy log lines, and a way to wait for a count of matching ones.
const lines = [];
let wake = () => {};
let buf = '';
transport.stderr.on('data', (chunk) => {
  buf += chunk;
  let i;
  while ((i = buf.indexOf('\n')) >= 0) {
    lines.push(buf.slice(0, i));
    buf = buf.slice(i + 1);
    wake();
  }
});
async function waitForLines(text, count) {
  for (;;) {
    if (lines.filter((l) => l.includes(text)).length >= count) return;
    await new Promise((resolve) => { wake = resolve; });
  }
}

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
// suppressed by the proxy, which logs it.
await waitForLines('progress for a cancelled request', steps - before);
await client.ping();
await client.close();
// server-everything ignores stdin EOF: the proxy must stop it with SIGTERM.
await waitForLines('session ended', 1);
console.log(JSON.stringify({
  outcome, before, after, errors,
  cancelAccepted: lines.some((l) => l.includes('"cancel accepted"') && l.includes('user pressed stop')),
  suppressedProgress: lines.filter((l) => l.includes('progress for a cancelled request')).length,
  serverExited: lines.some((l) => l.includes('"server exited"')),
}));
