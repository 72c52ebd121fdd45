// Package httpx is mcp-cancel-proxy's sidecar for MCP's Streamable HTTP
// transport (https://modelcontextprotocol.io/specification/2025-11-25/basic/transports#streamable-http),
// served with fasthttp in front of an upstream MCP server over HTTP.
//
// Every POST, GET and DELETE is relayed to the upstream, responses and
// server-sent events as they stream. Each JSON-RPC message on the way is
// put to the session's proxy.Tracker, so that cancellation works as on
// stdio: a cancel POSTed by the client (protocol 2025-03-26 to 2025-11-25)
// is answered 202 at once, forwarded upstream once the request it names
// may be cancelled there (written, then its headers or
// upstream.TakenInWait: upstream.Posting), and from then on the client
// sees neither the response nor progress for that request; the response
// stream of the cancelled request is ended, without a response, once the
// server has had a short grace to send the cancels of its own nested
// requests on it. A client that closes a response stream has the upstream
// stream closed too, which in protocol 2026-07-28 is the cancel itself and
// in the earlier revisions is, rightly, not one.
//
// One tracker serves each Mcp-Session-Id, so a cancel can only ever touch
// requests of its own session. Requests without a session (stateless
// servers, protocol 2026-07-28) are tracked per request.
package httpx
