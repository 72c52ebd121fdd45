// Package upstreamtest holds what tests of package upstream and its users
// share: a server that logs the order it reads frames in.
package upstreamtest

import (
	"bufio"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"
)

// OrderServer is an MCP server with one session that logs every message
// in the order it read them, for a test of the order frames reach a server
// in, over any transport: Streamable HTTP (ServeHTTP), HTTP+SSE (SSE),
// stdio (ServeLines). A tools/call whose arguments say hold is never
// answered (over Streamable HTTP its stream's headers come at once, and
// it ends at the call's cancel); Held tells of its arrival. Any other
// request is answered at once.
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

// take logs m, and returns the channel closed at its cancel if m is a
// held call.
func (s *OrderServer) take(m orderMsg) (held chan struct{}) {
	s.mu.Lock()
	s.got = append(s.got, m)
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
	return held
}

// answerOf returns m's answer: none for a notification or a held call.
func answerOf(m orderMsg, held bool) []byte {
	switch {
	case m.Method == "initialize":
		return []byte(`{"jsonrpc":"2.0","id":` + string(m.ID) + `,"result":{"protocolVersion":"2025-11-25","capabilities":{"tools":{}},"serverInfo":{"name":"order","version":"1"}}}`)
	case held || m.ID == nil:
		return nil
	}
	return []byte(`{"jsonrpc":"2.0","id":` + string(m.ID) + `,"result":{}}`)
}

// ServeHTTP serves the Streamable HTTP transport: a held call's stream
// ends, unanswered, at its cancel.
func (s *OrderServer) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	var m orderMsg
	if r.Method != http.MethodPost || json.NewDecoder(r.Body).Decode(&m) != nil {
		w.WriteHeader(http.StatusMethodNotAllowed) // no GET stream
		return
	}
	held := s.take(m)
	w.Header().Set("Mcp-Session-Id", "s1")
	switch answer := answerOf(m, held != nil); {
	case held != nil:
		w.Header().Set("Content-Type", "text/event-stream")
		w.WriteHeader(http.StatusOK)
		w.(http.Flusher).Flush()
		select {
		case <-held:
		case <-r.Context().Done():
		case <-time.After(30 * time.Second): // bounds the test: it fails
		}
	case answer != nil:
		w.Header().Set("Content-Type", "application/json")
		w.Write(answer)
	default:
		w.WriteHeader(http.StatusAccepted)
	}
}

// SSE returns the server as an HTTP+SSE (2024-11-05) server: GET opens a
// session's event stream, whose endpoint event names where its messages
// are POSTed; each is taken with 202, and its answer goes on the stream (a
// held call gets none). One session at a time.
func (s *OrderServer) SSE() http.Handler {
	var mu sync.Mutex
	var events chan []byte // the open session's
	mux := http.NewServeMux()
	mux.HandleFunc("GET /sse", func(w http.ResponseWriter, r *http.Request) {
		ch := make(chan []byte, 1024)
		mu.Lock()
		events = ch
		mu.Unlock()
		ServeEvents(w, r, "/message?sessionId=s1", ch, nil)
	})
	mux.HandleFunc("POST /message", func(w http.ResponseWriter, r *http.Request) {
		var m orderMsg
		if json.NewDecoder(r.Body).Decode(&m) != nil {
			w.WriteHeader(http.StatusBadRequest)
			return
		}
		held := s.take(m)
		w.WriteHeader(http.StatusAccepted)
		if answer := answerOf(m, held != nil); answer != nil {
			mu.Lock()
			events <- answer
			mu.Unlock()
		}
	})
	return mux
}

// ServeEvents serves an HTTP+SSE session's event stream on w: the
// endpoint event naming endpoint, then each of msgs as a message event,
// until r's client leaves or until is closed (nil: never).
func ServeEvents(w http.ResponseWriter, r *http.Request, endpoint string, msgs <-chan []byte, until <-chan struct{}) {
	w.Header().Set("Content-Type", "text/event-stream")
	fmt.Fprintf(w, "event: endpoint\ndata: %s\n\n", endpoint)
	w.(http.Flusher).Flush()
	for {
		select {
		case m := <-msgs:
			fmt.Fprintf(w, "event: message\ndata: %s\n\n", m)
			w.(http.Flusher).Flush()
		case <-until:
			return
		case <-r.Context().Done():
			return
		}
	}
}

