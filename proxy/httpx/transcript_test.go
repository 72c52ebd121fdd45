package httpx_test

import (
	"bytes"
	"cmp"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"reflect"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/valyala/fasthttp"
	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
	"go.uber.org/zap/zaptest"

	"github.com/mcp-cancel-proxy/mcp-cancel-proxy/framing"
	feed "github.com/mcp-cancel-proxy/mcp-cancel-proxy/internal/events"
	"github.com/mcp-cancel-proxy/mcp-cancel-proxy/policy"
	"github.com/mcp-cancel-proxy/mcp-cancel-proxy/proxy"
	"github.com/mcp-cancel-proxy/mcp-cancel-proxy/proxy/clock"
	"github.com/mcp-cancel-proxy/mcp-cancel-proxy/proxy/httpx"
	"github.com/mcp-cancel-proxy/mcp-cancel-proxy/proxy/internal/transcript"
	"github.com/mcp-cancel-proxy/mcp-cancel-proxy/proxy/stdio"
	"github.com/mcp-cancel-proxy/mcp-cancel-proxy/proxy/upstream"
)

// TestTranscriptsOverHTTP replays every golden transcript (the ones the
// stdio relay replays) through the sidecar, for each kind of client in
// front (Streamable HTTP with a session, and the 2024-11-05 HTTP+SSE
// transport) and each kind of upstream behind (a Streamable HTTP server, a
// stdio server, an HTTP+SSE server), all of them scripted by the steps. The
// same frames in must give the same decisions out. Over HTTP a peer gets
// what several requests carry in no fixed order, so a "c<" or "s<" step
// takes the matching frame among those that came; and one more rule is
// checked: an answer reaches a Streamable HTTP client on the response of
// the POST that carried its request. The graces run on a fake clock that
// never moves, so a cancelled request's stream stays open for its late
// answer.
func TestTranscriptsOverHTTP(t *testing.T) {
	t.Parallel()
	for _, front := range []string{"streamable", "legacy"} {
		for _, up := range []string{"streamable", "stdio", "sse"} {
			transcript.ForEach(t, front+"-to-"+up, func(t *testing.T, tr *transcript.Transcript) {
				r := newReplay(t, tr)
				r.legacy = front == "legacy"
				r.maxFrame = tr.MaxFrameSize
				sc := r.sidecar(up)
				sc.DisconnectCancelAfter, r.graced = tr.DisconnectCancelAfter, tr.DisconnectCancelAfter > 0
				r.serve(sc)
				r.play(tr)
			})
		}
	}
}

// newReplay starts a transcript's replay: its inboxes, its fake clock and
// its policy, if it has one.
func newReplay(t *testing.T, tr *transcript.Transcript) *replay {
	// A bound on progress, not on the whole: the soak's thousand calls
	// each wait for the relay's held headers (a real 10 ms), and take
	// longer than any fixed bound on a loaded machine.
	alive := httpx.Stall(t, 30*time.Second)
	r := &replay{t: t, alive: alive, clk: clock.NewFake(time.Now()), postOf: map[string][]string{}, moved: make(chan struct{}, 1),
		bodyOf: map[string]io.Closer{}, renamed: map[string]any{}, initAnswer: tr.InitializeAnswer(), clientInit: tr.ClientInitializeAnswer(), traceParent: tr.TraceParent}
	r.client.init()
	r.server.init()
	r.engine(tr)
	return r
}

// play opens the session, plays the transcript's steps, and checks that
// nothing unexpected came.
func (r *replay) play(tr *transcript.Transcript) {
	r.era = tr.Era()
	switch {
	case r.era == stateless: // a 2026-07-28 request stands alone
	case tr.Initializes(): // the steps initialize: only the legacy event stream is opened first
		if r.legacy {
			r.openEventStream()
		}
	default:
		r.initialize()
	}
	for _, st := range tr.Steps {
		r.step(st)
	}
	r.sync()
}

