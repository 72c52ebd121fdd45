package httpx_test

import (
	"bytes"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/valyala/fasthttp"
	"go.uber.org/zap"
	"go.uber.org/zap/zaptest"

	"github.com/mcp-cancel-proxy/mcp-cancel-proxy/framing"
	"github.com/mcp-cancel-proxy/mcp-cancel-proxy/proxy"
	"github.com/mcp-cancel-proxy/mcp-cancel-proxy/proxy/clock"
	"github.com/mcp-cancel-proxy/mcp-cancel-proxy/proxy/httpx"
	"github.com/mcp-cancel-proxy/mcp-cancel-proxy/proxy/internal/transcript"
	"github.com/mcp-cancel-proxy/mcp-cancel-proxy/proxy/stdio"
)

// TestTranscriptsOverHTTP replays every golden transcript (the ones the
// stdio relay replays) through the sidecar, with a Streamable HTTP client
// in front, over each kind of upstream: a Streamable HTTP server, and a
// stdio server behind Children (the path HTTP+SSE upstreams take too). The
// same frames in must give the same decisions out. Over HTTP a peer gets
// what several requests carry in no fixed order, so a "c<" or "s<" step
// takes the matching frame among those that came, and one more rule is
// checked: an answer reaches the client on the response of the POST that
// carried its request. The graces run on a fake clock that never moves, so
// a cancelled request's stream stays open for its late answer.
func TestTranscriptsOverHTTP(t *testing.T) {
	all, err := transcript.All()
	if err != nil {
		t.Fatal(err)
	}
	upstreams := []struct {
		name  string
		start func(*replay)
	}{{"streamable", (*replay).viaStreamable}, {"child", (*replay).viaChild}}
	for _, up := range upstreams {
		for _, tr := range all {
			t.Run(up.name+"/"+tr.Name, func(t *testing.T) {
				watchdog(t, 30*time.Second)
				r := &replay{t: t, clk: clock.NewFake(time.Now()), postOf: map[string][]string{}, moved: make(chan struct{}, 1)}
				r.client.init()
				r.server.init()
				up.start(r)
				r.initialize()
				for _, st := range tr.Steps {
					r.step(st)
				}
				r.sync()
			})
		}
	}
}

// replay is one transcript's run: a scripted client POSTing to a sidecar,
// and a scripted server behind it.
type replay struct {
	t      *testing.T
	clk    *clock.Fake
	url    string
	stats  func() proxy.Stats
	send   func(frame string) // the server sends a frame
	client inbox              // what reached the client, by response
	server inbox              // what reached the server
	// decided counts the decisions about frames of the peers; injected
	// the messages the peers sent.
	decided  atomic.Int64
	injected int64
	moved    chan struct{} // signalled on each decision
	session  string
	posts    int
	postOf   map[string][]string // request id -> the POSTs that carried it
	readers  sync.WaitGroup
}

func (r *replay) onEvent(ev proxy.Event) {
	if ev.From == "client" || ev.From == "server" {
		r.decided.Add(1)
		select {
		case r.moved <- struct{}{}:
		default:
		}
	}
}

func (r *replay) step(st transcript.Step) {
	r.t.Helper()
	switch st.Op {
	case "c>":
		r.injected += count(st.Arg)
		r.post(st.Arg)
	case "s>":
		r.injected += count(st.Arg)
		r.send(st.Arg)
	case "c<":
		got := r.client.take(r.t, "client", st.Arg)
		r.onItsStream(got)
	case "s<":
		r.server.take(r.t, "server", st.Arg)
	case "sync":
		r.sync()
	case "stats":
		if err := transcript.CheckStats(r.stats(), st.Arg); err != nil {
			r.t.Fatalf("steps line %d: %v", st.Line, err)
		}
	}
}

// count returns how many messages a frame holds, as the tracker counts
// its decisions: one for a frame that does not parse.
func count(frame string) int64 {
	var f framing.Frame
	if f.Parse([]byte(frame)) != nil {
		return 1
	}
	return int64(len(f.Msgs))
}

// sync waits until every message the peers sent has been decided, then
// checks that nothing the steps did not expect reached either peer.
func (r *replay) sync() {
	r.t.Helper()
	deadline := time.After(10 * time.Second)
	for r.decided.Load() < r.injected {
		select {
		case <-r.moved:
		case <-deadline:
			r.t.Fatalf("%d of %d messages decided", r.decided.Load(), r.injected)
		}
	}
	for who, b := range map[string]*inbox{"client": &r.client, "server": &r.server} {
		for _, it := range b.rest() {
			r.t.Errorf("%s got unexpected %s (on %s)", who, it.raw, it.where)
		}
	}
}

