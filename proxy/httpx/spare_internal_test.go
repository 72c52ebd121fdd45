package httpx

import (
	"bytes"
	"net/netip"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/valyala/fasthttp"
	"go.uber.org/zap/zaptest"

	"github.com/mcp-cancel-proxy/mcp-cancel-proxy/framing"
	"github.com/mcp-cancel-proxy/mcp-cancel-proxy/policy"
)

// spareSidecar serves a sidecar in front of up, with the options set, and
// returns its URL and what its requests' sessions report when done
// (requestSessions.onDone: kept or not).
func spareSidecar(t *testing.T, sc *Sidecar) (string, chan bool) {
	done := make(chan bool, 16)
	sc.own.onDone = func(kept bool) { done <- kept }
	sc.UpstreamTransport, sc.Logger = TransportStreamable, zaptest.NewLogger(t)
	h, err := sc.Handler()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { sc.Cleanup("the test ends") })
	return serveOn(t, h), done
}

// postCall POSTs a tools/call without a session, of revision version,
// and returns the answer's body, which must come with 200.
func postCall(t *testing.T, front, version string, id int, tool string) string {
	t.Helper()
	req, resp := fasthttp.AcquireRequest(), fasthttp.AcquireResponse()
	defer fasthttp.ReleaseRequest(req)
	defer fasthttp.ReleaseResponse(resp)
	req.SetRequestURI(front)
	req.Header.SetMethod(fasthttp.MethodPost)
	req.Header.SetContentType("application/json")
	req.Header.Set("Accept", "application/json, text/event-stream")
	req.Header.Set("MCP-Protocol-Version", version)
	meta := ""
	if version == string(framing.RevisionStateless) {
		req.Header.Set("Mcp-Method", "tools/call")
		req.Header.Set("Mcp-Name", tool)
		meta = `,"_meta":{"io.modelcontextprotocol/protocolVersion":"2026-07-28","io.modelcontextprotocol/clientCapabilities":{}}`
	}
	req.SetBodyString(`{"jsonrpc":"2.0","id":` + strconv.Itoa(id) + `,"method":"tools/call","params":{"name":"` + tool + `"` + meta + `}}`)
	if err := (&fasthttp.Client{}).Do(req, resp); err != nil || resp.StatusCode() != fasthttp.StatusOK {
		t.Fatalf("call %d: %v, status %d: %s", id, err, resp.StatusCode(), resp.Body())
	}
	return string(resp.Body())
}

// discover answers the sidecar's server/discover, if ctx is it, as an
// upstream of the 2025 revisions does, and reports whether it was.
func discover(ctx *fasthttp.RequestCtx) bool {
	var f framing.Frame
	if f.Parse(ctx.PostBody()) != nil || f.Msgs[0].Method != "server/discover" {
		return false
	}
	ctx.SetContentType("application/json")
	ctx.SetBodyString(`{"jsonrpc":"2.0","id":` + f.Msgs[0].ID.String() + `,"error":{"code":-32601,"message":"Method not found"}}`)
	return true
}

// answerText is an upstream's JSON answer to id with text.
func answerText(ctx *fasthttp.RequestCtx, id, text string) {
	ctx.SetContentType("application/json")
	ctx.SetBodyString(`{"jsonrpc":"2.0","id":` + id + `,"result":{"content":[{"type":"text","text":"` + text + `"}]}}`)
}

// TestSpentSessionServesTheNext: the session of a request without a
// session, answered and done, is kept and serves the next such request,
// renewed: each of four calls with the same id, in both eras, gets its own
// answer (its tool's name, from the upstream), and each session is kept at
// its end.
func TestSpentSessionServesTheNext(t *testing.T) {
	Watchdog(t, 30*time.Second)
	up := serveOn(t, func(ctx *fasthttp.RequestCtx) {
		var f framing.Frame
		if discover(ctx) || f.Parse(ctx.PostBody()) != nil {
			return
		}
		answerText(ctx, "1", f.Msgs[0].Name())
	})
	front, done := spareSidecar(t, &Sidecar{Upstream: up})
	for i, version := range []string{"2025-06-18", "2026-07-28", "2025-06-18", "2026-07-28"} {
		tool := "tool" + strconv.Itoa(i+1)
		want := `"text":"` + tool + `"`
		if got := postCall(t, front, version, 1, tool); !bytes.Contains([]byte(got), []byte(want)) {
			t.Fatalf("call %d (%s): %s, want %s", i+1, version, got, want)
		}
		if kept := <-done; !kept {
			t.Fatalf("call %d (%s): its session was not kept", i+1, version)
		}
	}
}

