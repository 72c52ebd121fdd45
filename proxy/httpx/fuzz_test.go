package httpx_test

import (
	"bytes"
	"strings"
	"sync"
	"testing"
	"unicode/utf8"

	"github.com/mcp-cancel-proxy/mcp-cancel-proxy/framing"
	"github.com/mcp-cancel-proxy/mcp-cancel-proxy/proxy/httpx"
)

// fuzzSidecar is one stdio-child sidecar per fuzzing process, with a
// session and a sessionless client.
var fuzzSidecar struct {
	once                 sync.Once
	session, sessionless *childClient
	stop                 func() // set once it runs; TestMain calls it
}

// FuzzChildPost feeds POST bodies and headers through the sidecar into a
// real stdio child (the echo child) and checks what the child received:
// at most one line per POST, with no line break in it, holding no more
// messages than the body did, each of them whole JSON-RPC. Whatever the
// client sends, it can never make the child read a message it did not send
// as one.
func FuzzChildPost(f *testing.F) {
	for _, seed := range []string{
		injection,
		`{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"x","_meta":{"progressToken":"a"}}}`,
		`[{"jsonrpc":"2.0","id":1,"method":"ping"},{"jsonrpc":"2.0","method":"notifications/cancelled","params":{"requestId":1}}]`,
		"{\"jsonrpc\":\"2.0\",\r\"id\":2,\n\"method\":\"ping\"}\r\n\r\n",
		`{"jsonrpc":"2.0","method":"notifications/cancelled","params":{"requestId":"h1"}}`,
		`{"jsonrpc":"2.0","id":"h1","result":{}}`,
		"\n\n",
	} {
		f.Add([]byte(seed), false, "2025-06-18")
		f.Add([]byte(seed), true, "2026-07-28")
	}
	f.Fuzz(func(t *testing.T, body []byte, sessionless bool, version string) {
		if bytes.Contains(body, []byte("marker")) || bytes.Contains(body, []byte("hang")) || bytes.Contains(body, []byte("initialize")) ||
			!validHeader(version) {
			return // the echo child's own words, or a header no client can send
		}
		fuzzSidecar.once.Do(func() { // for the fuzzing process's life: TestMain stops it
			url, stop, err := serveChildSidecar(&httpx.Children{})
			if err != nil {
				t.Fatal(err)
			}
			fuzzSidecar.stop = stop
			fuzzSidecar.session = &childClient{t: t, url: url}
			fuzzSidecar.session.initialize()
			fuzzSidecar.sessionless = &childClient{t: t, url: url}
		})
		c := fuzzSidecar.session
		if sessionless {
			c = fuzzSidecar.sessionless
		}
		c.t = t
		c.post(string(body), "MCP-Protocol-Version", version)
		lines := c.received()
		if len(lines) > 1 {
			t.Fatalf("one POST %q reached the child as %d lines: %q", body, len(lines), lines)
		}
		var sent, got framing.Frame
		for _, line := range lines {
			if strings.ContainsAny(line, "\r\n") {
				t.Fatalf("a line with a line break: %q", line)
			}
			if err := got.Parse([]byte(line)); err != nil {
				t.Fatalf("the child received %q, which does not parse: %v", line, err)
			}
			if err := sent.Parse(body); err != nil || len(got.Msgs) > len(sent.Msgs) {
				t.Fatalf("the child received %q for %q", line, body)
			}
		}
	})
}

// validHeader reports whether s can be sent as a header value.
func validHeader(s string) bool {
	for i := 0; i < len(s); i++ {
		if c := s[i]; c < ' ' && c != '\t' || c == 0x7f {
			return false
		}
	}
	return utf8.ValidString(s) && strings.TrimSpace(s) == s
}