// sidecar returns the sidecar for the replay's front in front of a
// scripted upstream of the kind named.
func (r *replay) sidecar(kind string) *httpx.Sidecar {
	opts := stdio.Options{OnEvent: r.onEvent, MaxFrameSize: r.maxFrame}
	sc := &httpx.Sidecar{MaxBodySize: r.maxFrame}
	if r.traceParent != "" {
		sc.NewTracer, opts.NewTracer = r.traces.tracer, r.traces.tracer
	}
	if r.policy != nil {
		opts.Governor = r.policy.Governor("s1")
		sc.Governor = r.policy.Governor
	}
	var cs *httpx.Children
	switch kind {
	case "streamable":
		url := r.scriptedStreamable()
		sc.Upstream = url
		if r.legacy {
			sc.Legacy = &httpx.Legacy{Session: opts}
		}
	case "stdio":
		b := r.scriptedStdio()
		conn := upstream.NewPipeConn(b.in, b.out, upstream.PipeOptions{MaxFrameSize: r.maxFrame, Stop: b.Stop})
		cs = &httpx.Children{Dial: upstream.DialFunc(func(*zap.Logger) (upstream.Conn, error) { return conn, nil })}
	case "sse":
		cs = &httpx.Children{} // sessions of the HTTP+SSE upstream
		sc.Upstream, sc.UpstreamTransport = r.scriptedSSE(), httpx.TransportSSE
	}
	if cs != nil {
		cs.Session = opts
		sc.Children = cs
	}
	if r.legacy && sc.Legacy == nil {
		sc.Legacy = &httpx.Legacy{}
	}
	r.atEnd(func() { sc.Cleanup("the replay ends") })
	r.stats = sc.Stats
	r.shutdown = func() { sc.Cleanup("the proxy is shutting down") } // once the shutdown grace is over
	return sc
}

// replay is one transcript's run: a scripted client POSTing to a sidecar,
// and a scripted server behind it.
type replay struct {
	t      *testing.T
	alive  func() // the replay made progress (httpx.Stall)
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
	legacy   bool          // the client speaks HTTP+SSE (2024-11-05)
	bridged  bool          // the client is a stdio client of the bridge
	lines    io.Writer     // the bridge's client side: its stdin
	endpoint string        // where it POSTs, once the event stream named it
	session  string
	posts    int
	postOf   map[string][]string // request id -> the POSTs that carried it
	readers  sync.WaitGroup
	ends     []func()             // what stops the servers, before the sidecar stops
	policy   *policy.Engine       // the transcript's, if it has one
	shutdown func()               // shuts the proxy down, as its signal's end does
	cut      func(id string)      // breaks the server's side of request id's answer
	end      func(id string)      // ends it cleanly, unanswered
	maxFrame int                  // the transcript's max-frame-size, or zero
	era      string               // the transcript's protocol revision, if it names one
	graced   bool                 // the front cancels a left request after a grace
	renamed  map[string]any       // a request's id -> its name toward a shared server (serverGets)
	bodyOf   map[string]io.Closer // request id -> the response of the POST that carried it
	left     *feed.Subscription   // the front's events, for stream_left
	// initAnswer is the server's answer to the harness's initialize, with
	// the transcript's server capabilities.
	initAnswer string
	// clientInit is that answer as the client gets it (with tasks
	// declared where the policy hosts them).
	clientInit string
	// traceParent, the transcript's, goes with every POST of the client;
	// traces records the trace of each client request's span.
	traceParent string
	// auth is the Authorization header of the client's POSTs (the auth
	// step), if any.
	auth   string
	traces tracesSeen
}

// stateless is the protocol revision without sessions, where closing a
// request's stream is its cancel.
const stateless = "2026-07-28"

// engine starts the transcript's policy, if it has one, on the replay's
// clock; it is shut down once the replay has ended.
func (r *replay) engine(tr *transcript.Transcript) {
	e, err := tr.Engine(r.clk)
	if err != nil {
		r.t.Fatal(err)
	}
	if e != nil {
		r.t.Cleanup(e.Shutdown) // registered first: runs last
		r.policy = e
	}
}

// atEnd has f run when the replay ends, before the sidecar stops; the
// last given runs first.
func (r *replay) atEnd(f func()) { r.ends = append(r.ends, f) }

func (r *replay) onEvent(ev proxy.Event) {
	// A request the proxy serves was decided when it was held: its answer
	// is no decision about a frame of a peer's.
	if (ev.From == "client" || ev.From == "server") && ev.Action != proxy.ActServed {
		r.decided.Add(1)
		select {
		case r.moved <- struct{}{}:
		default:
		}
	}
}

