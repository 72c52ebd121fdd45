// Package upstreamtest holds what tests of package upstream and its users
// share: a server that logs the order it reads frames in.
package upstreamtest

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"
)

// OrderServer is a Streamable HTTP server with a session that logs every
// POST in the order it read them, for a test of the order frames reach a
// server in. A tools/call whose arguments say hold gets its stream's
// headers at once and ends it without an answer when its cancel comes
// (Held tells of its arrival); any other request is answered at once.
type OrderServer struct {
	// Held is told of each held call the server reads; Cancelled of each
	// cancel (of up to 1024 unread).
	Held, Cancelled chan struct{}

	mu     sync.Mutex
	got    []orderMsg
	cancel map[string]chan struct{} // by the held call's id, as the server saw it
}

// NewOrderServer returns an OrderServer.
func NewOrderServer() *OrderServer {
	return &OrderServer{Held: make(chan struct{}, 1), Cancelled: make(chan struct{}, 1024), cancel: map[string]chan struct{}{}}
}

type orderMsg struct {
	ID     json.RawMessage `json:"id"`
	Method string          `json:"method"`
	Params struct {
		RequestID json.RawMessage `json:"requestId"`
		Arguments struct {
			Hold bool `json:"hold"`
		} `json:"arguments"`
	} `json:"params"`
}

func (s *OrderServer) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	var m orderMsg
	if r.Method != http.MethodPost || json.NewDecoder(r.Body).Decode(&m) != nil {
		w.WriteHeader(http.StatusMethodNotAllowed) // no GET stream
		return
	}
	s.mu.Lock()
	s.got = append(s.got, m)
	var held chan struct{}
	switch {
	case m.Method == "tools/call" && m.Params.Arguments.Hold:
		held = make(chan struct{})
		s.cancel[string(m.ID)] = held
	case m.Method == "notifications/cancelled":
		if c := s.cancel[string(m.Params.RequestID)]; c != nil {
			close(c)
			delete(s.cancel, string(m.Params.RequestID))
		}
	}
	s.mu.Unlock()
	if held != nil {
		s.Held <- struct{}{}
	}
	if m.Method == "notifications/cancelled" {
		s.Cancelled <- struct{}{}
	}
	w.Header().Set("Mcp-Session-Id", "s1")
	switch {
	case m.Method == "initialize":
		w.Header().Set("Content-Type", "application/json")
		io.WriteString(w, `{"jsonrpc":"2.0","id":`+string(m.ID)+`,"result":{"protocolVersion":"2025-11-25","capabilities":{"tools":{}},"serverInfo":{"name":"order","version":"1"}}}`)
	case held != nil:
		w.Header().Set("Content-Type", "text/event-stream")
		w.WriteHeader(http.StatusOK)
		w.(http.Flusher).Flush()
		select {
		case <-held:
		case <-r.Context().Done():
		case <-time.After(30 * time.Second): // bounds the test: it fails
		}
	case m.ID != nil:
		w.Header().Set("Content-Type", "application/json")
		io.WriteString(w, `{"jsonrpc":"2.0","id":`+string(m.ID)+`,"result":{}}`)
	default:
		w.WriteHeader(http.StatusAccepted)
	}
}

// Check waits for the server to have read cancels cancels (a cancel goes
// on its own, and may come after later frames' answers), then fails t
// unless the server read every cancel after the call it names, while that
// call was in flight, and never two calls in flight under one id.
func (s *OrderServer) Check(t *testing.T, cancels int) {
	t.Helper()
	timeout := time.After(10 * time.Second) // bounds the test: it fails
	for i := 0; i < cancels; i++ {
		select {
		case <-s.Cancelled:
		case <-timeout:
			t.Errorf("the server read %d cancels, want %d", i, cancels)
			cancels = i
		}
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	seen := map[string]bool{}     // calls the server read
	inFlight := map[string]bool{} // held calls not yet cancelled
	n := 0
	for i, m := range s.got {
		id := string(m.ID)
		switch m.Method {
		case "tools/call":
			if inFlight[id] {
				t.Errorf("message %d: a call under id %s, whose call is still in flight", i, id)
			}
			seen[id] = true
			if m.Params.Arguments.Hold {
				inFlight[id] = true
			}
		case "notifications/cancelled":
			rid := string(m.Params.RequestID)
			if !seen[rid] || !inFlight[rid] {
				t.Errorf("message %d: a cancel of %s before its call (or of no held call)", i, rid)
			}
			delete(inFlight, rid)
			n++
		}
	}
	if n != cancels {
		t.Errorf("the server read %d cancels, want %d", n, cancels)
	}
	if t.Failed() {
		var b strings.Builder
		for _, m := range s.got {
			fmt.Fprintf(&b, "%s %s %s\n", m.Method, m.ID, m.Params.RequestID)
		}
		t.Log("the server read:\n" + b.String())
	}
}
