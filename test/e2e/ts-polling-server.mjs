// A TypeScript SDK server that has its client poll (protocol 2025-11-25):
// with an event store, its tool "poll" ends the request's stream before the
// answer (closeSSEStream), and the answer comes to a client that resumes
// the stream (a GET with Last-Event-ID), which it logs on stderr.
//
// env: PORT (listens on 127.0.0.1:PORT/mcp)
import { createServer } from 'node:http';
import { randomUUID } from 'node:crypto';
import { McpServer } from '@modelcontextprotocol/sdk/server/mcp.js';
import { StreamableHTTPServerTransport } from '@modelcontextprotocol/sdk/server/streamableHttp.js';
import { InMemoryEventStore } from '@modelcontextprotocol/sdk/examples/shared/inMemoryEventStore.js';

const transports = new Map();

function newServer() {
  const server = new McpServer({ name: 'ts-polling', version: '1.0.0' });
  server.registerTool('poll', { description: 'Ends its stream, then answers.' }, async (extra) => {
    if (!extra.closeSSEStream) {
      return { content: [{ type: 'text', text: 'no polling: the client is older than 2025-11-25' }], isError: true };
    }
    extra.closeSSEStream();
    console.error('ts-polling: the request stream is closed');
    await new Promise((resolve) => setTimeout(resolve, 100));
    return { content: [{ type: 'text', text: 'polled' }] };
  });
  return server;
}

const http = createServer(async (req, res) => {
  if (req.method === 'GET' && req.headers['last-event-id']) {
    console.error('ts-polling: resumed after ' + req.headers['last-event-id']);
  }
  const id = req.headers['mcp-session-id'];
  let transport = id && transports.get(id);
  if (!transport) {
    transport = new StreamableHTTPServerTransport({
      sessionIdGenerator: () => randomUUID(),
      eventStore: new InMemoryEventStore(),
      retryInterval: 10,
      onsessioninitialized: (sid) => transports.set(sid, transport),
    });
    await newServer().connect(transport);
  }
  await transport.handleRequest(req, res);
});
http.listen(Number(process.env.PORT), '127.0.0.1', () => console.error('ts-polling: listening'));
