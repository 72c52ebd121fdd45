package upstream

import (
	"bytes"
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
		{`{"jsonrpc":"2.0","id":3,"method":"m","params":null}`,
			`{"jsonrpc":"2.0","id":3,"method":"m","params":{"_meta":{
			"io.modelcontextprotocol/protocolVersion":"2026-07-28","io.modelcontextprotocol/clientCapabilities":{},
			"io.modelcontextprotocol/clientInfo":{"name":"old","version":"1"}}}}`},
		{`{"jsonrpc":"2.0","id":4,"method":"m","params":{ }}`,
			`{"jsonrpc":"2.0","id":4,"method":"m","params":{"_meta":{
			"io.modelcontextprotocol/protocolVersion":"2026-07-28","io.modelcontextprotocol/clientCapabilities":{},
			"io.modelcontextprotocol/clientInfo":{"name":"old","version":"1"}}}}`},
		{`{"jsonrpc":"2.0","id":5,"method":"m","params":{"a":1,"_meta":null}}`,
			`{"jsonrpc":"2.0","id":5,"method":"m","params":{"a":1,"_meta":{
			"io.modelcontextprotocol/protocolVersion":"2026-07-28","io.modelcontextprotocol/clientCapabilities":{},
			"io.modelcontextprotocol/clientInfo":{"name":"old","version":"1"}}}}`},
		{`{"jsonrpc":"2.0","id":6,"method":"m","params":{"_meta":{ }}}`,
			`{"jsonrpc":"2.0","id":6,"method":"m","params":{"_meta":{
			"io.modelcontextprotocol/protocolVersion":"2026-07-28","io.modelcontextprotocol/clientCapabilities":{},
			"io.modelcontextprotocol/clientInfo":{"name":"old","version":"1"}}}}`},
		{`{"jsonrpc":"2.0","id":7,"method":"m","params":{"_meta":{"io.modelcontextprotocol\/protocolVersion":"2025-06-18","k":"<&>"}}}`,
			`{"jsonrpc":"2.0","id":7,"method":"m","params":{"_meta":{"k":"<&>",
			"io.modelcontextprotocol/protocolVersion":"2026-07-28","io.modelcontextprotocol/clientCapabilities":{},
			"io.modelcontextprotocol/clientInfo":{"name":"old","version":"1"}}}}`},
		{`{"jsonrpc":"2.0","id":2,"method":"tools/list","params":{"_meta":{"io.modelcontextprotocol/clientCapabilities":{"x":{}},"io.modelcontextprotocol/clientInfo":{"name":"own"}}}}`,
			`{"jsonrpc":"2.0","id":2,"method":"tools/list","params":{"_meta":{
			"io.modelcontextprotocol/protocolVersion":"2026-07-28","io.modelcontextprotocol/clientCapabilities":{"x":{}},
			"io.modelcontextprotocol/clientInfo":{"name":"own"}}}}`},
	} {
		out, err := modernizeBytes([]byte(tc.in), info)
		var got, want any
		if err != nil || json.Unmarshal(out, &got) != nil || json.Unmarshal([]byte(tc.want), &want) != nil || !reflect.DeepEqual(got, want) {
			t.Errorf("modernize(%s)\n = %s (%v)\nwant %s", tc.in, out, err, tc.want)
		}
	}
	for _, in := range []string{
		`{"jsonrpc":"2.0","id":1,"method":"m","params":[1]}`,
		`{"jsonrpc":"2.0","id":1,"method":"m","params":{"_meta":[]}}`,
		`{"jsonrpc":"2.0","id":1,"method":"m","params":{"_meta":"x"}}`,
	} {
		if _, err := modernizeBytes([]byte(in), nil); err == nil {
			t.Errorf("%s: want an error (the request goes as it is)", in)
		}
	}
	for _, m := range []string{"initialize", "ping", "logging/setLevel", "resources/subscribe"} {
		if Modernizable(m) {
			t.Errorf("%s is not in 2026-07-28: it must go as it is", m)
		}
	}
}

