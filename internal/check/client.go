package check

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"
	"unicode"
	"unicode/utf8"

	"github.com/mcp-cancel-proxy/mcp-cancel-proxy/framing"
)

// errClosed is what a wait returns once the server's side has closed.
var errClosed = errors.New("the server closed the connection")

// rpcError is a JSON-RPC error object.
type rpcError struct {
	Code    int    `json:"code"`
	Message string `json:"message"`
}

// msg is one message from the server, as the checker reads it.
type msg struct {
	ID     json.RawMessage `json:"id"`
	Method string          `json:"method"`
	Params json.RawMessage `json:"params"`
	Result json.RawMessage `json:"result"`
	Error  *rpcError       `json:"error"`

	at time.Time // when it was read
}

// isResponse reports whether m answers a request (it has an id, no method).
func (m *msg) isResponse() bool { return m.Method == "" && len(m.ID) > 0 }

// answers reports whether m is the response to the request with id.
func (m *msg) answers(id string) bool {
	return m.isResponse() && string(bytes.TrimSpace(m.ID)) == quote(id)
}

// progressOf returns the token of a notifications/progress, if m is one.
func (m *msg) progressOf() (string, bool) {
	if m.Method != framing.MethodProgress {
		return "", false
	}
	var p struct {
		Token json.RawMessage `json:"progressToken"`
	}
	if json.Unmarshal(m.Params, &p) != nil {
		return "", false
	}
	return string(bytes.TrimSpace(p.Token)), true
}

// isFailure reports whether a response says the call did not complete: a
// JSON-RPC error, or a tool result with isError set.
func (m *msg) isFailure() bool {
	if m.Error != nil {
		return true
	}
	var r struct {
		IsError bool `json:"isError"`
	}
	return json.Unmarshal(m.Result, &r) == nil && r.IsError
}

// describe says in a few words what a response carried.
func (m *msg) describe() string {
	switch {
	case m.Error != nil:
		return fmt.Sprintf("the error %d %q", m.Error.Code, clip(m.Error.Message))
	case m.isFailure():
		return "an error result (isError)"
	}
	return "a full result"
}

// quote is id as a JSON string.
func quote(id string) string { b, _ := json.Marshal(id); return string(b) }

// clip shortens s, a server's words, for a report line, and makes it
// Printable.
func clip(s string) string {
	if r := []rune(s); len(r) > 80 {
		s = string(r[:77]) + "..."
	}
	return Printable(s)
}

// Printable returns s, a string a server sent, with every control
// character (C0, DEL, C1: what makes a terminal's escape sequences) and
// every invalid byte written as a Go escape, so that a server cannot put
// escape sequences into a report a person reads in a terminal.
func Printable(s string) string {
	ok := true
	for _, r := range s {
		ok = ok && r != utf8.RuneError && !unicode.IsControl(r)
	}
	if ok {
		return s
	}
	var b strings.Builder
	for i, w := 0, 0; i < len(s); i += w {
		r, n := utf8.DecodeRuneInString(s[i:])
		w = n
		switch {
		case r == utf8.RuneError && n <= 1:
			fmt.Fprintf(&b, `\x%02x`, s[i])
		case unicode.IsControl(r):
			q := strconv.QuoteRune(r)
			b.WriteString(q[1 : len(q)-1])
		default:
			b.WriteRune(r)
		}
	}
	return b.String()
}

// client speaks JSON-RPC to the server over a stream of lines: the checker
// sends its requests through it and reads what the server sends. It answers
// the server's own requests (ping with an empty result, roots/list with no
// roots, anything else with -32601), so that a server that asks something
// mid-call is not left waiting.
type client struct {
	mu sync.Mutex // serialises writes
	w  io.Writer

	in   chan msg      // the server's responses and notifications; closed at the end
	quit chan struct{} // closed by stop: read hands nothing more to in
	done chan struct{} // closed when read returns
	err  error         // why read ended; read before done closes, read after
	// broken is set once a write has failed: a server that stops reading
	// has gone, though its output may not have ended yet.
	broken atomic.Bool
}