func (r *replay) step(st transcript.Step) {
	r.t.Helper()
	r.alive()
	switch st.Op {
	case "c>":
		r.injected += count(st.Arg)
		r.post(st.Arg)
	case "c~":
		r.injected += count(st.Arg)
		r.postHeld(st.Arg)
	case "s>":
		r.injected += count(st.Arg)
		r.send(r.serverNames(st.Arg))
	case "c<":
		got := r.client.take(r.t, "client", st.Arg)
		if !r.legacy && !r.bridged {
			r.onItsStream(got)
		}
	case "s<":
		r.serverGets(st.Arg)
	case "sync":
		r.sync()
	case "stats":
		if err := transcript.CheckStats(r.stats(), st.Arg); err != nil {
			r.t.Fatalf("steps line %d: %v", st.Line, err)
		}
	case "clock":
		d, _ := st.Moved()
		r.clk.Advance(d)
	case "close":
		r.close(st)
	case "auth":
		r.auth = st.Arg
	case "trace":
		r.trace(st)
	case "cut":
		r.cut(st.Arg)
	case "end":
		r.end(st.Arg)
	case "shutdown":
		r.shutdown()
	}
}

// close closes the response of the POST that carried the request st names,
// as a client leaving its stream, and returns once the front has seen it
// go: its stream_left event (then, with a grace, the grace's timer).
func (r *replay) close(st transcript.Step) {
	body := r.bodyOf[st.Arg]
	if body == nil {
		r.t.Fatalf("steps line %d: no POST carried request %s", st.Line, st.Arg)
	}
	armed := r.clk.Armed()
	body.Close()
	deadline := time.After(10 * time.Second)
	// In 2026-07-28 the close is the cancel: once it is accepted too (a
	// shared server's session decides it after the front saw the close),
	// the policy has armed what it starts (a re-issue's grace).
	cancels := r.era == stateless
	for left := false; !left || cancels; {
		select {
		case line, ok := <-r.left.Lines():
			left = left || ok && strings.Contains(string(line), `"event":"`+string(feed.StreamLeft)+`"`)
			if cancels && ok && strings.Contains(string(line), `"event":"`+string(feed.CancelAccepted)+`"`) {
				cancels = false
				if strings.Contains(string(line), `"from":"client"`) {
					// A shared server's session decides the close as a
					// client's cancel: a decision the steps did not inject.
					r.injected++
				}
			}
		case <-deadline:
			r.t.Fatalf("steps line %d: the front did not see the client leave", st.Line)
		}
	}
	if r.graced && r.era != stateless {
		select { // the grace's timer is set by then
		case <-armed:
		case <-deadline:
			r.t.Fatalf("steps line %d: the disconnect grace did not start", st.Line)
		}
	}
}

// serverGets takes want from what reached the server. In a 2026-07-28
// transcript a request may reach a server the proxy shares between clients
// (a stdio or HTTP+SSE server, for requests without a session) under a name
// of the proxy's: the replay follows the rename, taking the request under
// any id and naming it so in what the server then gets and sends.
func (r *replay) serverGets(want string) {
	r.t.Helper()
	want = r.serverNames(want)
	if r.era != stateless {
		r.server.take(r.t, "server", want)
		return
	}
	var w map[string]any
	json.Unmarshal([]byte(want), &w)
	id, isRequest := w["id"], w["method"] != nil && w["id"] != nil
	got := r.server.takeMatch(r.t, "server", want, func(raw []byte) bool {
		if transcript.SameJSON(raw, want) {
			return true
		}
		var g map[string]any
		if !isRequest || json.Unmarshal(raw, &g) != nil || g["id"] == nil {
			return false
		}
		w["id"] = g["id"]
		defer func() { w["id"] = id }()
		if tok := progressToken(w); tok != nil && progressToken(g) != nil { // renamed too
			meta := w["params"].(map[string]any)["_meta"].(map[string]any)
			meta["progressToken"] = progressToken(g)
			defer func() { meta["progressToken"] = tok }()
		}
		b, _ := json.Marshal(w)
		return transcript.SameJSON(raw, string(b))
	})
	if isRequest {
		var g map[string]any
		json.Unmarshal(got.raw, &g)
		if !reflect.DeepEqual(g["id"], id) {
			r.renamed[fmt.Sprint(id)] = g["id"]
		}
		if tok, gotTok := progressToken(w), progressToken(g); tok != nil && !reflect.DeepEqual(tok, gotTok) {
			r.renamed["token "+fmt.Sprint(tok)] = gotTok
		}
	}
}

