package httpx_test

import (
	"bytes"
	"fmt"
	"io"
	"net"
	"net/http"
	"sync"
	"time"

	"github.com/mcp-cancel-proxy/mcp-cancel-proxy/framing"
	"github.com/mcp-cancel-proxy/mcp-cancel-proxy/proxy/upstream/upstreamtest"
)

// The scripted servers of TestTranscriptsOverHTTP: each takes the frames
// of the "s>" steps and puts what reaches it to the replay's server inbox.

// scriptedStdio returns a scripted stdio server: its lines are the
// server's frames.
func (r *replay) scriptedStdio() *pipeBackend {
	toProxy, fromServer := io.Pipe()
	fromProxy, toServer := io.Pipe()
	b := &pipeBackend{in: toProxy, out: toServer, exited: make(chan struct{})}
	r.send = func(frame string) {
		if _, err := io.WriteString(fromServer, frame+"\n"); err != nil {
			r.t.Fatalf("server: %v", err)
		}
	}
	go func() {
		rd := framing.NewReader(fromProxy, 0)
		for {
			line, err := rd.Read(nil)
			if err != nil {
				return
			}
			if bytes.Contains(line, []byte(`"harness-init"`)) {
				r.send(r.initAnswer)
				continue
			}
			r.server.put("stdin", bytes.Clone(line))
		}
	}()
	r.cut = func(string) { fromServer.Close() } // the server exits
	r.end = r.cut
	r.atEnd(func() { fromServer.Close(); fromProxy.Close() })
	return b
}

// pipeBackend is a scripted stdio server: its lines each way, and its end.
type pipeBackend struct {
	in     *io.PipeReader // the server's lines
	out    *io.PipeWriter // lines to the server
	once   sync.Once
	exited chan struct{}
}

func (b *pipeBackend) Stop() {
	b.once.Do(func() {
		b.in.Close()
		b.out.Close()
		close(b.exited)
	})
}

func (b *pipeBackend) Exited() <-chan struct{} { return b.exited }

// scriptedStreamable starts a scripted Streamable HTTP server and returns
// its URL: each POST that carries requests is answered with an event stream
// that carries what the server sends about them, and ends once they are
// all answered; a POST without requests gets 202; the GET stream carries
// the rest.
func (r *replay) scriptedStreamable() string {
	up := &scriptedUpstream{r: r, byID: map[string]*upStream{}, byToken: map[string]*upStream{}, getOpen: make(chan struct{})}
	r.send, r.cut, r.end = up.send, up.cut, up.end
	return r.listen(up)
}

// listen serves h on a loopback port until the replay ends, and returns
// its URL. At the end, every handler has returned: none outlives the test
// (Close cuts their connections, which ends their requests' contexts).
func (r *replay) listen(h http.Handler) string {
	var handlers sync.WaitGroup
	srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		handlers.Add(1)
		defer handlers.Done()
		h.ServeHTTP(w, req)
	})}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		r.t.Fatal(err)
	}
	served := make(chan struct{})
	go func() {
		defer close(served)
		srv.Serve(ln)
	}()
	r.atEnd(func() {
		srv.Close()
		<-served
		handlers.Wait()
	})
	return "http://" + ln.Addr().String() + "/mcp"
}

// scriptedUpstream is the server side of a replay over Streamable HTTP.
type scriptedUpstream struct {
	r       *replay
	mu      sync.Mutex
	byID    map[string]*upStream // request id -> the stream to answer it on
	byToken map[string]*upStream
	open    []*upStream // POST streams with requests unanswered, oldest first
	get     *upStream
	getOpen chan struct{} // closed once the sidecar has opened the GET stream
}

// upStream is one response stream of the scripted server.
type upStream struct {
	out     chan []byte   // events to write; closed when the stream is to end
	broken  chan struct{} // closed when the stream is to break
	pending int           // requests not yet answered
	ids     []string      // the requests it carries
	// closeCancels: the stream is of protocol 2026-07-28, where its close
	// under a request is the request's cancel.
	closeCancels bool
}

func newUpStream() *upStream {
	return &upStream{out: make(chan []byte, 64), broken: make(chan struct{})}
}