// modernizeBytes parses a request and modernizes it.
func modernizeBytes(msg []byte, info json.RawMessage) ([]byte, error) {
	var f framing.Frame
	if err := f.Parse(msg); err != nil {
		return nil, err
	}
	return Modernize(&f.Msgs[0], info)
}

// TestModernizeKeepsTheRestAsWritten: the fields are spliced in; every
// other byte goes as the client wrote it (an escaped ampersand, a byte
// that is not UTF-8: a found fuzz case).
func TestModernizeKeepsTheRestAsWritten(t *testing.T) {
	in := "{\"id\":0,\"method\":\"&\xff\",\"params\":{\"name\":\"\\u0026<\",\"arguments\":{ \"x\" : [1, 2] }}}"
	out, err := modernizeBytes([]byte(in), nil)
	if err != nil {
		t.Fatal(err)
	}
	want := "{\"id\":0,\"method\":\"&\xff\",\"params\":{\"_meta\":{\"io.modelcontextprotocol/protocolVersion\":\"2026-07-28\",\"io.modelcontextprotocol/clientCapabilities\":{}},\"name\":\"\\u0026<\",\"arguments\":{ \"x\" : [1, 2] }}}"
	if string(out) != want {
		t.Errorf("modernize(%q)\n = %q\nwant %q", in, out, want)
	}
}

// FuzzModernize: whatever a client sends, modernize never panics; what it
// returns is a request with the same id and method, byte for byte, whose
// params._meta names 2026-07-28, and which framing parses as a request.
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
		out, err := Modernize(&in.Msgs[0], info)
		if err != nil {
			return // sent as it is
		}
		var got framing.Frame
		if err := got.Parse(out); err != nil || got.Batch || got.Msgs[0].Kind != framing.KindRequest {
			t.Fatalf("modernize(%s) = %s: not a request (%v)", msg, out, err)
		}
		g, w := &got.Msgs[0], &in.Msgs[0]
		if g.ID != w.ID || g.Method != w.Method || !bytes.Equal(g.Raw[g.IDSpan.Start:g.IDSpan.End], w.Raw[w.IDSpan.Start:w.IDSpan.End]) {
			t.Fatalf("modernize(%s) = %s: id or method changed", msg, out)
		}
		// Keys as JSON-RPC reads them, case and all (a struct's would fold
		// "pArAMs" into params).
		var top, params, meta map[string]json.RawMessage
		if json.Unmarshal(out, &top) != nil || json.Unmarshal(top["params"], &params) != nil ||
			json.Unmarshal(params["_meta"], &meta) != nil || string(meta[metaProtocolVersion]) != `"2026-07-28"` {
			t.Fatalf("modernize(%s) = %s: no protocol version in _meta", msg, out)
		}
	})
}

// TestDowngrade: a 2026-07-28 result goes back to a 2025 client without the
// "resultType": "complete" it never asked for; anything else (another
// result type, an error, what is not JSON) goes as it is.
func TestDowngrade(t *testing.T) {
	for _, tc := range []struct{ in, want string }{
		{`{"jsonrpc":"2.0","id":1,"result":{"resultType":"complete","content":[]}}`, `{"id":1,"jsonrpc":"2.0","result":{"content":[]}}`},
		{`{"jsonrpc":"2.0","id":1,"result":{"resultType":"task","task":{}}}`, `{"jsonrpc":"2.0","id":1,"result":{"resultType":"task","task":{}}}`},
		{`{"jsonrpc":"2.0","id":1,"error":{"code":-32000,"message":"resultType"}}`, `{"jsonrpc":"2.0","id":1,"error":{"code":-32000,"message":"resultType"}}`},
		{`not "resultType" json`, `not "resultType" json`},
	} {
		if got := string(Downgrade([]byte(tc.in))); got != tc.want {
			t.Errorf("Downgrade(%s)\n= %s\nwant %s", tc.in, got, tc.want)
		}
	}
}