// onItsStream checks that each answer in what the client got came on the
// response of a POST that carried its request.
func (r *replay) onItsStream(got item) {
	r.t.Helper()
	var f framing.Frame
	if f.Parse(got.raw) != nil {
		return
	}
	for i := range f.Msgs {
		m := &f.Msgs[i]
		if m.Kind != framing.KindResponse || !m.ID.IsValid() {
			continue
		}
		posts := r.postOf[m.ID.String()]
		found := false
		for j, p := range posts {
			if p == got.where {
				r.postOf[m.ID.String()] = append(posts[:j:j], posts[j+1:]...)
				found = true
				break
			}
		}
		if !found {
			r.t.Errorf("the answer %s came on %s, not on the response of a POST that carried its request (%v)", got.raw, got.where, posts)
		}
	}
}

// initialize opens the session, out of the steps' sight: the harness's own
// initialize, answered by the server side without a step.
func (r *replay) initialize() {
	r.t.Helper()
	r.injected += 2
	resp := r.do(http.MethodPost, `{"jsonrpc":"2.0","id":"harness-init","method":"initialize","params":{"protocolVersion":"2025-06-18","capabilities":{},"clientInfo":{"name":"replay","version":"1"}}}`)
	r.session = resp.Header.Get("Mcp-Session-Id")
	if r.session == "" {
		r.t.Fatalf("initialize: no session (HTTP %d)", resp.StatusCode)
	}
	r.readAll("initialize", resp)
	r.client.take(r.t, "client", `{"jsonrpc":"2.0","id":"harness-init","result":{"protocolVersion":"2025-06-18","capabilities":{},"serverInfo":{"name":"replay","version":"1"}}}`)
	get := r.do(http.MethodGet, "")
	if get.StatusCode != http.StatusOK {
		r.t.Fatalf("GET stream: HTTP %d", get.StatusCode)
	}
	r.readAll("get", get)
}

const initAnswer = `{"jsonrpc":"2.0","id":"harness-init","result":{"protocolVersion":"2025-06-18","capabilities":{},"serverInfo":{"name":"replay","version":"1"}}}`

// post sends a frame of the client's, and reads what answers it.
func (r *replay) post(frame string) {
	r.t.Helper()
	r.posts++
	where := fmt.Sprintf("POST %d", r.posts)
	var f framing.Frame
	if f.Parse([]byte(frame)) == nil {
		for i := range f.Msgs {
			if m := &f.Msgs[i]; m.Kind == framing.KindRequest {
				r.postOf[m.ID.String()] = append(r.postOf[m.ID.String()], where)
			}
		}
	}
	r.readAll(where, r.do(http.MethodPost, frame))
}

func (r *replay) do(method, body string) *http.Response {
	r.t.Helper()
	req, err := http.NewRequest(method, r.url, strings.NewReader(body))
	if err != nil {
		r.t.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Accept", "application/json, text/event-stream")
	req.Header.Set("MCP-Protocol-Version", "2025-06-18")
	if r.session != "" {
		req.Header.Set("Mcp-Session-Id", r.session)
	}
	resp, err := testClient.Do(req)
	if err != nil {
		r.t.Fatalf("%s: %v", method, err)
	}
	return resp
}

// readAll puts what a response carries to the client's inbox: each
// event's data of an event stream, as it comes, or a JSON body.
func (r *replay) readAll(where string, resp *http.Response) {
	if !strings.HasPrefix(resp.Header.Get("Content-Type"), "text/event-stream") {
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if len(bytes.TrimSpace(body)) > 0 {
			r.client.put(where, body)
		}
		return
	}
	r.readers.Add(1)
	go func() {
		defer r.readers.Done()
		defer resp.Body.Close()
		rd := framing.NewSSEReader(resp.Body, 0)
		for {
			ev, err := rd.Next()
			if err != nil {
				return
			}
			if ev.HasData && len(ev.Data) > 0 {
				r.client.put(where, bytes.Clone(ev.Data))
			}
		}
	}()
}

// serve runs the sidecar on a loopback port; the cleanup stops it, then
// waits for the client's readers.
func (r *replay) serve(sc *httpx.Sidecar) {
	r.t.Helper()
	sc.Clock = r.clk
	sc.Logger = zaptest.NewLogger(r.t)
	sc.Tracker.OnEvent = r.onEvent
	h, err := sc.Handler()
	if err != nil {
		r.t.Fatal(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		r.t.Fatal(err)
	}
	srv := &fasthttp.Server{Handler: h, CloseOnShutdown: true, IdleTimeout: 100 * time.Millisecond}
	go srv.Serve(ln)
	r.url = "http://" + ln.Addr().String() + "/mcp"
	r.t.Cleanup(func() {
		srv.Shutdown()
		r.readers.Wait()
	})
}

// inbox collects the frames that reached a peer, to be taken in any order.
type inbox struct {
	mu    sync.Mutex
	items []item
	more  chan struct{} // closed and replaced when an item comes
}

type item struct {
	where string // the response (client) that carried it
	raw   []byte
}

func (b *inbox) init() { b.more = make(chan struct{}) }

func (b *inbox) put(where string, raw []byte) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.items = append(b.items, item{where, raw})
	close(b.more)
	b.more = make(chan struct{})
}

// take removes and returns the first item that is the JSON value want,
// waiting for it to come.
func (b *inbox) take(t *testing.T, who, want string) item {
	t.Helper()
	deadline := time.After(10 * time.Second)
	for {
		b.mu.Lock()
		for i, it := range b.items {
			if transcript.SameJSON(it.raw, want) {
				b.items = append(b.items[:i:i], b.items[i+1:]...)
				b.mu.Unlock()
				return it
			}
		}
		more := b.more
		b.mu.Unlock()
		select {
		case <-more:
		case <-deadline:
			t.Fatalf("%s never got %s; it got %v", who, want, b.rest())
		}
	}
}

// rest returns, and removes, what is left.
func (b *inbox) rest() []item {
	b.mu.Lock()
	defer b.mu.Unlock()
	rest := b.items
	b.items = nil
	return rest
}

func (it item) String() string { return fmt.Sprintf("%s on %s", it.raw, it.where) }

// viaChild serves the session from a scripted stdio server behind
// Children: its lines are the server's frames.
func (r *replay) viaChild() {
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
				r.send(initAnswer)
				continue
			}
			r.server.put("stdin", bytes.Clone(line))
		}
	}()
	cs := &httpx.Children{Clock: r.clk, Session: stdio.Options{OnEvent: r.onEvent},
		Dial: func(*zap.Logger) (httpx.Backend, error) { return b, nil }}
	r.stats = cs.Stats
	r.serve(&httpx.Sidecar{Children: cs})
	r.t.Cleanup(func() { cs.StopAll(); fromServer.Close(); fromProxy.Close() })
}

