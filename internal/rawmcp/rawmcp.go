// Package rawmcp is an MCP server on raw sockets that misbehaves on
// purpose, as real servers do in ordinary ways: it closes idle keep-alive
// connections (with or without saying so in Keep-Alive: timeout=), reads a
// request and closes or resets the connection, writes half an answer, an
// empty 200, garbage, an answer to another id, or one over any sane size.
// It speaks Streamable HTTP (POST /mcp) and the 2024-11-05 HTTP+SSE
// transport (GET /sse, POST /message), and records what it read, so that
// a test checks both ends: what the server received and what the client
// saw. It listens on 127.0.0.1 only. Only tests import it.
//
// A tools/call's tool name picks what the server does with it:
//
//	echo      answers it
//	close     reads it, then closes the connection (FIN)
//	reset     reads it, then resets the connection (RST)
//	half      sends the answer's headers and half its body, then closes
//	empty     answers 200 with an empty JSON body
//	garbage   answers 200 with a JSON content type and an HTML page
//	other-id  answers with another id
//	oversize  answers with a valid answer of 2 MiB
//
// Over HTTP+SSE, answers go on the event stream; close and reset apply to
// the POST, and the others answer as echo does.
package rawmcp

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http/httputil"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"
)

// Request is a request the server read whole.
type Request struct {
	Method, Path string
	Body         []byte
	RPC          string // the JSON-RPC method, if any
	Tool         string // a tools/call's tool name
}

// Options shape a Server.
type Options struct {
	// IdleClose, if positive, closes a keep-alive connection unused for
	// that long (Node and uvicorn: 5 s, gunicorn: 2 s).
	IdleClose time.Duration
	// SayKeepAlive announces IdleClose in each answer's Keep-Alive:
	// timeout= (whole seconds, at least 1).
	SayKeepAlive bool
	// Stateless: no Mcp-Session-Id.
	Stateless bool
	// CloseEach answers with Connection: close, and closes: a client keeps
	// no connection to it.
	CloseEach bool
}

// Server is a running raw server.
type Server struct {
	Addr string
	o    Options
	ln   net.Listener

	mu         sync.Mutex
	received   []Request
	conns      map[net.Conn]bool // true: an event stream, not a keep-alive connection
	idleCloses int
	quiet      []chan struct{} // closed once no keep-alive connection is open
	events     chan []byte     // the HTTP+SSE stream's, while one is open
	wg         sync.WaitGroup
}

// Start starts a server; it stops when the test ends.
func Start(t testing.TB, o Options) *Server {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	s := &Server{Addr: ln.Addr().String(), o: o, ln: ln, conns: map[net.Conn]bool{}}
	s.wg.Add(1)
	go s.accept()
	t.Cleanup(s.Close)
	return s
}

// Close stops the server and every connection it has, and waits for them.
func (s *Server) Close() {
	s.ln.Close()
	s.mu.Lock()
	for c := range s.conns {
		c.Close()
	}
	s.mu.Unlock()
	s.wg.Wait()
}

// Received returns the requests read whole so far.
func (s *Server) Received() []Request {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]Request(nil), s.received...)
}

// IdleCloses returns how many connections the server has closed for
// being idle.
func (s *Server) IdleCloses() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.idleCloses
}

// Quiet returns a channel closed once no keep-alive connection to the
// server is open (an event stream does not count): with IdleClose, once
// it has closed every connection a client left idle.
func (s *Server) Quiet() <-chan struct{} {
	s.mu.Lock()
	defer s.mu.Unlock()
	ch := make(chan struct{})
	s.quiet = append(s.quiet, ch)
	s.wakeQuietLocked()
	return ch
}

func (s *Server) wakeQuietLocked() {
	for _, stream := range s.conns {
		if !stream {
			return
		}
	}
	for _, ch := range s.quiet {
		close(ch)
	}
	s.quiet = nil
}

// Calls returns the bodies of the tools/calls of tool read so far.
func (s *Server) Calls(tool string) []string {
	var out []string
	for _, r := range s.Received() {
		if r.Tool == tool {
			out = append(out, string(r.Body))
		}
	}
	return out
}

