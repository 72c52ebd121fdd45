package httpx_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"maps"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"
	"go.uber.org/zap/zaptest"

	"github.com/mcp-cancel-proxy/mcp-cancel-proxy/policy"
	"github.com/mcp-cancel-proxy/mcp-cancel-proxy/proxy"
	"github.com/mcp-cancel-proxy/mcp-cancel-proxy/proxy/httpx"
	"github.com/mcp-cancel-proxy/mcp-cancel-proxy/proxy/upstream"
)

// TestUpgradedRequestsKeepTheirRevisionsShape: a 2025 client's requests
// to a stateless go-sdk server go upgraded to 2026-07-28 (so that a closed
// stream cancels them), but their answers come back as that server gives
// them to the client directly: a JSON-RPC error with HTTP 200 (the
// 2026-07-28 answer is 400), a result without resultType; with JSON and
// with event-stream answers.
func TestUpgradedRequestsKeepTheirRevisionsShape(t *testing.T) {
	t.Parallel()
	watchdog(t, 30*time.Second)
	for _, jsonMode := range []bool{false, true} {
		s := mcp.NewServer(&mcp.Implementation{Name: "echo", Version: "1"}, nil)
		mcp.AddTool(s, &mcp.Tool{Name: "echo"}, func(ctx context.Context, req *mcp.CallToolRequest, _ struct{}) (*mcp.CallToolResult, any, error) {
			return &mcp.CallToolResult{Content: []mcp.Content{&mcp.TextContent{Text: "echo"}}}, nil, nil
		})
		srv := httptest.NewServer(mcp.NewStreamableHTTPHandler(func(*http.Request) *mcp.Server { return s },
			&mcp.StreamableHTTPOptions{Stateless: true, JSONResponse: jsonMode}))
		direct := &rawClient{t: t, url: srv.URL}
		via := &rawClient{t: t, url: startSidecar(t, srv.URL, proxy.TrackerOptions{})}
		for i, body := range []string{
			`{"jsonrpc":"2.0","id":%d,"method":"tools/call","params":{"name":"echo","arguments":{}}}`,
			`{"jsonrpc":"2.0","id":%d,"method":"tools/call","params":{"name":"no_such_tool","arguments":{}}}`,
		} {
			req := fmt.Sprintf(body, i+1)
			want, wantBody := answer(direct, req)
			got, gotBody := answer(via, req)
			if got != want {
				t.Errorf("json=%v %s: HTTP %d through the sidecar (%s), %d directly (%s)", jsonMode, req, got, gotBody, want, wantBody)
			}
			if strings.Contains(gotBody, "resultType") != strings.Contains(wantBody, "resultType") {
				t.Errorf("json=%v %s: through the sidecar %s, directly %s", jsonMode, req, gotBody, wantBody)
			}
		}
		// An unknown method: the go-sdk answers a 2025 client with a text
		// 400 (no JSON-RPC at all); through the sidecar the client gets the
		// JSON-RPC error, with 200, as its revision has it.
		if code, body := answer(via, `{"jsonrpc":"2.0","id":9,"method":"no/such/method","params":{}}`); code != 200 || !strings.Contains(body, `"code":-32601`) {
			t.Errorf("json=%v: an unknown method through the sidecar: %d %s", jsonMode, code, body)
		}
		srv.Close()
	}
}

