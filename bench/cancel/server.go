//go:build linux

package main

import (
	"bufio"
	"bytes"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"strconv"
	"sync"
	"time"
)

// The servers: one program, three transports (a stdio server, a
// Streamable HTTP server that speaks 2025-11-25 with sessions and
// 2026-07-28 without, and an HTTP+SSE server of 2024-11-05), written on
// the wire, with no SDK between the bytes and the clock. Each tells the
// driver, over a datagram socket, the moment it read a cancel (or, on
// 2026-07-28, saw the call's stream closed) and a plain notification.
//
// They are hostile the ordinary way: a call ("hold") answers with a
// progress at once and its result after the milliseconds it was asked to
// hold (the driver asks half of them to hold long: -long), and a cancel
// does not stop it: the
// server answers the call at once, after a last progress, both marked
// late, as servers that ignore cancels do. Every message it writes
// carries the moment it wrote it (_meta "bench/sent", Unix nanoseconds)
// and whether it came after the server read the call's cancel
// ("bench/late"), so the driver can tell a raced answer from one the
// proxy should have kept back.

// stamper reports to the driver what the server read, and when.
type stamper struct {
	mu   sync.Mutex
	conn net.Conn
}

func dialStamper(path string) (*stamper, error) {
	if path == "" {
		return &stamper{}, nil
	}
	c, err := net.Dial("unixgram", path)
	if err != nil {
		return nil, err
	}
	return &stamper{conn: c}, nil
}

// stamp reports kind ('C': a cancel, 'N': a plain notification) of id,
// read now.
func (s *stamper) stamp(kind byte, id int64) {
	t := time.Now().UnixNano()
	if s.conn == nil {
		return
	}
	var b [48]byte
	msg := strconv.AppendInt(append(b[:0], kind, ' '), id, 10)
	msg = strconv.AppendInt(append(msg, ' '), t, 10)
	s.mu.Lock()
	s.conn.Write(msg)
	s.mu.Unlock()
}

// held is a call the server works on.
type held struct {
	id    int64
	token json.RawMessage
	out   func([]byte)
	timer *time.Timer
	done  bool
}

// holder is a server's calls and its answers to everything else.
type holder struct {
	st    *stamper
	mu    sync.Mutex
	calls map[int64]*held
}

func newHolder(st *stamper) *holder { return &holder{st: st, calls: map[int64]*held{}} }

// inbound is what a server reads of a message.
type inbound struct {
	ID     json.RawMessage `json:"id"`
	Method string          `json:"method"`
	Params struct {
		ProtocolVersion string          `json:"protocolVersion"`
		RequestID       json.RawMessage `json:"requestId"`
		Seq             int64           `json:"seq"`
		Arguments       struct {
			Hold float64 `json:"hold"`
		} `json:"arguments"`
		Meta struct {
			ProgressToken json.RawMessage `json:"progressToken"`
		} `json:"_meta"`
	} `json:"params"`
}

// handle takes one message; out writes a message of the call it starts.
// It returns the answer to write now, if any.
func (h *holder) handle(msg []byte, out func([]byte)) []byte {
	var m inbound
	if err := json.Unmarshal(msg, &m); err != nil {
		return nil
	}
	switch m.Method {
	case "notifications/cancelled":
		id, _ := strconv.ParseInt(string(m.Params.RequestID), 10, 64)
		h.st.stamp('C', id)
		h.cancelled(id)
		return nil
	case "notifications/bench":
		h.st.stamp('N', m.Params.Seq)
		return nil
	case "tools/call":
		id, _ := strconv.ParseInt(string(m.ID), 10, 64)
		h.start(id, m.Params.Meta.ProgressToken, m.Params.Arguments.Hold, out)
		return nil
	case "":
		return nil // an answer, or nothing
	}
	if len(m.ID) == 0 {
		return nil // another notification
	}
	return answerOf(m)
}