func (s *Server) accept() {
	defer s.wg.Done()
	for {
		c, err := s.ln.Accept()
		if err != nil {
			return
		}
		s.mu.Lock()
		s.conns[c] = false
		s.mu.Unlock()
		s.wg.Add(1)
		go s.serve(c)
	}
}

// serve reads requests from c until it closes, or is closed.
func (s *Server) serve(c net.Conn) {
	defer s.wg.Done()
	defer func() {
		c.Close()
		s.mu.Lock()
		delete(s.conns, c)
		s.wakeQuietLocked()
		s.mu.Unlock()
	}()
	br := bufio.NewReader(c)
	for {
		if s.o.IdleClose > 0 {
			c.SetReadDeadline(time.Now().Add(s.o.IdleClose))
		}
		if _, err := br.Peek(1); err != nil {
			if ne, ok := err.(net.Error); ok && ne.Timeout() {
				s.mu.Lock()
				s.idleCloses++
				s.mu.Unlock()
			}
			return
		}
		c.SetReadDeadline(time.Time{})
		r, err := readRequest(br)
		if err != nil {
			io.WriteString(c, "HTTP/1.1 400 Bad Request\r\nContent-Length: 0\r\nConnection: close\r\n\r\n")
			return
		}
		if !s.answer(c, r) {
			return
		}
	}
}

// readRequest reads one HTTP/1.1 request, its body by Content-Length or
// chunked.
func readRequest(br *bufio.Reader) (Request, error) {
	var r Request
	line, err := br.ReadString('\n')
	if err != nil {
		return r, err
	}
	parts := strings.Fields(line)
	if len(parts) != 3 {
		return r, fmt.Errorf("bad request line %q", line)
	}
	r.Method, r.Path = parts[0], parts[1]
	length, chunked := 0, false
	for {
		h, err := br.ReadString('\n')
		if err != nil {
			return r, err
		}
		h = strings.TrimRight(h, "\r\n")
		if h == "" {
			break
		}
		name, value, _ := strings.Cut(h, ":")
		switch strings.ToLower(strings.TrimSpace(name)) {
		case "content-length":
			if length, err = strconv.Atoi(strings.TrimSpace(value)); err != nil {
				return r, err
			}
		case "transfer-encoding":
			chunked = strings.EqualFold(strings.TrimSpace(value), "chunked")
		}
	}
	var body io.Reader = io.LimitReader(br, int64(length))
	if chunked {
		body = httputil.NewChunkedReader(br)
	}
	if r.Body, err = io.ReadAll(body); err != nil {
		return r, err
	}
	if len(r.Body) < length {
		return r, io.ErrUnexpectedEOF
	}
	var m struct {
		Method string `json:"method"`
		Params struct {
			Name string `json:"name"`
		} `json:"params"`
	}
	if json.Unmarshal(r.Body, &m) == nil {
		r.RPC = m.Method
		if m.Method == "tools/call" {
			r.Tool = m.Params.Name
		}
	}
	return r, nil
}

// answer answers r on c, and reports whether c goes on.
func (s *Server) answer(c net.Conn, r Request) bool {
	s.mu.Lock()
	s.received = append(s.received, r)
	s.mu.Unlock()
	switch {
	case r.Method == "GET" && r.Path == "/sse":
		s.stream(c)
		return false
	case r.Method == "DELETE":
		return s.write(c, 200, "", nil)
	case r.Method != "POST" || strings.HasPrefix(r.Path, "/sse"):
		return s.write(c, 405, "", nil) // no GET stream on /mcp; no Streamable HTTP on /sse
	case len(r.Body) == 0:
		return s.write(c, 400, "text/plain", []byte("empty body")) // as gunicorn's and Node's servers refuse it
	}
	id, _ := idOf(r.Body)
	if r.Tool == "close" || r.Tool == "reset" {
		if tc, ok := c.(*net.TCPConn); ok && r.Tool == "reset" {
			tc.SetLinger(0)
		}
		return false
	}
	answer := result(id, r)
	if strings.HasPrefix(r.Path, "/message") { // HTTP+SSE: the answer goes on the stream
		s.mu.Lock()
		events := s.events
		s.mu.Unlock()
		if events != nil && id != nil {
			events <- answer
		}
		return s.write(c, 202, "", nil)
	}
	switch {
	case id == nil: // a notification or a response
		return s.write(c, 202, "", nil)
	case r.Tool == "half":
		fmt.Fprintf(c, "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n", len(answer))
		c.Write(answer[:len(answer)/2])
		return false
	case r.Tool == "empty":
		answer = nil
	case r.Tool == "garbage":
		answer = []byte("<html><body>502 Bad Gateway</body></html>")
	case r.Tool == "other-id":
		answer = result([]byte(`"other-`+strconv.Quote(string(id))[1:]), r)
	case r.Tool == "oversize":
		pad := bytes.Repeat([]byte("x"), 2<<20)
		answer = fmt.Appendf(nil, `{"jsonrpc":"2.0","id":%s,"result":{"content":[{"type":"text","text":"%s"}]}}`, id, pad)
	}
	return s.write(c, 200, "application/json", answer)
}

