// Package framing reads, classifies and writes newline-delimited JSON-RPC 2.0
// frames, the wire format of MCP's stdio transport
// (https://modelcontextprotocol.io/specification/2025-11-25/basic/transports#stdio).
//
// The classifier finds only what a cancellation proxy needs (id, method,
// params.requestId, progress tokens, task markers) in a single validating pass
// over the frame, without decoding payloads into Go values, and records where
// each id sits in the frame so a caller can splice in a new one. Frames that
// need no change are forwarded as their original bytes.
//
// framing depends on the standard library only.
package framing
