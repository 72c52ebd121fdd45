package httpx

import (
	"encoding/json"
	"reflect"
	"testing"

	"github.com/mcp-cancel-proxy/mcp-cancel-proxy/framing"
)

// TestModernize: a 2025 request gets the 2026-07-28 fields in its
// params._meta, beside what was there (a progress token is kept); fields
// the client set itself are kept; a request without params gets them.
func TestModernize(t *testing.T) {
	info := json.RawMessage(`{"name":"old","version":"1"}`)
	for _, tc := range []struct{ in, want string }{
		{`{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"t","_meta":{"progressToken":"p"}}}`,
			`{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"t","_meta":{"progressToken":"p",
			"io.modelcontextprotocol/protocolVersion":"2026-07-28","io.modelcontextprotocol/clientCapabilities":{},
			"io.modelcontextprotocol/clientInfo":{"name":"old","version":"1"}}}}`},
		{`{"jsonrpc":"2.0","id":"x","method":"tools/list"}`,
			`{"jsonrpc":"2.0","id":"x","method":"tools/list","params":{"_meta":{
			"io.modelcontextprotocol/protocolVersion":"2026-07-28","io.modelcontextprotocol/clientCapabilities":{},
			"io.modelcontextprotocol/clientInfo":{"name":"old","version":"1"}}}}`},
		{`{"jsonrpc":"2.0","id":2,"method":"tools/list","params":{"_meta":{"io.modelcontextprotocol/clientCapabilities":{"x":{}},"io.modelcontextprotocol/clientInfo":{"name":"own"}}}}`,
			`{"jsonrpc":"2.0","id":2,"method":"tools/list","params":{"_meta":{
			"io.modelcontextprotocol/protocolVersion":"2026-07-28","io.modelcontextprotocol/clientCapabilities":{"x":{}},
			"io.modelcontextprotocol/clientInfo":{"name":"own"}}}}`},
	} {
		out, err := modernize([]byte(tc.in), info)
		var got, want any
		if err != nil || json.Unmarshal(out, &got) != nil || json.Unmarshal([]byte(tc.want), &want) != nil || !reflect.DeepEqual(got, want) {
			t.Errorf("modernize(%s)\n = %s (%v)\nwant %s", tc.in, out, err, tc.want)
		}
	}
	if _, err := modernize([]byte(`{"jsonrpc":"2.0","id":1,"method":"m","params":[1]}`), nil); err == nil {
		t.Error("positional params: want an error (the request goes as it is)")
	}
	for _, m := range []string{"initialize", "ping", "logging/setLevel", "resources/subscribe"} {
		if modernizable(m) {
			t.Errorf("%s is not in 2026-07-28: it must go as it is", m)
		}
	}
}

// FuzzModernize: whatever a client sends, modernize never panics; what it
// returns is a request with the same id and method, whose params._meta
// names 2026-07-28, and which framing parses as a request.
func FuzzModernize(f *testing.F) {
	for _, s := range []string{
		`{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"t","_meta":{"progressToken":"p"}}}`,
		`{"jsonrpc":"2.0","id":"x","method":"tools/list"}`,
		`{"jsonrpc":"2.0","id":2,"method":"m","params":null}`,
		`{"jsonrpc":"2.0","id":3,"method":"m","params":{"_meta":null}}`,
		`{"jsonrpc":"2.0","id":4,"method":"m","params":{"_meta":[]}}`,
	} {
		f.Add([]byte(s), []byte(`{"name":"c","version":"1"}`))
	}
	f.Fuzz(func(t *testing.T, msg, info []byte) {
		var in framing.Frame
		if in.Parse(msg) != nil || in.Batch || in.Msgs[0].Kind != framing.KindRequest {
			return // the backend modernizes only requests that parse
		}
		if !json.Valid(info) {
			info = nil
		}
		out, err := modernize(msg, info)
		if err != nil {
			return // sent as it is
		}
		var got framing.Frame
		if err := got.Parse(out); err != nil || got.Batch || got.Msgs[0].Kind != framing.KindRequest {
			t.Fatalf("modernize(%s) = %s: not a request (%v)", msg, out, err)
		}
		if got.Msgs[0].ID != in.Msgs[0].ID || got.Msgs[0].Method != in.Msgs[0].Method {
			t.Fatalf("modernize(%s) = %s: id or method changed", msg, out)
		}
		var p struct {
			Params struct {
				Meta map[string]json.RawMessage `json:"_meta"`
			} `json:"params"`
		}
		if json.Unmarshal(out, &p) != nil || string(p.Params.Meta[metaProtocolVersion]) != `"2026-07-28"` {
			t.Fatalf("modernize(%s) = %s: no protocol version in _meta", msg, out)
		}
	})
}
