package httpx

import (
	"encoding/json"
	"reflect"
	"testing"
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