// answerOf answers the requests other than a call.
func answerOf(m inbound) []byte {
	var result string
	switch m.Method {
	case "initialize":
		v := m.Params.ProtocolVersion
		if v == "" {
			v = "2025-11-25"
		}
		result = `{"protocolVersion":` + strconv.Quote(v) + `,"capabilities":{"tools":{}},"serverInfo":{"name":"cancel-bench","version":"1"}}`
	case "server/discover":
		result = `{"supportedVersions":["2026-07-28","2025-11-25"],"capabilities":{"tools":{}},"serverInfo":{"name":"cancel-bench","version":"1"}}`
	case "tools/list":
		result = `{"tools":[{"name":"hold","description":"Answers after hold milliseconds; ignores cancels.","inputSchema":{"type":"object","properties":{"hold":{"type":"number"}}}}]}`
	case "ping":
		result = `{}`
	default:
		return []byte(`{"jsonrpc":"2.0","id":` + string(m.ID) + `,"error":{"code":-32601,"message":"method not found"}}`)
	}
	return []byte(`{"jsonrpc":"2.0","id":` + string(m.ID) + `,"result":` + result + `}`)
}

// start begins a call: a progress now, the result after hold ms.
func (h *holder) start(id int64, token json.RawMessage, hold float64, out func([]byte)) {
	c := &held{id: id, token: token, out: out}
	hold = max(hold, 0)
	h.mu.Lock()
	h.calls[id] = c
	c.timer = time.AfterFunc(time.Duration(hold*float64(time.Millisecond)), func() { h.finish(c, false) })
	h.mu.Unlock()
	if len(token) > 0 {
		out(progressOf(token, 1, false))
	}
}

// cancelled answers a held call at once, late: a server that ignores the
// cancel.
func (h *holder) cancelled(id int64) {
	h.mu.Lock()
	c := h.calls[id]
	h.mu.Unlock()
	if c != nil {
		h.finish(c, true)
	}
}

// dropped forgets a call whose stream is gone (2026-07-28: the cancel).
func (h *holder) dropped(id int64) {
	h.mu.Lock()
	if c := h.calls[id]; c != nil {
		c.done = true
		c.timer.Stop()
		delete(h.calls, id)
	}
	h.mu.Unlock()
}

func (h *holder) finish(c *held, late bool) {
	h.mu.Lock()
	if c.done {
		h.mu.Unlock()
		return
	}
	c.done = true
	c.timer.Stop()
	delete(h.calls, c.id)
	h.mu.Unlock()
	if late && len(c.token) > 0 {
		c.out(progressOf(c.token, 2, true))
	}
	c.out(resultOf(c.id, late))
}

func progressOf(token json.RawMessage, n int, late bool) []byte {
	return fmt.Appendf(nil, `{"jsonrpc":"2.0","method":"notifications/progress","params":{"progressToken":%s,"progress":%d,"message":"working","_meta":{"bench/sent":%d,"bench/late":%t}}}`,
		token, n, time.Now().UnixNano(), late)
}

func resultOf(id int64, late bool) []byte {
	return fmt.Appendf(nil, `{"jsonrpc":"2.0","id":%d,"result":{"content":[{"type":"text","text":"done"}],"_meta":{"bench/sent":%d,"bench/late":%t}}}`,
		id, time.Now().UnixNano(), late)
}

// serveStdio is the stdio server.
func serveStdio(st *stamper) error {
	h := newHolder(st)
	w := bufio.NewWriterSize(os.Stdout, 64<<10)
	var mu sync.Mutex
	out := func(b []byte) {
		mu.Lock()
		w.Write(b)
		w.WriteByte('\n')
		w.Flush()
		mu.Unlock()
	}
	r := bufio.NewReaderSize(os.Stdin, 64<<10)
	for {
		line, err := r.ReadBytes('\n')
		if len(line) > 1 {
			if answer := h.handle(line, out); answer != nil {
				out(answer)
			}
		}
		if err == io.EOF {
			return nil
		} else if err != nil {
			return err
		}
	}
}

// serveHTTP serves Streamable HTTP at /mcp and HTTP+SSE at /sse (its
// messages POSTed to /message) on addr.
func serveHTTP(st *stamper, addr string) error {
	h := newHolder(st)
	legacy := &legacyServer{h: h, sessions: map[string]chan []byte{}}
	mux := http.NewServeMux()
	mux.HandleFunc("/mcp", h.streamable)
	mux.HandleFunc("/sse", legacy.stream)
	mux.HandleFunc("/message", legacy.post)
	srv := &http.Server{Addr: addr, Handler: mux}
	return srv.ListenAndServe()
}

