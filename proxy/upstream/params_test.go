package upstream_test

import (
	"fmt"
	"io"
	"net/http"
	"strings"
	"sync"
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

// TestToolsReadBeforeTheCall: a 2026-07-28 tools/call of a tool the bridge
// has read nothing of gets tools/list read first, by the bridge itself
// (its client sees nothing of it), so that its annotated argument goes as
// its header; and when the server refuses a call's headers (400,
// HeaderMismatch: its tools changed), the bridge reads tools/list again
// and sends the call once more, with the headers the new list asks for;
// after notifications/tools/list_changed, it reads the list again before
// the next call.
func TestToolsReadBeforeTheCall(t *testing.T) {
	var mu sync.Mutex
	header := "Region" // the server's annotation, which the test changes
	lists, calls := 0, 0
	_, out, lines := dialScripted(t, func(w http.ResponseWriter, r *http.Request) {
		id, method, _ := rpcOf(r)
		mu.Lock()
		defer mu.Unlock()
		w.Header().Set("Content-Type", "application/json")
		switch method {
		case "initialize":
			initialized(w, id)
		case "tools/list":
			lists++
			io.WriteString(w, `{"jsonrpc":"2.0","id":`+string(id)+`,"result":{"tools":[{"name":"sql","inputSchema":{"type":"object","properties":{`+
				`"region":{"type":"string","x-mcp-header":"`+header+`"}}}}]}}`)
		case "tools/call":
			calls++
			if r.Header.Get("Mcp-Param-"+header) == "changed" { // the list changed: said on the call's stream
				w.Header().Set("Content-Type", "text/event-stream")
				io.WriteString(w, "data: {\"jsonrpc\":\"2.0\",\"method\":\"notifications/tools/list_changed\"}\n\n"+
					"data: {\"jsonrpc\":\"2.0\",\"id\":"+string(id)+",\"result\":{\"content\":[]}}\n\n")
				return
			}
			if r.Header.Get("Mcp-Param-"+header) != "eu" {
				w.WriteHeader(http.StatusBadRequest)
				io.WriteString(w, `{"jsonrpc":"2.0","id":`+string(id)+`,"error":{"code":-32020,"message":"Header mismatch"}}`)
				return
			}
			io.WriteString(w, `{"jsonrpc":"2.0","id":`+string(id)+`,"result":{"content":[]}}`)
		default:
			w.WriteHeader(http.StatusAccepted)
		}
	})
	ask := asker(t, out, lines)
	const call = `{"jsonrpc":"2.0","id":%d,"method":"tools/call","params":{"name":"sql","arguments":{"region":"eu"},` +
		`"_meta":{"io.modelcontextprotocol/protocolVersion":"2026-07-28"}}}`
	if got := ask(fmt.Sprintf(call, 2)); !strings.Contains(got, `"id":2,"result"`) {
		t.Errorf("the first call: %s", got)
	}
	mu.Lock()
	if lists != 1 || calls != 1 {
		t.Errorf("before the first call: %d tools/list, %d calls; want 1 and 1", lists, calls)
	}
	header = "Zone"
	mu.Unlock()
	if got := ask(fmt.Sprintf(call, 3)); !strings.Contains(got, `"id":3,"result"`) {
		t.Errorf("the call after the tools changed: %s", got)
	}
	mu.Lock()
	if lists != 2 || calls != 3 {
		t.Errorf("after the tools changed: %d tools/list, %d calls; want 2 and 3 (refused once, sent again)", lists, calls)
	}
	mu.Unlock()
	if got := ask(strings.Replace(fmt.Sprintf(call, 4), `"eu"`, `"changed"`, 1)); !strings.Contains(got, "list_changed") {
		t.Errorf("the call whose stream says the list changed: %s first", got)
	}
	if got, err := lines.ReadString('\n'); err != nil || !strings.Contains(got, `"id":4`) {
		t.Fatalf("its answer: %s %v", got, err)
	}
	ask(fmt.Sprintf(call, 5))
	mu.Lock()
	defer mu.Unlock()
	if lists != 3 {
		t.Errorf("after notifications/tools/list_changed: %d tools/list, want 3 (read again before the next call)", lists)
	}
}
