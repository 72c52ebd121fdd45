package upstream_test

import (
	"io"
	"net/http"
	"strings"
	"testing"
)

// TestToolParamsMirrored: as the client of a 2026-07-28 server, the bridge
// leaves out of tools/list the tools whose x-mcp-header annotations are
// invalid, and sends each annotated argument of a tools/call as its
// Mcp-Param-* header, encoded where it must be; an earlier revision's
// tools/list is passed on whole. Before, neither was done.
func TestToolParamsMirrored(t *testing.T) {
	got := make(chan http.Header, 1)
	const tools = `{"tools":[{"name":"sql","inputSchema":{"type":"object","properties":{"region":{"type":"string","x-mcp-header":"Region"},` +
		`"n":{"type":"integer","x-mcp-header":"N"},"q":{"type":"string"}}}},` +
		`{"name":"bad","inputSchema":{"type":"object","properties":{"x":{"type":"number","x-mcp-header":"X"}}}}]}`
	_, out, lines := dialScripted(t, func(w http.ResponseWriter, r *http.Request) {
		id, method, _ := rpcOf(r)
		w.Header().Set("Content-Type", "application/json")
		switch method {
		case "initialize":
			initialized(w, id)
		case "tools/list":
			io.WriteString(w, `{"jsonrpc":"2.0","id":`+string(id)+`,"result":`+tools+`}`)
		case "tools/call":
			got <- r.Header.Clone()
			io.WriteString(w, `{"jsonrpc":"2.0","id":`+string(id)+`,"result":{"content":[]}}`)
		default:
			w.WriteHeader(http.StatusAccepted)
		}
	})
	ask := asker(t, out, lines)
	const modern = `"_meta":{"io.modelcontextprotocol/protocolVersion":"2026-07-28"}`
	if list := ask(`{"jsonrpc":"2.0","id":2,"method":"tools/list","params":{}}`); !strings.Contains(list, `"bad"`) {
		t.Errorf("a 2025 tools/list lost a tool: %s", list)
	}
	if list := ask(`{"jsonrpc":"2.0","id":3,"method":"tools/list","params":{` + modern + `}}`); strings.Contains(list, `"bad"`) || !strings.Contains(list, `"sql"`) {
		t.Errorf("2026-07-28 tools/list: %s, want sql without bad", list)
	}
	ask(`{"jsonrpc":"2.0","id":4,"method":"tools/call","params":{"name":"sql","arguments":{"region":"Zürich","n":7,"q":"x"},` + modern + `}}`)
	h := <-got
	for name, want := range map[string]string{"Mcp-Param-Region": "=?base64?WsO8cmljaA==?=", "Mcp-Param-N": "7", "Mcp-Param-Q": "", "Mcp-Name": "sql"} {
		if v := h.Get(name); v != want {
			t.Errorf("%s: %q, want %q", name, v, want)
		}
	}
}