// cut breaks the stream that is to carry the answer to request id: the
// response ends without its last chunk, as when a server dies.
func (u *scriptedUpstream) cut(id string) {
	u.mu.Lock()
	defer u.mu.Unlock()
	st := u.byID[id]
	if st == nil {
		u.r.t.Fatalf("cut %s: no stream carries its answer", id)
	}
	close(st.broken)
}

func (u *scriptedUpstream) ServeHTTP(w http.ResponseWriter, req *http.Request) {
	body, _ := io.ReadAll(req.Body)
	switch {
	case req.Method == http.MethodDelete:
		return
	case req.Method == http.MethodGet:
		st := newUpStream()
		u.mu.Lock()
		if u.get == nil {
			close(u.getOpen)
		}
		u.get = st
		u.mu.Unlock()
		u.stream(w, req, st)
		return
	case bytes.Contains(body, []byte(`"harness-init"`)):
		w.Header().Set("Mcp-Session-Id", "replay-session")
		w.Header().Set("Content-Type", "application/json")
		io.WriteString(w, u.r.initAnswer)
		return
	case bytes.Contains(body, []byte(`"mcp-cancel-proxy-tools"`)):
		// The bridge's own tools/list, before a 2026-07-28 call when it
		// has read none (for the tools' Mcp-Param headers): answered out
		// of the steps' sight, as the harness's initialize is.
		w.Header().Set("Content-Type", "application/json")
		io.WriteString(w, `{"jsonrpc":"2.0","id":"mcp-cancel-proxy-tools","result":{"tools":[]}}`)
		return
	}
	var f framing.Frame
	st := newUpStream()
	requests := 0
	if f.Parse(body) == nil {
		u.mu.Lock()
		for i := range f.Msgs {
			if m := &f.Msgs[i]; m.Kind == framing.KindRequest {
				if m.Method == framing.MethodInitialize { // the steps' own: a stateful server's session
					w.Header().Set("Mcp-Session-Id", "replay-session")
				}
				st.pending++
				st.ids = append(st.ids, m.ID.String())
				requests++
				u.byID[m.ID.String()] = st
				if m.Token.IsValid() {
					u.byToken[m.Token.String()] = st
				}
			}
		}
		if st.pending > 0 {
			u.open = append(u.open, st)
		}
		u.mu.Unlock()
	}
	st.closeCancels = req.Header.Get("MCP-Protocol-Version") == "2026-07-28"
	// Once its stream is known: a step that answers it may come at once.
	u.r.server.put("POST", headerTrace(req, body))
	if requests == 0 {
		w.WriteHeader(http.StatusAccepted)
		return
	}
	u.stream(w, req, st)
}

// headerTrace is the request a Streamable HTTP server sees in body: its
// traceparent header, if it has one and the request carries no context of
// its own, as its params._meta.traceparent (what a stdio server gets in
// the line), so that a transcript says one thing of every server.
func headerTrace(req *http.Request, body []byte) []byte {
	tp := req.Header.Get("traceparent")
	var f framing.Frame
	if tp == "" || f.Parse(body) != nil || f.Batch || f.Msgs[0].TraceParentSpan.Found() {
		return body
	}
	traced, err := framing.WithTraceContext(&f.Msgs[0], tp, req.Header.Get("tracestate"))
	if err != nil {
		return body
	}
	return traced
}

// stream writes st's events until it ends or the sidecar leaves.
func (u *scriptedUpstream) stream(w http.ResponseWriter, req *http.Request, st *upStream) {
	w.Header().Set("Content-Type", "text/event-stream")
	w.WriteHeader(http.StatusOK)
	w.(http.Flusher).Flush()
	for {
		select {
		case ev, ok := <-st.out:
			if !ok {
				return
			}
			fmt.Fprintf(w, "data: %s\n\n", ev)
			w.(http.Flusher).Flush()
		case <-st.broken:
			panic(http.ErrAbortHandler) // the connection is cut, the response unfinished
		case <-req.Context().Done():
			u.closed(st)
			return
		}
	}
}

