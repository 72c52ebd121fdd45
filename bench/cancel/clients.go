//go:build linux

package main

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"sync"
	"time"
)

// client is one MCP client session of a run, of one of four kinds: stdio
// (lines over pipes), Streamable HTTP of 2025-11-25 (a session, a POST per
// message, a call's messages on its POST's stream), Streamable HTTP of
// 2026-07-28 (no session; a call is cancelled by closing its stream) and
// HTTP+SSE of 2024-11-05 (one event stream, a POST per message). Every
// message it reads goes to the recorder, stamped with the moment it was
// read.
type client interface {
	// call sends a tools/call and returns once the front has it (stdio:
	// written; HTTP: its answer's head read, or its POST accepted).
	call(id int64, body []byte) error
	// notify sends a notification.
	notify(body []byte) error
	// cancel cancels id: body, notifications/cancelled, sent; or, on
	// 2026-07-28 HTTP, the call's stream closed.
	cancel(id int64, body []byte) error
	close()
}

// errNoNotify: 2026-07-28 HTTP defines no client notifications.
var errNoNotify = errors.New("no notifications on this transport")

const initBody = `{"jsonrpc":"2.0","id":"init","method":"initialize","params":{"protocolVersion":"2025-11-25","capabilities":{},"clientInfo":{"name":"cancel-bench","version":"1"}}}`
const initializedBody = `{"jsonrpc":"2.0","method":"notifications/initialized"}`

// initAnswer tells the answer to initialize from the run's messages.
func initAnswer(msg []byte) bool { return bytes.Contains(msg, []byte(`"id":"init"`)) }

// stdioClient writes lines to the front's stdin and reads its stdout.
type stdioClient struct {
	mu sync.Mutex
	w  io.WriteCloser
}

func newStdioClient(w io.WriteCloser, r io.Reader, rec *recorder) (*stdioClient, error) {
	c := &stdioClient{w: w}
	inited := make(chan struct{})
	go func() { // ends with the front's stdout
		br := bufio.NewReaderSize(r, 64<<10)
		once := sync.OnceFunc(func() { close(inited) })
		for {
			line, err := br.ReadBytes('\n')
			if len(line) > 0 {
				at := now()
				if initAnswer(line) {
					once()
				} else {
					rec.got(line, at)
				}
			}
			if err != nil {
				return
			}
		}
	}()
	if err := c.send([]byte(initBody)); err != nil {
		return nil, err
	}
	select {
	case <-inited:
	case <-time.After(30 * time.Second):
		return nil, errors.New("no answer to initialize in 30s")
	}
	return c, c.send([]byte(initializedBody))
}

func (c *stdioClient) send(b []byte) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	_, err := c.w.Write(append(b, '\n'))
	return err
}

func (c *stdioClient) call(_ int64, b []byte) error   { return c.send(b) }
func (c *stdioClient) notify(b []byte) error          { return c.send(b) }
func (c *stdioClient) cancel(_ int64, b []byte) error { return c.send(b) }
func (c *stdioClient) close()                         { c.w.Close() }

// httpClient is a Streamable HTTP client of 2025-11-25, with a session.
type httpClient struct {
	url, session string
	hc           *http.Client
	rec          *recorder
	ctx          context.Context
	stop         context.CancelFunc
	wg           sync.WaitGroup
}

func newHTTPClient(url string, rec *recorder) (*httpClient, error) {
	ctx, stop := context.WithCancel(context.Background())
	c := &httpClient{url: url, rec: rec, ctx: ctx, stop: stop,
		hc: &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 256}}}
	resp, err := c.post([]byte(initBody))
	if err != nil {
		return nil, err
	}
	var answered bool
	readMessages(resp, func(b []byte) { answered = answered || initAnswer(b) })
	c.session = resp.Header.Get("Mcp-Session-Id")
	if !answered {
		return nil, fmt.Errorf("initialize: %s, no answer", resp.Status)
	}
	return c, c.notify([]byte(initializedBody))
}

func (c *httpClient) post(b []byte) (*http.Response, error) {
	req, _ := http.NewRequestWithContext(c.ctx, "POST", c.url, bytes.NewReader(b))
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Accept", "application/json, text/event-stream")
	if c.session != "" {
		req.Header.Set("Mcp-Session-Id", c.session)
		req.Header.Set("MCP-Protocol-Version", "2025-11-25")
	}
	return c.hc.Do(req)
}

