package strict

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"
	"time"
)

// Lines is a Conn over a stdio client's pipes to the proxy: one message per
// line each way.
type Lines struct {
	w    io.Writer
	msgs chan []byte
}

// NewLines reads r's lines from now on; w takes the client's.
func NewLines(w io.Writer, r io.Reader) *Lines {
	l := &Lines{w: w, msgs: make(chan []byte, 256)}
	go func() { // ends with r
		defer close(l.msgs)
		sc := bufio.NewScanner(r)
		sc.Buffer(nil, 1<<20)
		for sc.Scan() {
			l.msgs <- append([]byte(nil), sc.Bytes()...)
		}
	}()
	return l
}

// Send writes one message.
func (l *Lines) Send(frame string) error {
	_, err := io.WriteString(l.w, frame+"\n")
	return err
}

// Recv returns the next message.
func (l *Lines) Recv() (map[string]any, error) {
	return next(l.msgs)
}

// next decodes the next message of msgs, waiting at most Wait for it.
func next[T string | []byte](msgs <-chan T) (map[string]any, error) {
	select {
	case msg, ok := <-msgs:
		if !ok {
			return nil, errors.New("the proxy ended the connection")
		}
		var m map[string]any
		if err := json.Unmarshal([]byte(msg), &m); err != nil {
			return nil, stray("invalid JSON %q: %v", msg, err)
		}
		return m, nil
	case <-time.After(Wait):
		return nil, fmt.Errorf("no message from the proxy in %s", Wait)
	}
}

// Legacy is an old client's Conn (HTTP+SSE, 2024-11-05): it POSTs each
// message to the endpoint its event stream named, and reads every message
// for it from that one stream.
type Legacy struct {
	endpoint string
	msgs     <-chan string
	stop     context.CancelFunc
}

// OpenLegacy opens an old client's event stream at base+"/sse".
func OpenLegacy(base string) (*Legacy, error) {
	ctx, stop := context.WithCancel(context.Background())
	req, _ := http.NewRequestWithContext(ctx, "GET", base+"/sse", nil)
	req.Header.Set("Accept", "text/event-stream")
	resp, err := client.Do(req)
	if err == nil && resp.StatusCode != http.StatusOK {
		resp.Body.Close()
		err = fmt.Errorf("GET /sse: %s", resp.Status)
	}
	if err != nil {
		stop()
		return nil, err
	}
	msgs := Messages(resp)
	endpoint, ok := <-msgs // the endpoint event comes first
	if !ok {
		stop()
		return nil, errors.New("the event stream ended before its endpoint")
	}
	return &Legacy{endpoint: base + endpoint, msgs: msgs, stop: stop}, nil
}

// Send POSTs one message.
func (c *Legacy) Send(frame string) error {
	resp, err := client.Post(c.endpoint, "application/json", strings.NewReader(frame))
	if err != nil {
		return err
	}
	io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusAccepted {
		return fmt.Errorf("POST %s: %s", frame, resp.Status)
	}
	return nil
}

// Recv returns the next message of the event stream.
func (c *Legacy) Recv() (map[string]any, error) { return next(c.msgs) }

// Close ends the event stream.
func (c *Legacy) Close() { c.stop() }

// Initialize opens the MCP session on c at a protocol version.
func Initialize(c Conn, version string) error {
	err := c.Send(`{"jsonrpc":"2.0","id":"init","method":"initialize","params":{"protocolVersion":"` + version +
		`","capabilities":{},"clientInfo":{"name":"strict","version":"1"}}}`)
	for err == nil {
		var m map[string]any
		if m, err = c.Recv(); err == nil && m["id"] == "init" && m["method"] == nil {
			return c.Send(`{"jsonrpc":"2.0","method":"notifications/initialized"}`)
		}
	}
	return err
}

// OpenSession opens a Streamable HTTP session at url (2025-06-18) and
// returns its id.
func OpenSession(url string) (string, error) {
	resp, err := client.Do(Request(url, "", `{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-06-18","capabilities":{},"clientInfo":{"name":"strict","version":"1"}}}`))
	if err != nil {
		return "", err
	}
	io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	session := resp.Header.Get("Mcp-Session-Id")
	if resp.StatusCode != http.StatusOK || session == "" {
		return "", fmt.Errorf("initialize: %s, session %q", resp.Status, session)
	}
	resp, err = client.Do(Request(url, session, `{"jsonrpc":"2.0","method":"notifications/initialized"}`))
	if err != nil {
		return "", err
	}
	io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	return session, nil
}