// TestReaderHoldsTheSession: a session that a reader of the request
// sessions holds (the status page's count, a shutdown's cancel) when its
// request ends is kept only once the reader lets it go.
func TestReaderHoldsTheSession(t *testing.T) {
	Watchdog(t, 30*time.Second)
	arrived, release := make(chan struct{}), make(chan struct{})
	up := serveOn(t, func(ctx *fasthttp.RequestCtx) {
		if discover(ctx) {
			return
		}
		arrived <- struct{}{}
		<-release
		answerText(ctx, "1", "done")
	})
	sc := &Sidecar{Upstream: up}
	front, done := spareSidecar(t, sc)
	answered := make(chan string, 1)
	go func() { answered <- postCall(t, front, "2025-06-18", 1, "echo") }()
	<-arrived
	held := sc.own.all()
	if len(held) != 1 || sc.InFlight() != 1 {
		t.Fatalf("%d request sessions, %d in flight, want 1 and 1", len(held), sc.InFlight())
	}
	close(release)
	if got := <-answered; !bytes.Contains([]byte(got), []byte(`"done"`)) {
		t.Fatalf("the call: %s", got)
	}
	// The request was done before its answer was written.
	if len(done) != 0 {
		t.Fatal("the session was let go while a reader held it")
	}
	sc.own.release(held)
	select {
	case kept := <-done:
		if !kept {
			t.Fatal("the session was not kept once its reader let go")
		}
	default:
		t.Fatal("the session was not let go with its reader")
	}
}

// TestCancelledSessionIsNotKept: the session of a request without a
// session whose deadline passed is not kept (a cancel's work, and the
// POST's answer, may still come into it), and the next request with the
// same id gets its own answer, not the late one.
func TestCancelledSessionIsNotKept(t *testing.T) {
	Watchdog(t, 30*time.Second)
	slowGo, quit := make(chan struct{}, 2), make(chan struct{})
	up := serveOn(t, func(ctx *fasthttp.RequestCtx) {
		body := ctx.PostBody()
		switch {
		case discover(ctx):
		case bytes.Contains(body, []byte(`notifications/cancelled`)): // the deadline's, which the server ignores
			ctx.SetStatusCode(fasthttp.StatusAccepted)
		case bytes.Contains(body, []byte(`"slow"`)):
			select {
			case <-slowGo:
			case <-quit: // the test failed
			}
			answerText(ctx, "7", "late")
		default:
			slowGo <- struct{}{} // the slow call's answer comes while this one is in flight
			answerText(ctx, "7", "fast")
		}
	})
	t.Cleanup(func() { close(quit) }) // before the upstream's shutdown, which waits for its handlers
	timeout := 20 * time.Millisecond  // passes: the slow call waits for the next one
	p := policy.Defaults()
	p.Rules = []policy.Rule{{Tool: "slow", Timeout: &timeout}}
	e, err := policy.New(policy.Options{Policy: p, Audit: policy.Audit{Path: "off"}, Logger: zaptest.NewLogger(t)})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(e.Shutdown)
	sc := &Sidecar{Upstream: up, Governor: e.Governor}
	front, done := spareSidecar(t, sc)
	for _, version := range []string{"2025-06-18", "2026-07-28"} {
		if got := postCall(t, front, version, 7, "slow"); !bytes.Contains([]byte(got), []byte(`-32001`)) {
			t.Fatalf("%s: the slow call: %s, want the deadline's error", version, got)
		}
		if kept := <-done; kept {
			t.Fatalf("%s: the session of a call whose deadline passed was kept", version)
		}
		if got := postCall(t, front, version, 7, "fast"); !bytes.Contains([]byte(got), []byte(`"fast"`)) {
			t.Fatalf("%s: the next call with the same id: %s, want its own answer", version, got)
		}
		if kept := <-done; !kept {
			t.Fatalf("%s: the next call's session was not kept", version)
		}
	}
}