// answer posts req and returns the status and the body.
func answer(c *rawClient, req string) (int, string) {
	resp := c.post(req)
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

// TestUpgradedCallsMirrorToolParams: a 2025 client's tools/call, sent as a
// 2026-07-28 one to a stateless go-sdk server whose tool marks a parameter
// with x-mcp-header, carries its Mcp-Param header: the sidecar read the
// server's tools/list itself first (the client listed nothing), and the
// server, which checks the header, runs the call. Then a tools/list the
// client makes comes back without the tool whose annotation is invalid.
// Before, the server refused the call (-32020: the header missing).
func TestUpgradedCallsMirrorToolParams(t *testing.T) {
	t.Parallel()
	watchdog(t, 30*time.Second)
	s := mcp.NewServer(&mcp.Implementation{Name: "regions", Version: "1"}, nil)
	s.AddTool(&mcp.Tool{Name: "where", InputSchema: json.RawMessage(`{"type":"object","properties":{"region":{"type":"string","x-mcp-header":"Region"}}}`)},
		func(ctx context.Context, req *mcp.CallToolRequest) (*mcp.CallToolResult, error) {
			return &mcp.CallToolResult{Content: []mcp.Content{&mcp.TextContent{Text: "ran"}}}, nil
		})
	h := mcp.NewStreamableHTTPHandler(func(*http.Request) *mcp.Server { return s }, &mcp.StreamableHTTPOptions{Stateless: true, JSONResponse: true})
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		r.Body = io.NopCloser(bytes.NewReader(body))
		if !bytes.Contains(body, []byte(`"tools/list"`)) {
			h.ServeHTTP(w, r)
			return
		}
		// The go-sdk refuses to serve a tool with an invalid annotation:
		// one is added to its list, as a server that does not check would.
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, r)
		maps.Copy(w.Header(), rec.Header())
		w.WriteHeader(rec.Code)
		w.Write(bytes.Replace(rec.Body.Bytes(), []byte(`"tools":[`),
			[]byte(`"tools":[{"name":"bad","inputSchema":{"type":"object","properties":{"x":{"type":"number","x-mcp-header":"X"}}}},`), 1))
	}))
	defer srv.Close()
	via := &rawClient{t: t, url: startSidecar(t, srv.URL, proxy.TrackerOptions{})}
	if code, body := answer(via, `{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"where","arguments":{"region":"Zürich"}}}`); code != 200 || !strings.Contains(body, `"ran"`) {
		t.Errorf("the call: HTTP %d %s", code, body)
	}
	if code, body := answer(via, `{"jsonrpc":"2.0","id":2,"method":"tools/list","params":{}}`); code != 200 || !strings.Contains(body, `"where"`) || strings.Contains(body, `"bad"`) {
		t.Errorf("tools/list: HTTP %d %s, want where without bad", code, body)
	}
}

// TestUpgradedCallRetriedAfterHeaderMismatch: when the upstream's tools
// change (here the annotation's name), an upgraded call carrying the old
// headers is refused with -32020; the sidecar reads tools/list again and
// sends the call once more, with the new header alone, and the client gets
// the tool's answer. Before, the client got the refusal. The same with a
// deadline on the call, whose POST is sent apart from its client's
// request (and was not sent again before the retry was the upstream's).
func TestUpgradedCallRetriedAfterHeaderMismatch(t *testing.T) {
	t.Parallel()
	t.Run("plain", func(t *testing.T) { t.Parallel(); retriedAfterHeaderMismatch(t, nil) })
	t.Run("with a deadline", func(t *testing.T) {
		t.Parallel()
		timeout := 20 * time.Second
		p := policy.Defaults()
		p.Rules = []policy.Rule{{Tool: "where", Timeout: &timeout}}
		e, err := policy.New(policy.Options{Policy: p, Audit: policy.Audit{Path: "off"}, Logger: zaptest.NewLogger(t)})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(e.Shutdown)
		retriedAfterHeaderMismatch(t, e.Governor)
	})
}