// pipeBackend is a scripted server as a Children Backend.
type pipeBackend struct {
	in     *io.PipeReader // the server's lines
	out    *io.PipeWriter // lines to the server
	once   sync.Once
	exited chan struct{}
}

func (b *pipeBackend) Conn() stdio.Conn { return stdio.Conn{In: b.in, Out: b.out} }

func (b *pipeBackend) Stop() {
	b.once.Do(func() {
		b.in.Close()
		b.out.Close()
		close(b.exited)
	})
}

func (b *pipeBackend) Exited() <-chan struct{} { return b.exited }

// viaStreamable serves the session from a scripted Streamable HTTP server:
// each POST that carries requests is answered with an event stream that
// carries what the server sends about them, and ends once they are all
// answered; a POST without requests gets 202; the GET stream carries the
// rest.
func (r *replay) viaStreamable() {
	up := &scriptedUpstream{r: r, byID: map[string]*upStream{}, byToken: map[string]*upStream{}}
	srv := &http.Server{Handler: up}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		r.t.Fatal(err)
	}
	go srv.Serve(ln)
	r.send = up.send
	sc := &httpx.Sidecar{Upstream: "http://" + ln.Addr().String() + "/mcp"}
	r.stats = sc.Stats
	r.serve(sc)
	r.t.Cleanup(func() { srv.Close() }) // before the sidecar's shutdown: its streams end
}

// scriptedUpstream is the server side of a replay over Streamable HTTP.
type scriptedUpstream struct {
	r       *replay
	mu      sync.Mutex
	byID    map[string]*upStream // request id -> the stream to answer it on
	byToken map[string]*upStream
	open    []*upStream // POST streams with requests unanswered, oldest first
	get     *upStream
}

// upStream is one response stream of the scripted server.
type upStream struct {
	out     chan []byte // events to write; closed when the stream is to end
	pending int         // requests not yet answered
}

func (u *scriptedUpstream) ServeHTTP(w http.ResponseWriter, req *http.Request) {
	body, _ := io.ReadAll(req.Body)
	switch {
	case req.Method == http.MethodDelete:
		return
	case req.Method == http.MethodGet:
		st := &upStream{out: make(chan []byte, 64)}
		u.mu.Lock()
		u.get = st
		u.mu.Unlock()
		u.stream(w, req, st)
		return
	case bytes.Contains(body, []byte(`"harness-init"`)):
		w.Header().Set("Mcp-Session-Id", "replay-session")
		w.Header().Set("Content-Type", "application/json")
		io.WriteString(w, initAnswer)
		return
	}
	u.r.server.put("POST", body)
	var f framing.Frame
	st := &upStream{out: make(chan []byte, 64)}
	if f.Parse(body) == nil {
		u.mu.Lock()
		for i := range f.Msgs {
			if m := &f.Msgs[i]; m.Kind == framing.KindRequest {
				st.pending++
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
	if st.pending == 0 {
		w.WriteHeader(http.StatusAccepted)
		return
	}
	u.stream(w, req, st)
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
		case <-req.Context().Done():
			return
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
	st = cmpOr(st, u.get)
	if st == nil {
		u.r.t.Fatalf("no stream open for %s", frame)
	}
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
