package httpx_test

import (
	"bytes"
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"
	"go.uber.org/zap/zaptest"

	"github.com/mcp-cancel-proxy/mcp-cancel-proxy/policy"
	"github.com/mcp-cancel-proxy/mcp-cancel-proxy/proxy/httpx"
)

// spy records the bodies of the POSTs that reach the upstream.
type spy struct {
	mu     sync.Mutex
	bodies []string
}

func (sp *spy) saw(part string) bool {
	sp.mu.Lock()
	defer sp.mu.Unlock()
	for _, b := range sp.bodies {
		if strings.Contains(b, part) {
			return true
		}
	}
	return false
}

// spied puts a recording reverse proxy in front of the upstream at target.
func spied(t *testing.T, target string) (string, *spy) {
	sp := &spy{}
	u, _ := url.Parse(target)
	rp := httputil.NewSingleHostReverseProxy(u)
	rp.FlushInterval = -1
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		sp.mu.Lock()
		sp.bodies = append(sp.bodies, string(body))
		sp.mu.Unlock()
		r.Body = io.NopCloser(bytes.NewReader(body))
		rp.ServeHTTP(w, r)
	}))
	t.Cleanup(srv.Close)
	return srv.URL + u.Path, sp
}

// TestMaxConcurrentThroughTheSidecar: a request beyond the rule's cap waits
// in the sidecar; cancelled while waiting, it is never sent upstream and
// its stream ends without an answer; the next one goes once a slot frees.
func TestMaxConcurrentThroughTheSidecar(t *testing.T) {
	watchdog(t, 30*time.Second)
	up := newUpstream(t, &mcp.StreamableHTTPOptions{})
	target, sp := spied(t, up.url)
	p := policy.Defaults()
	p.Rules = []policy.Rule{{Tool: "wait_cancel", MaxConcurrent: 1}}
	waits := &waitMetrics{waiting: make(chan struct{}, 4)}
	e, err := policy.New(policy.Options{Policy: p, Audit: policy.Audit{Path: "off"}, Logger: zaptest.NewLogger(t), Metrics: waits})
	if err != nil {
		t.Fatal(err)
	}
	defer e.Shutdown()
	c := &rawClient{t: t, url: serveSidecar(t, &httpx.Sidecar{Upstream: target, Governor: e.Governor})}
	c.initialize()
	first := events(c.post(`{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"wait_cancel","arguments":{"key":"a"},"_meta":{"progressToken":"a"}}}`).Body)
	<-up.started
	second := make(chan *http.Response, 1)
	go func() {
		second <- c.post(`{"jsonrpc":"2.0","id":2,"method":"tools/call","params":{"name":"wait_cancel","arguments":{"key":"b"}}}`)
	}()
	// The second waits in the sidecar; its cancel withdraws it.
	<-waits.waiting
	c.post(`{"jsonrpc":"2.0","method":"notifications/cancelled","params":{"requestId":2}}`).Body.Close()
	resp := <-second
	body, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != 200 || len(bytes.TrimSpace(body)) != 0 {
		t.Errorf("the withdrawn request's answer: %d %q, want an empty stream", resp.StatusCode, body)
	}
	c.post(`{"jsonrpc":"2.0","method":"notifications/cancelled","params":{"requestId":1}}`).Body.Close()
	for range first {
	}
	third := events(c.post(`{"jsonrpc":"2.0","id":3,"method":"tools/call","params":{"name":"wait_cancel","arguments":{"key":"c"},"_meta":{"progressToken":"c"}}}`).Body)
	<-up.started
	c.post(`{"jsonrpc":"2.0","method":"notifications/cancelled","params":{"requestId":3}}`).Body.Close()
	for range third {
	}
	if sp.saw(`"key":"b"`) || sp.saw(`"requestId":2`) {
		t.Error("the request cancelled while waiting, or its cancel, reached the upstream")
	}
	if !sp.saw(`"key":"c"`) {
		t.Error("the next request never went")
	}
}

// waitMetrics tells when a request starts waiting for a slot.
type waitMetrics struct{ waiting chan struct{} }

func (w *waitMetrics) DeadlineFired()       {}
func (w *waitMetrics) HookRan(string, bool) {}
func (w *waitMetrics) Orphan()              {}
func (w *waitMetrics) Orphans(int)          {}
func (w *waitMetrics) Forwarded(bool)       {}
func (w *waitMetrics) CancelSettled(bool)   {}
func (w *waitMetrics) AuditFailed()         {}
func (w *waitMetrics) StoreDamaged()        {}
func (w *waitMetrics) Waiting(delta int) {
	if delta > 0 {
		w.waiting <- struct{}{}
	}
}

// TestLateJSONAnswerIsStillRead: with a JSON-answering upstream, a
// cancelled request's POST is answered after the grace, but the upstream's
// answer is still read, so that its late result reaches the hook.
func TestLateJSONAnswerIsStillRead(t *testing.T) {
	watchdog(t, 30*time.Second)
	started, release := make(chan struct{}, 1), make(chan struct{})
	s := mcp.NewServer(&mcp.Implementation{Name: "gate", Version: "1"}, nil)
	mcp.AddTool(s, &mcp.Tool{Name: "gate"}, func(ctx context.Context, req *mcp.CallToolRequest, _ struct{}) (*mcp.CallToolResult, any, error) {
		started <- struct{}{}
		<-release // deaf to the cancel
		return &mcp.CallToolResult{Content: []mcp.Content{&mcp.TextContent{Text: "done anyway"}}}, nil, nil
	})
	srv := httptest.NewServer(mcp.NewStreamableHTTPHandler(func(*http.Request) *mcp.Server { return s }, &mcp.StreamableHTTPOptions{JSONResponse: true}))
	t.Cleanup(srv.Close) // after the client has ended its session
	p := policy.Defaults()
	p.Rules = []policy.Rule{{Tool: "gate", OnLateResult: &policy.Hook{Exec: []string{"true"}}}}
	recs := make(chan *policy.Record, 4)
	e, err := policy.New(policy.Options{Policy: p, Audit: policy.Audit{Path: "off"}, Logger: zaptest.NewLogger(t),
		OnAudit: func(r *policy.Record) { recs <- r }})
	if err != nil {
		t.Fatal(err)
	}
	defer e.Shutdown()
	c := &rawClient{t: t, url: serveSidecar(t, &httpx.Sidecar{Upstream: srv.URL, Governor: e.Governor, LateWatch: 20 * time.Second})}
	c.initialize()
	answer := make(chan *http.Response, 1)
	go func() {
		answer <- c.post(`{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"gate"}}`)
	}()
	<-started
	c.post(`{"jsonrpc":"2.0","method":"notifications/cancelled","params":{"requestId":1}}`).Body.Close()
	resp := <-answer // after the grace, before the tool ends
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK || resp.Header.Get("Content-Type") != "text/event-stream" {
		t.Errorf("the cancelled call's POST: %d %q, want 200 and an empty event stream (never 202)", resp.StatusCode, resp.Header.Get("Content-Type"))
	}
	close(release)
	if r := <-recs; r.Status != policy.StatusCompensated || r.Late == nil {
		t.Errorf("audit: %+v", r)
	}
}
