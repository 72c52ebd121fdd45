package upstream_test

import (
	"bufio"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"sync"
	"testing"
	"time"

	"go.uber.org/zap/zaptest"

	"github.com/mcp-cancel-proxy/mcp-cancel-proxy/proxy/stdio"
	"github.com/mcp-cancel-proxy/mcp-cancel-proxy/proxy/upstream"
)

// orderServer is a Streamable HTTP server with a session that logs every
// POST in the order it read them. A tools/call whose arguments say hold
// gets its stream's headers at once and ends it without an answer when
// its cancel comes; any other is answered at once.
type orderServer struct {
	mu     sync.Mutex
	got    []orderMsg
	cancel map[string]chan struct{} // by the held call's id, as the server saw it
	held   chan struct{}            // told of each held call read
}

type orderMsg struct {
	ID        json.RawMessage `json:"id"`
	Method    string          `json:"method"`
	RequestID json.RawMessage `json:"-"`
	Params    struct {
		RequestID json.RawMessage `json:"requestId"`
		Arguments struct {
			Hold bool `json:"hold"`
		} `json:"arguments"`
	} `json:"params"`
}

func (s *orderServer) ServeHTTP(w http.ResponseWriter, r *http.Request) {
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
		s.held <- struct{}{}
	case m.Method == "notifications/cancelled":
		if c := s.cancel[string(m.Params.RequestID)]; c != nil {
			close(c)
			delete(s.cancel, string(m.Params.RequestID))
		}
	}
	s.mu.Unlock()
	w.Header().Set("Mcp-Session-Id", "s1")
	switch {
	case m.Method == "initialize":
		initialized(w, m.ID)
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

// TestOrderKeptThroughTheBridge: a client of the bridge (a session of
// lines over the Streamable HTTP Conn) that sends a call, then, once the
// server has it, its cancel and
// a new call reusing the id in one burst, round after round: the server
// reads every cancel after the request it names and before the request
// that reuses its id (which the core renames), never two calls in flight
// under one id; the client gets the answer of every call it did not
// cancel, and nothing of the ones it did.
func TestOrderKeptThroughTheBridge(t *testing.T) {
	srv := &orderServer{cancel: map[string]chan struct{}{}, held: make(chan struct{}, 1)}
	hs := httptest.NewServer(srv)
	defer hs.Close()
	u, _ := url.Parse(hs.URL + "/mcp")
	log := zaptest.NewLogger(t)
	back, err := (&upstream.StreamableUpstream{Endpoint: upstream.Endpoint{URL: u, Client: upstream.NewClient(0, 0)}}).Dial(log)
	if err != nil {
		t.Fatal(err)
	}
	cIn, toBridge := io.Pipe()
	fromBridge, cOut := io.Pipe()
	sess := stdio.NewSession(stdio.Options{Logger: log})
	done := make(chan error, 1)
	go func() { done <- sess.Run(stdio.Conn{In: cIn, Out: cOut}, back.Conn()) }()
	defer func() {
		toBridge.Close()
		back.Stop()
		<-back.Exited()
		<-done
	}()
	lines := bufio.NewReader(fromBridge)
	next := func() map[string]any {
		t.Helper()
		line, err := lines.ReadString('\n')
		if err != nil {
			t.Fatalf("the bridge's output ended: %v", err)
		}
		var m map[string]any
		json.Unmarshal([]byte(line), &m)
		return m
	}
	io.WriteString(toBridge, `{"jsonrpc":"2.0","id":"init","method":"initialize","params":{"protocolVersion":"2025-11-25","capabilities":{},"clientInfo":{"name":"t","version":"1"}}}`+"\n")
	next()
	io.WriteString(toBridge, `{"jsonrpc":"2.0","method":"notifications/initialized"}`+"\n")
	const rounds = 40
	for r := range rounds {
		id := r % 2
		fmt.Fprintf(toBridge, `{"jsonrpc":"2.0","id":%d,"method":"tools/call","params":{"name":"t","arguments":{"hold":true}}}`+"\n", id)
		<-srv.held // the server has it: its cancel is one to carry, not a withdrawal
		fmt.Fprintf(toBridge, `{"jsonrpc":"2.0","method":"notifications/cancelled","params":{"requestId":%d}}`+"\n"+
			`{"jsonrpc":"2.0","id":%d,"method":"tools/call","params":{"name":"t","arguments":{}}}`+"\n", id, id)
		if m := next(); m["id"] != float64(id) || m["result"] == nil {
			t.Fatalf("round %d: the client got %v, want the answer of the call that reused id %d", r, m, id)
		}
	}
	io.WriteString(toBridge, `{"jsonrpc":"2.0","id":"last","method":"ping"}`+"\n")
	if m := next(); m["id"] != "last" {
		t.Fatalf("the client got %v before the ping's answer, want nothing more", m)
	}
	srv.mu.Lock()
	defer srv.mu.Unlock()
	seen := map[string]bool{}     // calls the server read
	inFlight := map[string]bool{} // held calls not yet cancelled
	cancels := 0
	for i, m := range srv.got {
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
			cancels++
		}
	}
	if cancels != rounds {
		t.Errorf("the server read %d cancels, want %d", cancels, rounds)
	}
	if t.Failed() {
		var b strings.Builder
		for _, m := range srv.got {
			fmt.Fprintf(&b, "%s %s %s\n", m.Method, m.ID, m.Params.RequestID)
		}
		t.Log(b.String())
	}
}
