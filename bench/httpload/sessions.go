package main

import (
	"bytes"
	"fmt"
	"io"
	"net/http"
	"strings"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/mcp-cancel-proxy/mcp-cancel-proxy/proxy/httpx"
	"github.com/mcp-cancel-proxy/mcp-cancel-proxy/proxy/upstream"
)

// Sessions (-sessions): clients that open a session each (initialize, then
// calls under Mcp-Session-Id), through the sidecar to a go-sdk upstream
// with sessions over Streamable HTTP, and to the same server over the
// 2024-11-05 HTTP+SSE transport (each client session an upstream event
// stream, every call POSTed, every answer back on that stream).
func runSessions(n, rounds int) error {
	s := echoServer()
	streamable, streamableURL, err := listen(mcp.NewStreamableHTTPHandler(func(*http.Request) *mcp.Server { return s }, nil))
	if err != nil {
		return err
	}
	defer streamable.Close()
	sse, sseURL, err := listen(mcp.NewSSEHandler(func(*http.Request) *mcp.Server { return s }, nil))
	if err != nil {
		return err
	}
	defer sse.Close()
	viaStreamable, stop1, err := serveSidecar(&httpx.Sidecar{Upstream: streamableURL})
	if err != nil {
		return err
	}
	defer stop1()
	up, err := upstream.NewSSEUpstream(sseURL, 0, 0)
	if err != nil {
		return err
	}
	children := &httpx.Children{Dial: up}
	viaSSE, stop2, err := serveSidecar(&httpx.Sidecar{Upstream: sseURL, UpstreamTransport: httpx.TransportSSE, Children: children})
	if err != nil {
		return err
	}
	defer stop2()
	targets := []target{{"direct", streamableURL}, {"sidecar", viaStreamable}, {"sidecar-sse-up", viaSSE}}
	fmt.Printf("%-14s %5s %10s %10s %10s %12s %7s\n", "target", "conc", "req/s", "p50 µs", "p99 µs", "vs direct", "errors")
	for _, conc := range []int{1, 16} {
		runs := make([][]result, len(targets))
		for range rounds {
			for i, t := range targets {
				runs[i] = append(runs[i], driveWith(t.url, conc, n, func(c *http.Client) (http.Header, error) {
					return openSession(c, t.url)
				}))
			}
		}
		for i, t := range targets {
			r := median(runs[i], runs[0])
			fmt.Printf("%-14s %5d %10.0f %10.0f %10.0f %11.2fx %7d\n", t.name, conc, r.rps,
				float64(r.p50.Microseconds()), float64(r.p99.Microseconds()), r.ratio, r.errors)
		}
	}
	return nil
}

// openSession initializes a session at url and returns the headers its
// calls carry.
func openSession(c *http.Client, url string) (http.Header, error) {
	post := func(body string, hdr http.Header) (*http.Response, error) {
		req, _ := http.NewRequest("POST", url, strings.NewReader(body))
		for k, v := range hdr {
			req.Header[k] = v
		}
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set("Accept", "application/json, text/event-stream")
		return c.Do(req)
	}
	resp, err := post(`{"jsonrpc":"2.0","id":0,"method":"initialize","params":{"protocolVersion":"2025-06-18","capabilities":{},"clientInfo":{"name":"load","version":"1"}}}`, nil)
	if err != nil {
		return nil, err
	}
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	id := resp.Header.Get("Mcp-Session-Id")
	if resp.StatusCode != 200 || id == "" || !bytes.Contains(b, []byte("protocolVersion")) {
		return nil, fmt.Errorf("initialize: %d %.200s", resp.StatusCode, b)
	}
	hdr := http.Header{"Mcp-Session-Id": {id}, "Mcp-Protocol-Version": {"2025-06-18"}}
	if resp, err = post(`{"jsonrpc":"2.0","method":"notifications/initialized"}`, hdr); err != nil {
		return nil, err
	}
	io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	return hdr, nil
}