// progressToken returns the progress token of a request decoded from
// JSON, or nil.
func progressToken(m map[string]any) any {
	p, _ := m["params"].(map[string]any)
	meta, _ := p["_meta"].(map[string]any)
	return meta["progressToken"]
}

// serverNames returns frame with the requests the proxy renamed toward a
// shared server named as the server knows them: an answer's id, a cancel's
// requestId.
func (r *replay) serverNames(frame string) string {
	if len(r.renamed) == 0 {
		return frame
	}
	var m map[string]any
	if json.Unmarshal([]byte(frame), &m) != nil {
		return frame
	}
	if id, ok := r.renamed[fmt.Sprint(m["id"])]; ok && m["method"] == nil {
		m["id"] = id
	}
	if p, ok := m["params"].(map[string]any); ok && m["method"] == framing.MethodCancelled {
		if id, ok := r.renamed[fmt.Sprint(p["requestId"])]; ok {
			p["requestId"] = id
		}
	}
	if p, ok := m["params"].(map[string]any); ok && m["method"] == framing.MethodProgress {
		if tok, ok := r.renamed["token "+fmt.Sprint(p["progressToken"])]; ok {
			p["progressToken"] = tok
		}
	}
	b, _ := json.Marshal(m)
	return string(b)
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
	if r.legacy {
		r.openLegacy()
		return
	}
	if r.bridged {
		r.post(initRequest)
		r.client.take(r.t, "client", r.clientInit)
		return
	}
	resp := r.do(http.MethodPost, r.url, initRequest)
	r.session = resp.Header.Get("Mcp-Session-Id")
	if r.session == "" {
		r.t.Fatalf("initialize: no session (HTTP %d)", resp.StatusCode)
	}
	r.readAll("initialize", resp)
	r.client.take(r.t, "client", r.clientInit)
	get := r.do(http.MethodGet, r.url, "")
	if get.StatusCode != http.StatusOK {
		r.t.Fatalf("GET stream: HTTP %d", get.StatusCode)
	}
	r.readAll("get", get)
}

// openLegacy opens an HTTP+SSE session: the event stream, whose first
// event names where to POST, then the harness's initialize.
func (r *replay) openLegacy() {
	r.t.Helper()
	r.openEventStream()
	r.post(initRequest)
	r.client.take(r.t, "client", r.clientInit)
}

// openEventStream opens an HTTP+SSE client's event stream, and learns from
// its first event where to POST.
func (r *replay) openEventStream() {
	r.t.Helper()
	resp := r.do(http.MethodGet, strings.TrimSuffix(r.url, "/mcp")+"/sse", "")
	rd := framing.NewSSEReader(resp.Body, 0)
	ev, err := rd.Next()
	if err != nil || string(ev.Type) != "endpoint" {
		r.t.Fatalf("no endpoint event: %v", err)
	}
	r.endpoint = strings.TrimSuffix(r.url, "/mcp") + string(ev.Data)
	r.readEvents("the event stream", resp, rd)
}

// initRequest is the harness's initialize.
const initRequest = transcript.Initialize

// post sends a frame of the client's, and reads what answers it.
func (r *replay) post(frame string) {
	r.t.Helper()
	if r.bridged { // one line on the bridge's stdin; answers come on its stdout
		if _, err := io.WriteString(r.lines, frame+"\n"); err != nil {
			r.t.Fatalf("the bridge's stdin: %v", err)
		}
		return
	}
	if r.legacy { // answers come on the event stream
		resp := r.do(http.MethodPost, r.endpoint, frame)
		resp.Body.Close()
		if resp.StatusCode != http.StatusAccepted {
			r.t.Fatalf("POST %s: HTTP %d", frame, resp.StatusCode)
		}
		return
	}
	r.posts++
	where := fmt.Sprintf("POST %d", r.posts)
	var f framing.Frame
	if err := f.Parse([]byte(frame)); err == nil {
		for i := range f.Msgs {
			if m := &f.Msgs[i]; m.Kind == framing.KindRequest {
				r.postOf[m.ID.String()] = append(r.postOf[m.ID.String()], where)
			}
		}
	} else if id, isResponse, ok := framing.PeekID([]byte(frame)); ok && !isResponse {
		r.postOf[id.String()] = append(r.postOf[id.String()], where) // a refused request: answered under its id
	}
	resp := r.do(http.MethodPost, r.url, frame)
	if id := resp.Header.Get("Mcp-Session-Id"); r.session == "" && id != "" {
		r.session = id // the steps' own initialize opened the session
	}
	for i := range f.Msgs {
		if m := &f.Msgs[i]; m.Kind == framing.KindRequest {
			r.bodyOf[m.ID.String()] = resp.Body
		}
	}
	r.readAll(where, resp)
}