// ServeLines serves the stdio transport on in and out until in ends: each
// line is a message, each answer a line (a held call gets none).
func (s *OrderServer) ServeLines(in io.Reader, out io.Writer) {
	sc := bufio.NewScanner(in)
	for sc.Scan() {
		var m orderMsg
		if json.Unmarshal(sc.Bytes(), &m) != nil {
			continue
		}
		held := s.take(m)
		if answer := answerOf(m, held != nil); answer != nil {
			out.Write(append(answer, '\n'))
		}
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

// OrderClient is the client of an order test, on any front of the proxy.
type OrderClient interface {
	// Send sends msgs, in order, in one burst where the transport can (a
	// write of several lines); it does not wait for their answers.
	Send(t *testing.T, msgs ...string)
	// Next returns the next message the client got.
	Next(t *testing.T) map[string]any
}

// Run drives c through the server's order test: an initialize, then,
// round after round, a held call and, once the server has it, its cancel
// and a new call reusing its id in one burst. The client must get the
// answer of every call it did not cancel, and nothing of the ones it did;
// the server must read every cancel after the call it names and before
// the call that reuses its id (Check).
func (s *OrderServer) Run(t *testing.T, c OrderClient, rounds int) {
	t.Helper()
	c.Send(t, `{"jsonrpc":"2.0","id":"init","method":"initialize","params":{"protocolVersion":"2025-11-25","capabilities":{},"clientInfo":{"name":"t","version":"1"}}}`)
	if m := c.Next(t); m["id"] != "init" {
		t.Fatalf("initialize: the client got %v", m)
	}
	c.Send(t, `{"jsonrpc":"2.0","method":"notifications/initialized"}`)
	for r := range rounds {
		id := r % 2
		c.Send(t, fmt.Sprintf(`{"jsonrpc":"2.0","id":%d,"method":"tools/call","params":{"name":"t","arguments":{"hold":true}}}`, id))
		select {
		case <-s.Held: // the server has it: its cancel is one to carry, not a withdrawal
		case <-time.After(10 * time.Second): // bounds the test: it fails
			t.Fatalf("round %d: the server never got the held call", r)
		}
		c.Send(t, fmt.Sprintf(`{"jsonrpc":"2.0","method":"notifications/cancelled","params":{"requestId":%d}}`, id),
			fmt.Sprintf(`{"jsonrpc":"2.0","id":%d,"method":"tools/call","params":{"name":"t","arguments":{}}}`, id))
		if m := c.Next(t); m["id"] != float64(id) || m["result"] == nil {
			t.Fatalf("round %d: the client got %v, want the answer of the call that reused id %d", r, m, id)
		}
	}
	c.Send(t, `{"jsonrpc":"2.0","id":"last","method":"ping"}`)
	if m := c.Next(t); m["id"] != "last" {
		t.Fatalf("the client got %v before the ping's answer, want nothing more", m)
	}
	s.Check(t, rounds)
}

// LineClient is an OrderClient that writes lines to W and reads lines
// from R: a client of the wrapper or the bridge.
type LineClient struct {
	W io.Writer
	R *bufio.Reader
}

// Send implements OrderClient: msgs go in one write.
func (c LineClient) Send(t *testing.T, msgs ...string) {
	if _, err := io.WriteString(c.W, strings.Join(msgs, "\n")+"\n"); err != nil {
		t.Fatalf("the proxy's input: %v", err)
	}
}

// Next implements OrderClient.
func (c LineClient) Next(t *testing.T) map[string]any {
	t.Helper()
	line, err := c.R.ReadString('\n')
	if err != nil {
		t.Fatalf("the proxy's output ended: %v", err)
	}
	var m map[string]any
	if err := json.Unmarshal([]byte(line), &m); err != nil {
		t.Fatalf("the proxy wrote %q: %v", line, err)
	}
	return m
}