// TestSessionsReusedUnderLoad: clients without a session call at once, all
// with the same id, in both eras, some calls past their deadline, whose
// answers come late, once their clients have the timeout error, while
// other calls are in flight: every answered call gets its own answer,
// every other the proxy's timeout error, while spent sessions serve the
// next calls (a late answer read into a session that served another call
// would answer that call, or end it).
func TestSessionsReusedUnderLoad(t *testing.T) {
	Watchdog(t, 60*time.Second)
	quit := make(chan struct{})
	var late sync.Map // a slow call's tool: closed once its client has the timeout error
	lateFor := func(tool string) chan struct{} {
		ch, _ := late.LoadOrStore(tool, make(chan struct{}))
		return ch.(chan struct{})
	}
	up := serveOn(t, func(ctx *fasthttp.RequestCtx) {
		var f framing.Frame
		switch {
		case discover(ctx), f.Parse(ctx.PostBody()) != nil:
		case f.Msgs[0].Method == framing.MethodCancelled:
			ctx.SetStatusCode(fasthttp.StatusAccepted)
		case strings.HasPrefix(f.Msgs[0].Name(), "slow"):
			select {
			case <-lateFor(f.Msgs[0].Name()): // late, and read for the hook
			case <-quit:
			}
			answerText(ctx, "1", f.Msgs[0].Name())
		default:
			answerText(ctx, "1", f.Msgs[0].Name())
		}
	})
	t.Cleanup(func() { close(quit) }) // before the upstream's shutdown, which waits for its handlers
	timeout := 20 * time.Millisecond
	p := policy.Defaults()
	p.Rules = []policy.Rule{{Tool: "slow*", Timeout: &timeout, OnLateResult: &policy.Hook{Exec: []string{"true"}}}}
	e, err := policy.New(policy.Options{Policy: p, Audit: policy.Audit{Path: "off"}, Logger: zaptest.NewLogger(t)})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(e.Shutdown)
	var kept atomic.Int64
	sc := &Sidecar{Upstream: up, UpstreamTransport: TransportStreamable, Logger: zaptest.NewLogger(t), Governor: e.Governor,
		LateWatch: time.Minute}
	sc.own.onDone = func(k bool) {
		if k {
			kept.Add(1)
		}
	}
	h, err := sc.Handler()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { sc.Cleanup("the test ends") })
	front := serveOn(t, h)
	var wg sync.WaitGroup
	for g := range 6 {
		wg.Go(func() {
			for i := range 30 {
				version := []string{"2025-06-18", "2026-07-28"}[(g+i)%2]
				tool, want := "tool-"+strconv.Itoa(g)+"-"+strconv.Itoa(i), ""
				if i%5 == 4 {
					tool = "slow-" + strconv.Itoa(g) + "-" + strconv.Itoa(i)
					want = `-32001`
				} else {
					want = `"text":"` + tool + `"`
				}
				got := postCall(t, front, version, 1, tool)
				if strings.HasPrefix(tool, "slow") {
					close(lateFor(tool)) // its answer comes now, into its session, while others run
				}
				if !strings.Contains(got, want) {
					t.Errorf("%s (%s): %s, want %s", tool, version, got, want)
					return
				}
			}
		})
	}
	wg.Wait()
	if kept.Load() == 0 {
		t.Error("no spent session was kept")
	}
}

// TestSessionDoneOnce: a request's session told done twice is kept once:
// kept twice, it would serve two requests at once.
func TestSessionDoneOnce(t *testing.T) {
	sc := &Sidecar{Upstream: "http://127.0.0.1:1/mcp", UpstreamTransport: TransportStreamable, Logger: zaptest.NewLogger(t)}
	if _, err := sc.Handler(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { sc.Cleanup("the test ends") })
	kept := 0
	sc.own.onDone = func(k bool) {
		if k {
			kept++
		}
	}
	sess := newSession("", sc, true, netip.Addr{})
	sc.own.add(sess)
	sc.own.done(sess)
	sc.own.done(sess)
	if kept != 1 {
		t.Fatalf("the session was kept %d times, want once", kept)
	}
}
