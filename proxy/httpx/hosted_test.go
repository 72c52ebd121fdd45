package httpx_test

import (
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"go.uber.org/zap"

	"github.com/mcp-cancel-proxy/mcp-cancel-proxy/policy"
	"github.com/mcp-cancel-proxy/mcp-cancel-proxy/proxy/httpx"
)

// TestHostedTaskFailsWithItsPOST: a hosted task's call whose POST fails
// (the upstream answers it with an HTTP error, not JSON-RPC) fails the
// task with the proxy's own error, and the client's tasks/result says so,
// instead of a task that works on until its ttl.
func TestHostedTaskFailsWithItsPOST(t *testing.T) {
	t.Parallel()
	watchdog(t, 30*time.Second)
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		switch {
		case strings.Contains(string(body), `"initialize"`):
			w.Header().Set("Mcp-Session-Id", "s")
			w.Header().Set("Content-Type", "application/json")
			io.WriteString(w, `{"jsonrpc":"2.0","id":0,"result":{"protocolVersion":"2025-11-25","capabilities":{"tools":{}},"serverInfo":{"name":"up","version":"1"}}}`)
		case strings.Contains(string(body), `"tools/call"`):
			http.Error(w, "overloaded", http.StatusServiceUnavailable)
		default:
			w.WriteHeader(http.StatusAccepted)
		}
	}))
	t.Cleanup(up.Close)
	p := policy.Defaults()
	p.Rules = []policy.Rule{{Tool: "report", Task: "host"}}
	e, err := policy.New(policy.Options{Policy: p, Audit: policy.Audit{Path: "off"}, Logger: zap.NewNop()})
	if err != nil {
		t.Fatal(err)
	}
	defer e.Shutdown()
	c := &rawClient{t: t, url: serveSidecar(t, &httpx.Sidecar{Upstream: up.URL, Governor: e.Governor})}
	c.initialize()
	created := lastJSON(t, c.post(`{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"report","task":{}}}`))
	var task struct {
		Result struct {
			Task struct{ TaskID string } `json:"task"`
		} `json:"result"`
	}
	if json.Unmarshal(created, &task) != nil || task.Result.Task.TaskID == "" {
		t.Fatalf("no task: %s", created)
	}
	res := lastJSON(t, c.post(`{"jsonrpc":"2.0","id":2,"method":"tasks/result","params":{"taskId":"`+task.Result.Task.TaskID+`"}}`))
	if !strings.Contains(string(res), `"error"`) || !strings.Contains(string(res), "HTTP 503") {
		t.Errorf("tasks/result: %s, want the proxy's error naming HTTP 503", res)
	}
	got := lastJSON(t, c.post(`{"jsonrpc":"2.0","id":3,"method":"tasks/get","params":{"taskId":"`+task.Result.Task.TaskID+`"}}`))
	if !strings.Contains(string(got), `"status":"failed"`) {
		t.Errorf("tasks/get: %s, want failed", got)
	}
}

// lastJSON is the last JSON-RPC message of an answer, JSON or an event
// stream.
func lastJSON(t *testing.T, resp *http.Response) []byte {
	t.Helper()
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	text := string(b)
	if i := strings.LastIndex(text, "data: "); i >= 0 {
		text = text[i+len("data: "):]
	}
	return []byte(strings.TrimSpace(text))
}