// postHeld POSTs frame, a request the proxy holds (its POST is answered
// once it is dispatched or withdrawn), and returns once the proxy has
// decided it; what answers it is read as it comes.
func (r *replay) postHeld(frame string) {
	r.t.Helper()
	if r.legacy || r.bridged { // lines: nothing waits
		r.post(frame)
		return
	}
	r.posts++
	where := fmt.Sprintf("POST %d", r.posts)
	if id, isResponse, ok := framing.PeekID([]byte(frame)); ok && !isResponse {
		r.postOf[id.String()] = append(r.postOf[id.String()], where)
	}
	req := r.request(http.MethodPost, r.url, frame)
	r.readers.Add(1)
	go func() {
		defer r.readers.Done()
		resp, err := testClient.Do(req)
		if err != nil {
			r.t.Errorf("POST %s: %v", frame, err)
			return
		}
		r.readAll(where, resp)
	}()
	deadline := time.After(10 * time.Second)
	for r.decided.Load() < r.injected {
		select {
		case <-r.moved:
		case <-deadline:
			r.t.Fatalf("POST %s: not decided in 10s", frame)
		}
	}
}

func (r *replay) do(method, url, body string) *http.Response {
	r.t.Helper()
	resp, err := testClient.Do(r.request(method, url, body))
	if err != nil {
		r.t.Fatalf("%s: %v", method, err)
	}
	return resp
}

// request is a request of the client's.
func (r *replay) request(method, url, body string) *http.Request {
	r.t.Helper()
	req, err := http.NewRequest(method, url, strings.NewReader(body))
	if err != nil {
		r.t.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Accept", "application/json, text/event-stream")
	if r.traceParent != "" && method == http.MethodPost {
		req.Header.Set("traceparent", r.traceParent)
	}
	if r.auth != "" && method == http.MethodPost {
		req.Header.Set("Authorization", r.auth)
	}
	if !r.legacy {
		req.Header.Set("MCP-Protocol-Version", cmp.Or(r.era, "2025-06-18"))
	}
	if r.era == stateless { // the headers that mirror the body
		var f framing.Frame
		if f.Parse([]byte(body)) == nil && !f.Batch {
			req.Header.Set("Mcp-Method", f.Msgs[0].Method)
			if name, ok := upstream.MirroredName(&f.Msgs[0]); ok && name != "" { // a tool's, a resource's, a task's
				req.Header.Set("Mcp-Name", name)
			}
		}
	}
	if r.session != "" {
		req.Header.Set("Mcp-Session-Id", r.session)
	}
	return req
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
	r.readEvents(where, resp, framing.NewSSEReader(resp.Body, 0))
}

// readEvents puts each event's data to the client's inbox, as it comes.
func (r *replay) readEvents(where string, resp *http.Response, rd *framing.SSEReader) {
	r.readers.Add(1)
	go func() {
		defer r.readers.Done()
		defer resp.Body.Close()
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
	events, err := feed.Open("")
	if err != nil {
		r.t.Fatal(err)
	}
	r.t.Cleanup(func() { events.Close() })
	r.left = events.Subscribe(4096) // more than a transcript makes: none is dropped
	sc.Logger = zap.New(zapcore.NewTee(zaptest.NewLogger(r.t).Core(), events.Core()))
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
		for i := len(r.ends) - 1; i >= 0; i-- {
			r.ends[i]()
		}
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
	return b.takeMatch(t, who, want, func(raw []byte) bool { return transcript.SameJSON(raw, want) })
}

// takeMatch is take, with what matches want said by match.
func (b *inbox) takeMatch(t *testing.T, who, want string, match func([]byte) bool) item {
	t.Helper()
	deadline := time.After(10 * time.Second)
	for {
		b.mu.Lock()
		for i, it := range b.items {
			if match(it.raw) {
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