func (c *httpClient) call(id int64, b []byte) error {
	resp, err := c.post(b)
	if err != nil {
		return err
	}
	if resp.StatusCode != http.StatusOK {
		resp.Body.Close()
		return fmt.Errorf("tools/call: %s", resp.Status)
	}
	c.wg.Go(func() {
		readMessages(resp, func(m []byte) { c.rec.got(m, now()) })
		c.rec.streamEnded(id, now())
	})
	return nil
}

func (c *httpClient) notify(b []byte) error {
	resp, err := c.post(b)
	return accepted(resp, err)
}

// accepted reads and closes the answer to a POST that carries no message,
// and says a status other than 2xx.
func accepted(resp *http.Response, err error) error {
	if err != nil {
		return err
	}
	io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	if resp.StatusCode/100 != 2 {
		return fmt.Errorf("POST: %s", resp.Status)
	}
	return nil
}

func (c *httpClient) cancel(_ int64, b []byte) error { return c.notify(b) }

func (c *httpClient) close() {
	if c.session != "" {
		req, _ := http.NewRequest("DELETE", c.url, nil)
		req.Header.Set("Mcp-Session-Id", c.session)
		if resp, err := c.hc.Do(req); err == nil {
			resp.Body.Close()
		}
	}
	c.stop()
	c.wg.Wait()
	c.hc.CloseIdleConnections()
}

// readMessages reads a response's messages, JSON or an event stream, to
// its end, and closes it.
func readMessages(resp *http.Response, each func([]byte)) {
	defer resp.Body.Close()
	if !strings.HasPrefix(resp.Header.Get("Content-Type"), "text/event-stream") {
		if b, err := io.ReadAll(resp.Body); err == nil && len(bytes.TrimSpace(b)) > 0 {
			each(b)
		}
		return
	}
	readEvents(resp.Body, func(_ string, data []byte) { each(data) })
}

// readEvents reads server-sent events until r ends.
func readEvents(r io.Reader, each func(event string, data []byte)) {
	br := bufio.NewReaderSize(r, 64<<10)
	var event string
	var data []byte
	for {
		line, err := br.ReadBytes('\n')
		line = bytes.TrimRight(line, "\r\n")
		switch {
		case len(line) == 0 && err == nil:
			if len(data) > 0 {
				each(event, data)
			}
			event, data = "", nil
		case bytes.HasPrefix(line, []byte("data:")):
			d := bytes.TrimPrefix(line[5:], []byte(" "))
			if data != nil {
				data = append(data, '\n')
			}
			data = append(data, d...)
		case bytes.HasPrefix(line, []byte("event:")):
			event = string(bytes.TrimSpace(line[6:]))
		}
		if err != nil {
			return
		}
	}
}

// modernClient is a Streamable HTTP client of 2026-07-28: no session, a
// connection per call, cancelled by closing its side of the connection
// (so that it can still read the front close its own).
type modernClient struct {
	addr, path string
	rec        *recorder
	mu         sync.Mutex
	conns      map[int64]*net.TCPConn
	wg         sync.WaitGroup
}

func newModernClient(url string, rec *recorder) (*modernClient, error) {
	rest, ok := strings.CutPrefix(url, "http://")
	if !ok {
		return nil, fmt.Errorf("not an http URL: %s", url)
	}
	addr, path, _ := strings.Cut(rest, "/")
	return &modernClient{addr: addr, path: "/" + path, rec: rec, conns: map[int64]*net.TCPConn{}}, nil
}

