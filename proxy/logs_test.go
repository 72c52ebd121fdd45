package proxy

import (
	"testing"

	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
	"go.uber.org/zap/zaptest/observer"
)

// TestDecisionLogsNameWhatHappened: an accepted cancel's line names the
// tool and who cancelled (the client, or the proxy for a deadline); the
// server's progress and late answer are logged as going server to client.
// Every line, and those of the peers' loggers, names the tracker's Scope.
func TestDecisionLogsNameWhatHappened(t *testing.T) {
	core, logs := observer.New(zapcore.DebugLevel)
	tr := NewTracker(TrackerOptions{Logger: zap.New(core), Scope: zap.String("session", "s7")})
	decide(t, tr, Client, `{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"report","_meta":{"progressToken":"p"}}}`)
	decide(t, tr, Client, `{"jsonrpc":"2.0","method":"notifications/cancelled","params":{"requestId":1,"reason":"stop"}}`)
	decide(t, tr, Server, `{"jsonrpc":"2.0","method":"notifications/progress","params":{"progressToken":"p","progress":1}}`)
	decide(t, tr, Server, `{"jsonrpc":"2.0","id":1,"result":{}}`)
	o := decide(t, tr, Client, `{"jsonrpc":"2.0","id":2,"method":"tools/call","params":{"name":"slow"}}`)
	tr.CancelCall(o.Request, SourceDeadline, "deadline")
	tr.Logger(Server).Info("a peer's line")

	want := []map[string]any{
		{"msg": "cancel accepted", "from": "client", "source": "client", "tool": "report", "direction": "client_to_server"},
		{"msg": "suppressed", "from": "server", "direction": "server_to_client", "kind": "notification"},
		{"msg": "suppressed", "from": "server", "direction": "server_to_client", "kind": "response"},
		{"msg": "cancel accepted", "from": "proxy", "source": "deadline", "tool": "slow", "reason": "deadline"},
		{"msg": "a peer's line", "from": "server"},
	}
	var got []observer.LoggedEntry
	for _, e := range logs.All() {
		if e.ContextMap()["session"] != "s7" {
			t.Errorf("line %q names no session: %v", e.Message, e.ContextMap())
		}
		if e.Message == "cancel accepted" || e.Message == "suppressed" || e.Message == "a peer's line" {
			got = append(got, e)
		}
	}
	if len(got) != len(want) {
		t.Fatalf("%d decision lines, want %d: %v", len(got), len(want), got)
	}
	for i, w := range want {
		fields := got[i].ContextMap()
		for k, v := range w {
			if k == "msg" {
				if got[i].Message != v {
					t.Errorf("line %d: %q, want %q", i, got[i].Message, v)
				}
			} else if fields[k] != v {
				t.Errorf("line %d (%s): %s = %v, want %v", i, got[i].Message, k, fields[k], v)
			}
		}
	}
}