// newClient starts reading r; the reading goroutine ends when r does (its
// owner closes the connection).
func newClient(r io.Reader, w io.Writer, maxFrame int) *client {
	c := &client{w: w, in: make(chan msg, 4096), quit: make(chan struct{}), done: make(chan struct{})}
	go c.read(r, maxFrame)
	return c
}

func (c *client) read(r io.Reader, maxFrame int) {
	defer close(c.in) // after done: whoever sees in closed sees closed() true
	defer close(c.done)
	rd := framing.NewReader(r, maxFrame)
	for {
		line, err := rd.Read(nil)
		if err != nil {
			c.err = err
			return
		}
		var m msg
		if json.Unmarshal(line, &m) != nil {
			continue // not JSON-RPC: the report is about cancellation, not framing
		}
		m.at = time.Now()
		if m.Method != "" && len(m.ID) > 0 {
			c.answer(&m)
			continue
		}
		select {
		case c.in <- m:
		case <-c.quit:
			return
		}
	}
}

// closed reports whether the server's side has closed: its output ended
// or a write to it failed.
func (c *client) closed() bool {
	if c.broken.Load() {
		return true
	}
	select {
	case <-c.done:
		return true
	default:
		return false
	}
}

// stop ends the reading once closeConn has closed the connection it reads.
func (c *client) stop(closeConn func()) {
	close(c.quit)
	closeConn()
	<-c.done
}

// answer replies to a request the server sent.
func (c *client) answer(m *msg) {
	switch m.Method {
	case "ping":
		c.send(map[string]any{"jsonrpc": "2.0", "id": m.ID, "result": map[string]any{}})
	case "roots/list":
		c.send(map[string]any{"jsonrpc": "2.0", "id": m.ID, "result": map[string]any{"roots": []any{}}})
	default:
		c.send(map[string]any{"jsonrpc": "2.0", "id": m.ID,
			"error": rpcError{Code: -32601, Message: "mcp-cancel-proxy check does not offer " + m.Method}})
	}
}

// send writes one message, or several in one write (a request and its
// cancel back to back).
func (c *client) send(ms ...any) error {
	var b []byte
	for _, m := range ms {
		line, err := json.Marshal(m)
		if err != nil {
			return err
		}
		b = append(append(b, line...), '\n')
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	_, err := c.w.Write(b)
	if err != nil {
		c.broken.Store(true)
	}
	return err
}

// request is a JSON-RPC request.
func request(id, method string, params any) map[string]any {
	m := map[string]any{"jsonrpc": "2.0", "id": id, "method": method}
	if params != nil {
		m["params"] = params
	}
	return m
}

// notification is a JSON-RPC notification.
func notification(method string, params any) map[string]any {
	return map[string]any{"jsonrpc": "2.0", "method": method, "params": params}
}

// cancel is notifications/cancelled for the request id, as the proxy
// builds its own.
func cancel(id string) json.RawMessage {
	return framing.AppendCancelled(nil, framing.StringID(id), "mcp-cancel-proxy check")
}

// until reads messages, handing each to seen, until stop returns true for
// one (returned, true, not handed to seen), d has passed (false), or the server has closed
// (errClosed).
func (c *client) until(d time.Duration, seen func(*msg), stop func(*msg) bool) (msg, bool, error) {
	t := time.NewTimer(d)
	defer t.Stop()
	for {
		select {
		case m, ok := <-c.in:
			if !ok {
				return msg{}, false, errClosed
			}
			if stop != nil && stop(&m) {
				return m, true, nil
			}
			if seen != nil {
				seen(&m)
			}
		case <-t.C:
			return msg{}, false, nil
		}
	}
}

// call sends a request and waits up to d for its answer, handing every
// other message to seen.
func (c *client) call(id, method string, params any, d time.Duration, seen func(*msg)) (msg, error) {
	if err := c.send(request(id, method, params)); err != nil {
		return msg{}, err
	}
	m, ok, err := c.until(d, seen, func(m *msg) bool { return m.answers(id) })
	switch {
	case err != nil:
		return msg{}, err
	case !ok:
		return msg{}, fmt.Errorf("no answer to %s within %s", method, d)
	}
	return m, nil
}
