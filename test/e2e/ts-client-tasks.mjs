// The TypeScript SDK's client uses tasks (2025-11-25) with a server that
// has none, the example server, through mcp-cancel-proxy with `task: host`
// for its slow_honour and block tools. The SDK learns from tools/list that
// those tools support tasks, so its callToolStream asks for one by itself:
// it gets a task, polls it and fetches its result; a second task (block,
// which waits until released) is cancelled with the SDK's cancelTask.
// With WAIT_STARTED set, it prints STARTED once it has the second task,
// and cancels it only when the test writes CANCEL on stdin (the server has
// said the call runs: a cancel read before the call started shows
// nothing in the server's log). Once the cancel is in it prints CANCELLED
// and waits for GO on stdin,
// which the test writes when the server says it saw the cancel; then it
// releases the block and prints one JSON summary line.
//
// env: PROXY_BIN (the proxy binary), CONFIG (its configuration file),
// UPSTREAM (if set, the proxy bridges to the example server there),
// SIDECAR_URL (if set, the script is the SDK's Streamable HTTP client of a
// sidecar the test runs), SERVER (a JSON argv: the stdio server the proxy
// runs in place of the example server), DONE, CANCEL and RELEASE (JSON
// tool calls, {name, arguments}, in place of the example server's; RELEASE
// "" for none).
import { createInterface } from 'node:readline';
import { Client } from '@modelcontextprotocol/sdk/client/index.js';
import { StdioClientTransport } from '@modelcontextprotocol/sdk/client/stdio.js';
import { StreamableHTTPClientTransport } from '@modelcontextprotocol/sdk/client/streamableHttp.js';
import { CallToolResultSchema } from '@modelcontextprotocol/sdk/types.js';

const sidecar = process.env.SIDECAR_URL;
const common = ['--config', process.env.CONFIG];
const transport = sidecar ? new StreamableHTTPClientTransport(new URL(sidecar)) : new StdioClientTransport({
  command: process.env.PROXY_BIN,
  args: process.env.UPSTREAM
    ? [...common, '--upstream', process.env.UPSTREAM]
    : [...common, '--', ...(process.env.SERVER ? JSON.parse(process.env.SERVER) : [process.env.PROXY_BIN, 'example-server'])],
  stderr: 'inherit',
  env: { ...process.env }, // the server's own (PYTHONPATH): the SDK passes a few variables only by default
});

const errors = [];
const client = new Client({ name: 'ts-sdk-tasks', version: '1.0.0' });
client.onerror = (e) => errors.push(String(e));
await client.connect(transport);
const summary = { declared: !!client.getServerCapabilities()?.tasks?.requests?.tools?.call, taskTools: [], messages: [] };
for (const tool of (await client.listTools()).tools) {
  if (tool.execution?.taskSupport === 'optional') summary.taskTools.push(tool.name);
}

const call = (name, fallback) => process.env[name] !== undefined ? (process.env[name] && JSON.parse(process.env[name])) : fallback;
const done = call('DONE', { name: 'slow_honour', arguments: { seconds: 0.3, steps: 2 } });
const cancel = call('CANCEL', { name: 'block', arguments: { key: 'ts' } });
const release = call('RELEASE', { name: 'release', arguments: { key: 'ts' } });

// A task that runs to its end: taskCreated, then the result.
for await (const m of client.experimental.tasks.callToolStream(done, CallToolResultSchema)) {
  summary.messages.push(m.type);
  if (m.type === 'taskCreated') summary.doneTask = m.task.taskId;
  if (m.type === 'result') summary.result = m.result.structuredContent ?? m.result;
  if (m.type === 'error') errors.push(String(m.error));
}

// A task cancelled while it works.
const stream = client.experimental.tasks.callToolStream(cancel, CallToolResultSchema);
const first = await stream.next();
summary.cancelledTask = first.value?.task?.taskId ?? '';
const lines = createInterface({ input: process.stdin });
const said = lines[Symbol.asyncIterator]();
const await_ = async (word) => { for (let l = await said.next(); !l.done; l = await said.next()) if (l.value === word) return; };
if (process.env.WAIT_STARTED) {
  console.log('STARTED');
  await await_('CANCEL');
}
const cancelled = await client.experimental.tasks.cancelTask(summary.cancelledTask);
summary.cancelStatus = cancelled.status;
summary.afterCancel = (await client.experimental.tasks.getTask(summary.cancelledTask)).status;
await stream.return(undefined);
console.log(process.env.NO_GO ? 'CANCELLED, NO GO' : 'CANCELLED');
if (process.env.NO_GO) {
  summary.errors = errors;
  console.log(JSON.stringify(summary));
  await client.close();
  process.exit(0);
}
await await_('GO');
if (release) await client.callTool(release);
summary.errors = errors;
console.log(JSON.stringify(summary));
await client.close();
process.exit(0);
