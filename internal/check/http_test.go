package check

import (
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/mcp-cancel-proxy/mcp-cancel-proxy/framing"
)

// TestCancelPOSTLowerCaseSession: a server that names its session in a
// lower-case header (server-everything, FastMCP: mcp-session-id) and
// refuses requests without it (400) gets the session back on the cancel
// POST, and the line passes. Before, the header was read case-sensitively:
// the cancel went without the session, got 400, and the line failed (11
// of 25 report cards).
func TestCancelPOSTLowerCaseSession(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		switch {
		case strings.Contains(string(body), `"initialize"`):
			w.Header()["mcp-session-id"] = []string{"lower"} // as written, not canonicalised
			w.Header().Set("Content-Type", "application/json")
			io.WriteString(w, `{"jsonrpc":"2.0","id":"check-http-init","result":{"protocolVersion":"2025-11-25","capabilities":{},"serverInfo":{"name":"s","version":"1"}}}`)
		case r.Header.Get("Mcp-Session-Id") != "lower":
			http.Error(w, "Bad Request: no valid session ID", http.StatusBadRequest)
		default:
			w.WriteHeader(http.StatusAccepted)
		}
	}))
	defer srv.Close()
	l := CancelPOST(srv.URL+"/mcp", nil, framing.Revision("2025-11-25"), 10*time.Second)
	if l.Verdict != Pass {
		t.Errorf("%+v, want a pass", l)
	}
}
