package httpx_test

import (
	"bytes"
	"io"
	"net/http"
	"runtime"
	"strings"
	"testing"
	"time"

	"go.uber.org/zap/zaptest"

	"github.com/mcp-cancel-proxy/mcp-cancel-proxy/proxy/httpx"
)

// TestIdleStreamsLeaveTheServerLoop: a session's GET stream, on every
// front (the relay in front of a Streamable HTTP server, a session of
// lines with a stdio server or an HTTP+SSE server behind it, an old
// client's /sse stream), is written off fasthttp's connection loop
// (stream.Detached): once it is open no fasthttp worker is writing it,
// its head says the connection closes at its end, and the sidecar's
// Cleanup ends it cleanly (the chunked body's end, not a cut).
func TestIdleStreamsLeaveTheServerLoop(t *testing.T) { // not parallel: writingWorkers counts every test's
	watchdog(t, time.Minute)
	type front struct {
		sc   *httpx.Sidecar
		open func() *http.Request
	}
	get := func(url, session string) func() *http.Request {
		return func() *http.Request {
			req, _ := http.NewRequest("GET", url, nil)
			req.Header.Set("Accept", "text/event-stream")
			if session != "" {
				req.Header.Set("Mcp-Session-Id", session)
			}
			return req
		}
	}
	fronts := map[string]func(t *testing.T) front{
		"Streamable HTTP upstream": func(t *testing.T) front {
			up := newUpstream(t, nil)
			sc := &httpx.Sidecar{Upstream: up.url}
			c := &rawClient{t: t, url: serveSidecar(t, sc)}
			c.initialize()
			return front{sc, get(c.url, c.session)}
		},
		"stdio server": func(t *testing.T) front {
			var sc *httpx.Sidecar
			c := &childClient{t: t, url: childSidecar(t, &httpx.Children{}, func(s *httpx.Sidecar) { sc = s })}
			c.initialize()
			return front{sc, get(c.url, c.session)}
		},
		"HTTP+SSE upstream": func(t *testing.T) front {
			var sc *httpx.Sidecar
			_, url := autoSidecar(t, true, nil, zaptest.NewLogger(t), func(s *httpx.Sidecar) { sc = s })
			c := &childClient{t: t, url: url}
			c.initialize()
			return front{sc, get(c.url, c.session)}
		},
		"HTTP+SSE client": func(t *testing.T) front {
			var sc *httpx.Sidecar
			_, url := autoSidecar(t, false, nil, zaptest.NewLogger(t), func(s *httpx.Sidecar) { sc = s })
			return front{sc, get(strings.TrimSuffix(url, "/mcp")+"/sse", "")}
		},
	}
	for name, start := range fronts {
		t.Run(name, func(t *testing.T) {
			f := start(t)
			resp, err := testClient.Do(f.open()) // keep-alive: Close is the head's
			if err != nil {
				t.Fatal(err)
			}
			defer resp.Body.Close()
			if resp.StatusCode != 200 || !resp.Close || len(resp.TransferEncoding) == 0 {
				t.Fatalf("GET: %d, Connection: close %v, Transfer-Encoding %v; want 200, a chunked body and the connection closed at its end",
					resp.StatusCode, resp.Close, resp.TransferEncoding)
			}
			if n := writingWorkers(); n > 0 {
				t.Fatalf("%d fasthttp workers are writing a response body while only the GET stream is open", n)
			}
			ended := make(chan error, 1)
			go func() {
				_, err := io.Copy(io.Discard, resp.Body)
				ended <- err
			}()
			f.sc.Cleanup("the test stops the sidecar")
			select {
			case err := <-ended:
				if err != nil {
					t.Fatalf("the stream ended with %v, want its clean end", err)
				}
			case <-time.After(10 * time.Second): // a bound, not a synchronisation
				t.Fatal("Cleanup did not end the GET stream")
			}
		})
	}
}

// writingWorkers counts the goroutines of fasthttp's connection loop that
// are writing a streamed response body.
func writingWorkers() int {
	buf := make([]byte, 1<<20)
	buf = buf[:runtime.Stack(buf, true)]
	n := 0
	for g := range bytes.SplitSeq(buf, []byte("\n\n")) {
		if bytes.Contains(g, []byte("fasthttp.writeBodyChunked")) && bytes.Contains(g, []byte("fasthttp.(*Server).serveConn")) {
			n++
		}
	}
	return n
}