// end ends the stream that is to carry the answer to request id, cleanly,
// without the answer.
func (u *scriptedUpstream) end(id string) {
	u.mu.Lock()
	defer u.mu.Unlock()
	st := u.byID[id]
	if st == nil {
		u.r.t.Fatalf("end %s: no stream carries its answer", id)
	}
	delete(u.byID, id)
	close(st.out)
}

// closed takes the close of a 2026-07-28 stream with requests unanswered
// as what it is, their cancel: the server's inbox gets a cancel for each.
func (u *scriptedUpstream) closed(st *upStream) {
	u.mu.Lock()
	defer u.mu.Unlock()
	if !st.closeCancels {
		return
	}
	for _, id := range st.ids {
		if u.byID[id] == st {
			delete(u.byID, id)
			u.r.server.put("the stream's close", []byte(`{"jsonrpc":"2.0","method":"notifications/cancelled","params":{"requestId":`+id+`,"reason":"(its stream closed)"}}`))
		}
	}
}

// send writes a frame of the server's on the stream it belongs on: an
// answer on its request's, progress on its token's while that is open,
// anything else on the newest POST stream still open, or the GET stream.
func (u *scriptedUpstream) send(frame string) {
	var f framing.Frame
	if err := f.Parse([]byte(frame)); err != nil {
		u.r.t.Fatalf("server frame %s: %v", frame, err)
	}
	u.mu.Lock()
	defer u.mu.Unlock()
	var st *upStream
	answers := 0
	for i := range f.Msgs {
		m := &f.Msgs[i]
		switch {
		case m.Kind == framing.KindResponse && u.byID[m.ID.String()] != nil:
			st = cmpOr(st, u.byID[m.ID.String()])
			delete(u.byID, m.ID.String())
			answers++
		case m.Method == framing.MethodProgress && u.byToken[m.Token.String()] != nil:
			st = cmpOr(st, u.byToken[m.Token.String()])
		}
	}
	if st == nil && len(u.open) > 0 {
		st = u.open[len(u.open)-1]
	}
	if st == nil && u.get == nil {
		// The sidecar opens its GET stream on its own time: wait for it.
		u.mu.Unlock()
		select {
		case <-u.getOpen:
		case <-time.After(10 * time.Second): // a bound, not a wait
		}
		u.mu.Lock()
	}
	if st == nil && u.get == nil {
		u.r.t.Fatalf("no stream open for %s", frame)
	}
	st = cmpOr(st, u.get)
	st.out <- []byte(frame)
	if st.pending -= answers; answers > 0 && st.pending <= 0 {
		close(st.out)
		for i, o := range u.open {
			if o == st {
				u.open = append(u.open[:i:i], u.open[i+1:]...)
				break
			}
		}
		for tok, o := range u.byToken {
			if o == st {
				delete(u.byToken, tok)
			}
		}
	}
}

func cmpOr(a, b *upStream) *upStream {
	if a != nil {
		return a
	}
	return b
}

// scriptedSSE starts a scripted HTTP+SSE server (protocol 2024-11-05) and
// returns its event stream's URL: the stream's first event names where
// messages are POSTed (202), and every frame the server sends comes on it.
func (r *replay) scriptedSSE() string {
	out := make(chan []byte, 64)
	broken, over := make(chan struct{}), make(chan struct{})
	var once sync.Once
	stop := func() { once.Do(func() { close(over) }) }
	r.send = func(frame string) { out <- []byte(frame) }
	r.cut = func(string) { close(broken); stop() } // the event stream breaks
	r.end = func(string) { stop() }                // it ends
	return r.listen(http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		if req.Method == http.MethodGet {
			upstreamtest.ServeEvents(w, req, "/messages?session=replay", out, over)
			select {
			case <-broken:
				panic(http.ErrAbortHandler)
			default:
				return
			}
		}
		body, _ := io.ReadAll(req.Body)
		if bytes.Contains(body, []byte(`"harness-init"`)) {
			out <- []byte(r.initAnswer)
		} else {
			r.server.put("POST", body)
		}
		w.WriteHeader(http.StatusAccepted)
	}))
}