// streamable is the Streamable HTTP endpoint: a call's messages go on its
// POST's event stream; a 2026-07-28 call whose stream closes is cancelled.
func (h *holder) streamable(w http.ResponseWriter, r *http.Request) {
	switch r.Method {
	case "DELETE":
		return
	case "POST":
	default:
		w.WriteHeader(http.StatusMethodNotAllowed)
		return
	}
	body, err := io.ReadAll(r.Body)
	if err != nil {
		return
	}
	var m inbound
	if json.Unmarshal(body, &m) != nil {
		w.WriteHeader(http.StatusBadRequest)
		return
	}
	if m.Method != "tools/call" {
		answer := h.handle(body, nil)
		if answer == nil {
			w.WriteHeader(http.StatusAccepted)
			return
		}
		if m.Method == "initialize" {
			w.Header().Set("Mcp-Session-Id", newID())
		}
		w.Header().Set("Content-Type", "application/json")
		w.Write(answer)
		return
	}
	msgs := make(chan []byte, 4)
	h.handle(body, func(b []byte) { msgs <- b })
	id, _ := strconv.ParseInt(string(m.ID), 10, 64)
	w.Header().Set("Content-Type", "text/event-stream")
	w.WriteHeader(http.StatusOK)
	fl := w.(http.Flusher)
	fl.Flush()
	for {
		select {
		case b := <-msgs:
			writeEvent(w, b)
			if !isProgress(b) { // the result ends the stream
				return
			}
		case <-r.Context().Done():
			if r.Header.Get("MCP-Protocol-Version") == "2026-07-28" {
				h.st.stamp('C', id)
				h.dropped(id)
			}
			return
		}
	}
}

// writeEvent writes one message as an event, at once.
func writeEvent(w http.ResponseWriter, msg []byte) {
	fmt.Fprintf(w, "event: message\ndata: %s\n\n", msg)
	w.(http.Flusher).Flush()
}

// isProgress tells the server's own progress from its result.
func isProgress(b []byte) bool {
	return bytes.HasPrefix(b, []byte(`{"jsonrpc":"2.0","method"`))
}

// legacyServer is the HTTP+SSE transport of 2024-11-05: one event stream
// per session, the client's messages POSTed to the endpoint it names.
type legacyServer struct {
	h        *holder
	mu       sync.Mutex
	sessions map[string]chan []byte
}

func (l *legacyServer) stream(w http.ResponseWriter, r *http.Request) {
	if r.Method != "GET" {
		w.WriteHeader(http.StatusMethodNotAllowed)
		return
	}
	id := newID()
	msgs := make(chan []byte, 1024)
	l.mu.Lock()
	l.sessions[id] = msgs
	l.mu.Unlock()
	defer func() {
		l.mu.Lock()
		delete(l.sessions, id)
		l.mu.Unlock()
	}()
	w.Header().Set("Content-Type", "text/event-stream")
	fl := w.(http.Flusher)
	fmt.Fprintf(w, "event: endpoint\ndata: /message?sessionId=%s\n\n", id)
	fl.Flush()
	for {
		select {
		case b := <-msgs:
			writeEvent(w, b)
		case <-r.Context().Done():
			return
		}
	}
}

func (l *legacyServer) post(w http.ResponseWriter, r *http.Request) {
	l.mu.Lock()
	msgs := l.sessions[r.URL.Query().Get("sessionId")]
	l.mu.Unlock()
	if msgs == nil {
		w.WriteHeader(http.StatusNotFound)
		return
	}
	body, err := io.ReadAll(r.Body)
	if err != nil {
		return
	}
	w.WriteHeader(http.StatusAccepted)
	out := func(b []byte) {
		select {
		case msgs <- b:
		case <-r.Context().Done():
		}
	}
	call := func(b []byte) { // a call's message; none once its stream is gone
		select {
		case msgs <- b:
		default:
		}
	}
	if answer := l.h.handle(body, call); answer != nil {
		out(answer)
	}
}

func newID() string {
	var b [8]byte
	rand.Read(b[:])
	return hex.EncodeToString(b[:])
}
