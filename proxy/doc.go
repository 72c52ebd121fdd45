// Package proxy is the transport-independent core of mcp-cancel-proxy: a
// ledger of in-flight requests per direction, and a Tracker that decides,
// for every JSON-RPC message either peer sends, whether it is forwarded,
// rewritten, suppressed or answered by the proxy, making cancellation work
// (https://modelcontextprotocol.io/specification/2025-11-25/basic/utilities/cancellation).
//
// For every forwarded request the ledger records the call until its response
// passes. A notifications/cancelled from the request's issuer is accepted
// under the ledger's lock at the moment it is read: it is forwarded to the
// receiver, and from then on the issuer sees neither the response nor any
// progress for that request. Exactly one of "response forwarded" and "cancel
// accepted" wins for each request. Cancels that name unknown or finished
// requests, requests of the other direction, or initialize, are dropped, as
// the specification asks ("fire and forget").
//
// proxy imports framing and zap; it does no I/O and knows nothing of
// processes, pipes, HTTP or policy. The transports (proxy/stdio,
// proxy/httpx) move the bytes and ask the Tracker.
package proxy
