// Package proxy is the transport-independent core of mcp-cancel-proxy: a
// ledger of in-flight requests per direction, and a Session that relays
// newline-delimited JSON-RPC between an MCP client and an MCP server while
// making cancellation work (https://modelcontextprotocol.io/specification/2025-11-25/basic/utilities/cancellation).
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
// proxy imports framing and zap; it knows nothing of processes, HTTP or policy.
package proxy
