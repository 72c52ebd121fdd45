// Package upstream is what the HTTP front and the bridge reach a server
// with, the client side of MCP's transports, message by message (Conn):
// it dials a session of a Streamable HTTP server (StreamableUpstream) or
// of a 2024-11-05 HTTP+SSE one (SSEUpstream), or finds out which the
// server speaks first (Dial, ProbeTransport), or starts a stdio server
// (Command, whose lines are a PipeConn); a Dialer returns each as a Conn,
// and a session of lines (package stdio) reaches any Conn through its
// Lines, so that one session decides every frame of it. It imports
// nothing of the sessions that use it. Every request to a Streamable HTTP
// server, the HTTP front's relay's included, is made by an Endpoint. It
// also holds what the relay shares with those clients: the fasthttp
// client every upstream request goes through (NewClient, with its headers, the HTTP proxy of the
// environment and extra CAs), the connection that hands the relay its reads
// (Link), the MCP headers that mirror a body, and the translation of a 2025
// client's requests into 2026-07-28 ones for a stateless server
// (Modernize).
package upstream