func retriedAfterHeaderMismatch(t *testing.T, gov func(scope string) func(proxy.Actions) proxy.Governor) {
	watchdog(t, 30*time.Second)
	var mu sync.Mutex
	header := "Region"
	calls := 0
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		m := rpcOf(r)
		mu.Lock()
		defer mu.Unlock()
		w.Header().Set("Content-Type", "application/json")
		switch m.Method {
		case "server/discover":
			io.WriteString(w, `{"jsonrpc":"2.0","id":`+string(m.ID)+`,"result":{"supportedVersions":["2026-07-28"],"capabilities":{"tools":{}},"serverInfo":{"name":"s","version":"1"}}}`)
		case "tools/list":
			io.WriteString(w, `{"jsonrpc":"2.0","id":`+string(m.ID)+`,"result":{"resultType":"complete","tools":[{"name":"where","inputSchema":{"type":"object","properties":{"region":{"type":"string","x-mcp-header":"`+header+`"}}}}]}}`)
		case "tools/call":
			calls++
			if r.Header.Get("Mcp-Param-"+header) != "eu" || len(r.Header.Values("Mcp-Param-Region")) > 0 && header != "Region" {
				w.WriteHeader(http.StatusBadRequest)
				io.WriteString(w, `{"jsonrpc":"2.0","id":`+string(m.ID)+`,"error":{"code":-32020,"message":"Header mismatch"}}`)
				return
			}
			io.WriteString(w, `{"jsonrpc":"2.0","id":`+string(m.ID)+`,"result":{"resultType":"complete","content":[{"type":"text","text":"ran"}]}}`)
		default:
			w.WriteHeader(http.StatusNotFound)
		}
	}))
	defer srv.Close()
	via := &rawClient{t: t, url: serveSidecar(t, &httpx.Sidecar{Upstream: srv.URL, UpstreamTransport: upstream.TransportStreamable, Governor: gov})}
	const call = `{"jsonrpc":"2.0","id":%d,"method":"tools/call","params":{"name":"where","arguments":{"region":"eu"}}}`
	if code, body := answer(via, fmt.Sprintf(call, 1)); code != 200 || !strings.Contains(body, `"ran"`) {
		t.Fatalf("the first call: HTTP %d %s", code, body)
	}
	mu.Lock()
	header = "Zone"
	mu.Unlock()
	if code, body := answer(via, fmt.Sprintf(call, 2)); code != 200 || !strings.Contains(body, `"ran"`) {
		t.Errorf("the call after the tools changed: HTTP %d %s", code, body)
	}
	mu.Lock()
	defer mu.Unlock()
	if calls != 3 {
		t.Errorf("the upstream saw %d calls, want 3 (the second refused once, then sent again)", calls)
	}
}

// TestUpgradedCallsReadToolsAsTheirClient: the sidecar's own read of
// tools/list, before an upgraded call, carries the call's client's
// credentials (an upstream that wants them answers nothing without), and a
// read that failed is not made again before every call.
func TestUpgradedCallsReadToolsAsTheirClient(t *testing.T) {
	t.Parallel()
	watchdog(t, 30*time.Second)
	var lists, unauthorized atomic.Int32
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		m := rpcOf(r)
		if r.Header.Get("Authorization") != "Bearer t" && m.Method != "server/discover" { // the revision probe goes without
			unauthorized.Add(1)
			w.WriteHeader(http.StatusUnauthorized)
			return
		}
		w.Header().Set("Content-Type", "application/json")
		switch m.Method {
		case "server/discover":
			io.WriteString(w, `{"jsonrpc":"2.0","id":`+string(m.ID)+`,"result":{"supportedVersions":["2026-07-28"],"capabilities":{"tools":{}},"serverInfo":{"name":"s","version":"1"}}}`)
		case "tools/list":
			lists.Add(1)
			w.WriteHeader(http.StatusInternalServerError)
		default:
			io.WriteString(w, `{"jsonrpc":"2.0","id":`+string(m.ID)+`,"result":{"resultType":"complete","content":[{"type":"text","text":"ran"}]}}`)
		}
	}))
	defer srv.Close()
	c := &rawClient{t: t, url: startSidecar(t, srv.URL, proxy.TrackerOptions{})}
	for i := range 2 {
		req := c.request(fmt.Sprintf(`{"jsonrpc":"2.0","id":%d,"method":"tools/call","params":{"name":"where","arguments":{}}}`, i))
		req.Header.Set("Authorization", "Bearer t")
		resp, err := testClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if !strings.Contains(string(b), `"ran"`) {
			t.Fatalf("call %d: %s", i, b)
		}
	}
	if n, u := lists.Load(), unauthorized.Load(); n != 1 || u != 0 {
		t.Errorf("the upstream saw %d tools/list with the client's credentials (want 1) and %d requests without", n, u)
	}
}