func (c *modernClient) call(id int64, b []byte) error {
	conn, err := net.Dial("tcp", c.addr)
	if err != nil {
		return err
	}
	tc := conn.(*net.TCPConn)
	head := fmt.Sprintf("POST %s HTTP/1.1\r\nHost: %s\r\nContent-Type: application/json\r\nAccept: application/json, text/event-stream\r\n"+
		"MCP-Protocol-Version: 2026-07-28\r\nMcp-Method: tools/call\r\nMcp-Name: hold\r\nContent-Length: %d\r\n\r\n", c.path, c.addr, len(b))
	if _, err := conn.Write(append([]byte(head), b...)); err != nil {
		conn.Close()
		return err
	}
	br := bufio.NewReader(conn)
	resp, err := http.ReadResponse(br, nil)
	if err != nil {
		conn.Close()
		return err
	}
	if resp.StatusCode != http.StatusOK {
		body, _ := io.ReadAll(resp.Body)
		conn.Close()
		return fmt.Errorf("tools/call: %s: %.200s", resp.Status, body)
	}
	c.mu.Lock()
	c.conns[id] = tc
	c.mu.Unlock()
	c.wg.Go(func() {
		readMessages(resp, func(m []byte) { c.rec.got(m, now()) })
		c.rec.streamEnded(id, now())
		c.mu.Lock()
		delete(c.conns, id)
		c.mu.Unlock()
		conn.Close()
	})
	return nil
}

func (c *modernClient) notify([]byte) error { return errNoNotify }

func (c *modernClient) cancel(id int64, _ []byte) error {
	c.mu.Lock()
	conn := c.conns[id]
	c.mu.Unlock()
	if conn == nil {
		return nil // its stream ended first
	}
	if err := conn.CloseWrite(); err != nil && !errors.Is(err, net.ErrClosed) { // closed: it ended meanwhile
		return err
	}
	return nil
}

func (c *modernClient) close() {
	c.mu.Lock()
	for _, conn := range c.conns {
		conn.Close()
	}
	c.mu.Unlock()
	c.wg.Wait()
}

// legacyClient is an HTTP+SSE client of 2024-11-05.
type legacyClient struct {
	endpoint string
	hc       *http.Client
	stop     context.CancelFunc
	done     chan struct{}
}

func newLegacyClient(url string, rec *recorder) (*legacyClient, error) {
	ctx, stop := context.WithCancel(context.Background())
	hc := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 256}}
	req, _ := http.NewRequestWithContext(ctx, "GET", url, nil)
	req.Header.Set("Accept", "text/event-stream")
	resp, err := hc.Do(req)
	if err != nil {
		stop()
		return nil, err
	}
	if resp.StatusCode != http.StatusOK {
		resp.Body.Close()
		stop()
		return nil, fmt.Errorf("GET %s: %s", url, resp.Status)
	}
	endpoint, inited := make(chan string, 1), make(chan struct{})
	c := &legacyClient{hc: hc, stop: stop, done: make(chan struct{})}
	go func() {
		defer close(c.done)
		once := sync.OnceFunc(func() { close(inited) })
		readEvents(resp.Body, func(event string, data []byte) {
			at := now()
			switch {
			case event == "endpoint":
				endpoint <- string(data)
			case initAnswer(data):
				once()
			default:
				rec.got(data, at)
			}
		})
		resp.Body.Close()
	}()
	select {
	case e := <-endpoint:
		c.endpoint = resolve(url, e)
	case <-time.After(30 * time.Second):
		c.close()
		return nil, errors.New("no endpoint event in 30s")
	}
	if err := c.send([]byte(initBody)); err != nil {
		c.close()
		return nil, err
	}
	select {
	case <-inited:
	case <-time.After(30 * time.Second):
		c.close()
		return nil, errors.New("no answer to initialize in 30s")
	}
	return c, c.send([]byte(initializedBody))
}

// resolve makes the endpoint event's URL absolute against the stream's.
func resolve(stream, endpoint string) string {
	if strings.HasPrefix(endpoint, "http") {
		return endpoint
	}
	rest := strings.TrimPrefix(stream, "http://")
	host, _, _ := strings.Cut(rest, "/")
	return "http://" + host + endpoint
}

func (c *legacyClient) send(b []byte) error {
	return accepted(c.hc.Post(c.endpoint, "application/json", bytes.NewReader(b)))
}

func (c *legacyClient) call(_ int64, b []byte) error   { return c.send(b) }
func (c *legacyClient) notify(b []byte) error          { return c.send(b) }
func (c *legacyClient) cancel(_ int64, b []byte) error { return c.send(b) }

func (c *legacyClient) close() {
	c.stop()
	<-c.done
	c.hc.CloseIdleConnections()
}