// result is the answer to the request id of r.
func result(id []byte, r Request) []byte {
	if r.RPC == "initialize" {
		return fmt.Appendf(nil, `{"jsonrpc":"2.0","id":%s,"result":{"protocolVersion":"2025-06-18","capabilities":{"tools":{}},"serverInfo":{"name":"rawmcp","version":"1"}}}`, id)
	}
	return fmt.Appendf(nil, `{"jsonrpc":"2.0","id":%s,"result":{"content":[{"type":"text","text":"%s"}]}}`, id, r.Tool)
}

// idOf returns a message's id, as it was written; nil if it has none.
func idOf(body []byte) ([]byte, error) {
	var m struct {
		ID json.RawMessage `json:"id"`
	}
	if err := json.Unmarshal(body, &m); err != nil || len(m.ID) == 0 || string(m.ID) == "null" {
		return nil, errors.New("no id")
	}
	return m.ID, nil
}

// write writes an answer, and reports whether the connection goes on.
func (s *Server) write(c net.Conn, status int, contentType string, body []byte) bool {
	var b bytes.Buffer
	fmt.Fprintf(&b, "HTTP/1.1 %d %s\r\n", status, statusText(status))
	if contentType != "" {
		fmt.Fprintf(&b, "Content-Type: %s\r\n", contentType)
	}
	if !s.o.Stateless {
		b.WriteString("Mcp-Session-Id: s1\r\n")
	}
	if s.o.SayKeepAlive && s.o.IdleClose > 0 {
		fmt.Fprintf(&b, "Keep-Alive: timeout=%d\r\n", max(int(s.o.IdleClose/time.Second), 1))
	}
	if s.o.CloseEach {
		b.WriteString("Connection: close\r\n")
	}
	fmt.Fprintf(&b, "Content-Length: %d\r\n\r\n", len(body))
	b.Write(body)
	_, err := c.Write(b.Bytes())
	return err == nil && !s.o.CloseEach
}

func statusText(status int) string {
	return map[int]string{200: "OK", 202: "Accepted", 400: "Bad Request", 405: "Method Not Allowed"}[status]
}

// stream serves the HTTP+SSE event stream: its endpoint, then each answer
// to a POST, until the connection or the server closes.
func (s *Server) stream(c net.Conn) {
	events := make(chan []byte, 16)
	s.mu.Lock()
	s.events = events
	s.conns[c] = true
	s.wakeQuietLocked()
	s.mu.Unlock()
	io.WriteString(c, "HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nCache-Control: no-cache\r\n\r\n"+
		"event: endpoint\ndata: /message?sessionId=1\n\n")
	gone := make(chan struct{})
	s.wg.Add(1)
	go func() { // ends with the connection: the client's close, or the server's
		defer s.wg.Done()
		io.Copy(io.Discard, c)
		close(gone)
	}()
	defer c.Close()
	for {
		select {
		case ev := <-events:
			if _, err := fmt.Fprintf(c, "event: message\ndata: %s\n\n", ev); err != nil {
				return
			}
		case <-gone:
			return
		}
	}
}
