// An MCP server protected by OAuth, and its authorization server, on one
// loopback port (PORT), for the bridge's sign-in tests: the TypeScript
// SDK's authorization server (mcpAuthRouter: metadata, dynamic client
// registration, authorization with PKCE, token and refresh) and its bearer
// middleware in front of a stateless Streamable HTTP MCP server with an
// "echo" tool (/mcp), and of the same server over the 2024-11-05 HTTP+SSE
// transport (GET /sse, POST /message), a resource of its own. Its provider is the SDK's demo one (authorization is granted
// at once: the user consents), with refresh tokens added. /admin/* (the
// test's own) says what it did and expires or revokes every token:
//   GET  /admin/stats   {authorizations, registrations, refreshes, calls and messages (of echo), tokens: [every token issued]}
//   POST /admin/expire  every access token expires (refresh tokens stay good)
//   POST /admin/revoke  every access and refresh token is revoked
import { randomUUID } from 'node:crypto';
import express from 'express';
import { mcpAuthRouter } from '@modelcontextprotocol/sdk/server/auth/router.js';
import { requireBearerAuth } from '@modelcontextprotocol/sdk/server/auth/middleware/bearerAuth.js';
import { DemoInMemoryAuthProvider } from '@modelcontextprotocol/sdk/examples/server/demoInMemoryOAuthProvider.js';
import { InvalidGrantError, InvalidTokenError } from '@modelcontextprotocol/sdk/server/auth/errors.js';
import { McpServer } from '@modelcontextprotocol/sdk/server/mcp.js';
import { StreamableHTTPServerTransport } from '@modelcontextprotocol/sdk/server/streamableHttp.js';
import { SSEServerTransport } from '@modelcontextprotocol/sdk/server/sse.js';
import { z } from 'zod';

const port = Number(process.env.PORT);
const origin = `http://127.0.0.1:${port}`;
const stats = { authorizations: 0, registrations: 0, refreshes: 0, calls: 0, messages: [], tokens: [] };

class Provider extends DemoInMemoryAuthProvider {
  constructor() {
    super();
    this.refreshTokens = new Map();
    const register = this.clientsStore.registerClient.bind(this.clientsStore);
    this.clientsStore.registerClient = async (client) => {
      stats.registrations++;
      return register(client);
    };
  }
  async authorize(client, params, res) {
    stats.authorizations++;
    return super.authorize(client, params, res);
  }
  async exchangeAuthorizationCode(client, code, verifier, redirectUri, resource) {
    const tokens = await super.exchangeAuthorizationCode(client, code, verifier, redirectUri, resource);
    const refresh = randomUUID();
    this.refreshTokens.set(refresh, { clientId: client.client_id, scopes: tokens.scope ? tokens.scope.split(' ') : [],
      resource: this.tokens.get(tokens.access_token).resource });
    stats.tokens.push(tokens.access_token, refresh);
    return { ...tokens, refresh_token: refresh };
  }
  // A token unknown or expired is the client's to renew: 401 (the demo's
  // plain Error would make the bearer middleware answer 500).
  async verifyAccessToken(token) {
    try {
      return await super.verifyAccessToken(token);
    } catch (e) {
      throw new InvalidTokenError(e.message);
    }
  }
  async exchangeRefreshToken(client, refresh) {
    const grant = this.refreshTokens.get(refresh);
    if (!grant || grant.clientId !== client.client_id) {
      throw new InvalidGrantError('invalid refresh token');
    }
    stats.refreshes++;
    const token = randomUUID();
    this.tokens.set(token, { token, clientId: client.client_id, scopes: grant.scopes, expiresAt: Date.now() + 3600000,
      resource: grant.resource, type: 'access' });
    stats.tokens.push(token);
    return { access_token: token, token_type: 'bearer', expires_in: 3600, refresh_token: refresh };
  }
}

const provider = new Provider();
const app = express();
app.use(express.json());
app.use(mcpAuthRouter({ provider, issuerUrl: new URL(origin), resourceServerUrl: new URL(`${origin}/mcp`), scopesSupported: ['mcp:tools'] }));
app.get('/admin/stats', (req, res) => res.json(stats));
app.post('/admin/expire', (req, res) => {
  for (const t of provider.tokens.values()) t.expiresAt = 1;
  res.json({ ok: true });
});
app.post('/admin/revoke', (req, res) => {
  provider.tokens.clear();
  provider.refreshTokens.clear();
  res.json({ ok: true });
});
const bearer = requireBearerAuth({ verifier: provider, resourceMetadataUrl: `${origin}/.well-known/oauth-protected-resource/mcp` });
function echoServer() {
  const server = new McpServer({ name: 'oauth-protected', version: '1.0.0' });
  server.tool('echo', { message: z.string() }, async ({ message }) => {
    stats.calls++;
    stats.messages.push(message);
    return { content: [{ type: 'text', text: message }] };
  });
  return server;
}
app.all('/mcp', bearer, async (req, res) => {
  const server = echoServer();
  const transport = new StreamableHTTPServerTransport({ sessionIdGenerator: undefined });
  res.on('close', () => { transport.close(); server.close(); });
  await server.connect(transport);
  await transport.handleRequest(req, res, req.body);
});
app.get('/.well-known/oauth-protected-resource/sse', (req, res) =>
  res.json({ resource: `${origin}/sse`, authorization_servers: [origin], scopes_supported: ['mcp:tools'] }));
const sseBearer = requireBearerAuth({ verifier: provider, resourceMetadataUrl: `${origin}/.well-known/oauth-protected-resource/sse` });
const sessions = new Map();
app.get('/sse', sseBearer, async (req, res) => {
  const transport = new SSEServerTransport('/message', res);
  sessions.set(transport.sessionId, transport);
  res.on('close', () => sessions.delete(transport.sessionId));
  await echoServer().connect(transport);
});
app.post('/message', sseBearer, async (req, res) => {
  const transport = sessions.get(req.query.sessionId);
  if (!transport) return res.status(404).send('no such session');
  await transport.handlePostMessage(req, res, req.body);
});
app.listen(port, '127.0.0.1', () => console.error(`oauth-server: listening on ${origin}`));