// rpcMessage is what a scripted server reads of a request's JSON-RPC
// message: its id and method.
type rpcMessage struct {
	ID     json.RawMessage `json:"id"`
	Method string          `json:"method"`
}

// rpcOf reads a request's JSON-RPC message.
func rpcOf(r *http.Request) rpcMessage {
	var m rpcMessage
	json.NewDecoder(r.Body).Decode(&m)
	return m
}

// TestOneUpstreamLearnedOnce: the relay and the old clients' sessions of a
// stateless 2026-07-28 upstream are one client of it: the upstream is asked
// once whether it speaks 2026-07-28 and lists its tools once for all of
// them, and every upgraded call carries its mirrored header. Before, each
// old client's session asked and listed again (3 and 3 here).
func TestOneUpstreamLearnedOnce(t *testing.T) {
	t.Parallel()
	watchdog(t, 30*time.Second)
	var discovers, lists, calls, bare atomic.Int32
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		m := rpcOf(r)
		w.Header().Set("Content-Type", "application/json")
		result := func(body string) { io.WriteString(w, `{"jsonrpc":"2.0","id":`+string(m.ID)+`,"result":`+body+`}`) }
		switch m.Method {
		case "server/discover":
			discovers.Add(1)
			result(`{"supportedVersions":["2025-06-18","2026-07-28"],"capabilities":{"tools":{}},"serverInfo":{"name":"s","version":"1"}}`)
		case "initialize":
			result(`{"protocolVersion":"2025-06-18","capabilities":{"tools":{}},"serverInfo":{"name":"s","version":"1"}}`)
		case "tools/list":
			lists.Add(1)
			result(`{"resultType":"complete","tools":[{"name":"where","inputSchema":{"type":"object","properties":{"region":{"type":"string","x-mcp-header":"Region"}}}}]}`)
		case "tools/call":
			calls.Add(1)
			if r.Header.Get("Mcp-Param-Region") != "eu" {
				bare.Add(1)
			}
			result(`{"resultType":"complete","content":[{"type":"text","text":"ran"}]}`)
		default:
			w.WriteHeader(http.StatusAccepted)
		}
	}))
	t.Cleanup(srv.Close)
	sc := &httpx.Sidecar{Upstream: srv.URL, Legacy: &httpx.Legacy{}} // old clients reach the sidecar's own upstream
	url := serveSidecar(t, sc)
	const call = `{"jsonrpc":"2.0","id":%d,"method":"tools/call","params":{"name":"where","arguments":{"region":"eu"}}}`
	if code, body := answer(&rawClient{t: t, url: url}, fmt.Sprintf(call, 1)); code != 200 || !strings.Contains(body, `"ran"`) {
		t.Fatalf("the relayed call: HTTP %d %s", code, body)
	}
	for i := range 2 {
		c := openLegacyClient(t, strings.TrimSuffix(url, "/mcp"))
		c.post(`{"jsonrpc":"2.0","id":0,"method":"initialize","params":{"protocolVersion":"2025-06-18","capabilities":{},"clientInfo":{"name":"old","version":"1"}}}`)
		if m := <-c.msgs; m["result"] == nil {
			t.Fatalf("old client %d: initialize: %v", i, m)
		}
		c.post(`{"jsonrpc":"2.0","method":"notifications/initialized"}`)
		c.post(fmt.Sprintf(call, 2))
		if m := <-c.msgs; !strings.Contains(fmt.Sprint(m["result"]), "ran") {
			t.Fatalf("old client %d: the call: %v", i, m)
		}
	}
	if d, l, c, b := discovers.Load(), lists.Load(), calls.Load(), bare.Load(); d != 1 || l != 1 || c != 3 || b != 0 {
		t.Errorf("the upstream was asked server/discover %d times, tools/list %d, tools/call %d (%d without the header); want 1, 1, 3, 0", d, l, c, b)
	}
}
