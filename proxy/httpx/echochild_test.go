package httpx_test

import (
	"bufio"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/valyala/fasthttp"
	"go.uber.org/goleak"
	"go.uber.org/zap"

	"github.com/mcp-cancel-proxy/mcp-cancel-proxy/internal/leaktest"
	"github.com/mcp-cancel-proxy/mcp-cancel-proxy/proxy/child"
	"github.com/mcp-cancel-proxy/mcp-cancel-proxy/proxy/httpx"
	"github.com/mcp-cancel-proxy/mcp-cancel-proxy/proxy/upstream"
)

// echoChildArg makes this test binary an echo child (see echoChild).
const echoChildArg = "mcp-echo-child"

func TestMain(m *testing.M) {
	if len(os.Args) > 1 && os.Args[1] == echoChildArg {
		echoChild(os.Stdin, os.Stdout)
		os.Exit(0)
	}
	code := m.Run()
	if fuzzSidecar.stop != nil {
		fuzzSidecar.stop()
	}
	if err := goleak.Find(processWide...); err != nil && code == 0 {
		fmt.Fprintln(os.Stderr, "goleak:", err)
		code = 1
	}
	os.Exit(code)
}

// processWide are the goroutines that outlive tests by design: fasthttp's
// dialer cache, date clock and client and server housekeeping. Every other
// goroutine a test starts must end with it: a sidecar's close watcher ends
// with its Cleanup.
var processWide = leaktest.ProcessWide

// echoChild is a real stdio MCP server process (this test binary run with
// echoChildArg) that reports exactly what it received: it keeps every line
// read from stdin, and answers a ping whose params say "marker" with those
// lines, then forgets them. Other requests, batched or not, get an empty
// result, except a tools/call of "hang", which is never answered, and a
// subscriptions/listen, which is acknowledged (its subscriptionId the
// request's id) and stays open until cancelled; a tools/call of "notify"
// sends notifications/tools/list_changed to every listen open. It exits
// at stdin's end. With MCP_ECHO_RECORD set, it also appends every line to
// that file.
func echoChild(in io.Reader, out io.Writer) {
	sc := bufio.NewScanner(in)
	sc.Buffer(make([]byte, 1<<20), 64<<20)
	var lines []string
	var listens []json.RawMessage     // the ids of the subscriptions/listen open
	var record io.Writer = io.Discard // every line read, for tests that look after the child is gone
	if path := os.Getenv("MCP_ECHO_RECORD"); path != "" {
		if f, err := os.OpenFile(path, os.O_CREATE|os.O_APPEND|os.O_WRONLY, 0o600); err == nil {
			defer f.Close()
			record = f
		}
	}
	for sc.Scan() {
		fmt.Fprintf(record, "%s\n", sc.Bytes())
		var msgs []json.RawMessage
		if json.Unmarshal(sc.Bytes(), &msgs) != nil {
			msgs = []json.RawMessage{sc.Bytes()}
		}
		var m echoMessage
		if json.Unmarshal(msgs[0], &m); len(msgs) == 1 && m.isRequest() && m.Method == "ping" && m.Params.Marker {
			m.answer(out, map[string]any{"lines": lines})
			lines = nil
			continue
		}
		lines = append(lines, sc.Text())
		for _, raw := range msgs {
			var m echoMessage
			json.Unmarshal(raw, &m)
			switch {
			// A request so named is answered below, as a server answers
			// one (method not found): unanswered, FuzzChildPost's POST of
			// it waited for ever (in CI's fuzz stage).
			case m.Method == "notifications/cancelled" && !m.isRequest():
				listens = slices.DeleteFunc(listens, func(id json.RawMessage) bool { return string(id) == string(m.Params.RequestID) })
			case m.Method == "subscriptions/listen":
				listens = append(listens, m.ID)
				subscriptionNote(out, "notifications/subscriptions/acknowledged", m.ID)
			case m.Method == "tools/call" && m.Params.Name == "notify":
				for _, id := range listens {
					subscriptionNote(out, "notifications/tools/list_changed", id)
				}
				m.answer(out, struct{}{})
			case !m.isRequest() || m.Method == "tools/call" && m.Params.Name == "hang":
			case m.Method == "initialize":
				m.answer(out, map[string]any{"protocolVersion": "2025-06-18", "capabilities": map[string]any{},
					"serverInfo": map[string]any{"name": "echo", "version": "1"}})
			default:
				m.answer(out, struct{}{})
			}
		}
	}
}

// echoMessage is what the echo child reads of a message.
type echoMessage struct {
	ID     json.RawMessage `json:"id"`
	Method string          `json:"method"`
	Params struct {
		Marker    bool            `json:"marker"`
		Name      string          `json:"name"`
		RequestID json.RawMessage `json:"requestId"`
	} `json:"params"`
}

// subscriptionNote writes a notification of the subscription whose
// listen request had id.
func subscriptionNote(out io.Writer, method string, id json.RawMessage) {
	fmt.Fprintf(out, `{"jsonrpc":"2.0","method":%q,"params":{"_meta":{"io.modelcontextprotocol/subscriptionId":%s}}}`+"\n", method, id)
}

func (m *echoMessage) isRequest() bool { return len(m.ID) > 0 && m.Method != "" }

func (m *echoMessage) answer(out io.Writer, result any) {
	b, _ := json.Marshal(map[string]any{"jsonrpc": "2.0", "id": m.ID, "result": result})
	fmt.Fprintf(out, "%s\n", b)
}

// childSidecar serves a Sidecar whose sessions are echo children (unless
// cs names another command) until the test ends; tune, if given, sets the
// sidecar's fields.
func childSidecar(t testing.TB, cs *httpx.Children, tune ...func(*httpx.Sidecar)) string {
	url, stop, err := serveChildSidecar(cs, tune...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(stop)
	return url
}

// serveChildSidecar serves a Sidecar whose sessions are echo children, on
// a loopback port, and returns its URL and how to stop it.
func serveChildSidecar(cs *httpx.Children, tune ...func(*httpx.Sidecar)) (url string, stop func(), err error) {
	if cs.Dial == nil {
		cs.Dial = &upstream.Command{Argv: []string{os.Args[0], echoChildArg}}
	}
	if c, ok := cs.Dial.(*upstream.Command); ok && c.Options.TermAfter == 0 {
		c.Options = child.Options{TermAfter: time.Second, KillAfter: time.Second}
	}
	sc := &httpx.Sidecar{Children: cs, CheckHost: true, CancelGrace: 50 * time.Millisecond, Logger: zap.NewNop()}
	for _, f := range tune {
		f(sc)
	}
	h, err := sc.Handler()
	if err != nil {
		return "", nil, err
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return "", nil, err
	}
	srv := &fasthttp.Server{Handler: h, CloseOnShutdown: true, IdleTimeout: idleServe, MaxRequestBodySize: 16 << 20}
	go srv.Serve(ln)
	return "http://" + ln.Addr().String() + "/mcp", func() {
		sc.Cleanup("the test ends")
		srv.Shutdown()
	}, nil
}

// childClient is a client of a childSidecar.
type childClient struct {
	t       testing.TB
	url     string
	session string
}

// post POSTs body and returns the status and the whole answer.
func (c *childClient) post(body string, header ...string) (int, string) {
	c.t.Helper()
	req, _ := http.NewRequest("POST", c.url, strings.NewReader(body))
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Accept", "application/json, text/event-stream")
	if c.session != "" {
		req.Header.Set("Mcp-Session-Id", c.session)
	}
	for i := 0; i+1 < len(header); i += 2 {
		req.Header.Set(header[i], header[i+1])
	}
	resp, err := testClient.Do(req)
	if err != nil {
		c.t.Fatalf("POST %q: %v", body[:min(len(body), 200)], err)
	}
	defer resp.Body.Close()
	got, _ := io.ReadAll(resp.Body)
	if id := resp.Header.Get("Mcp-Session-Id"); id != "" && c.session == "" {
		c.session = id
	}
	return resp.StatusCode, string(got)
}

// delete ends the client's session.
func (c *childClient) delete() {
	c.t.Helper()
	req, _ := http.NewRequest("DELETE", c.url, nil)
	req.Header.Set("Mcp-Session-Id", c.session)
	resp, err := testClient.Do(req)
	if err != nil {
		c.t.Fatal(err)
	}
	resp.Body.Close()
}

func (c *childClient) initialize() {
	c.t.Helper()
	if status, body := c.post(`{"jsonrpc":"2.0","id":0,"method":"initialize","params":{"protocolVersion":"2025-06-18","capabilities":{},"clientInfo":{"name":"t","version":"1"}}}`); status != 200 || c.session == "" {
		c.t.Fatalf("initialize: %d %s", status, body)
	}
	c.received() // forget initialize
}

// received returns the lines the child has received since the last call:
// a marker ping queued behind them answers with them.
func (c *childClient) received() []string {
	c.t.Helper()
	_, body := c.post(`{"jsonrpc":"2.0","id":"m","method":"ping","params":{"marker":true}}`)
	for _, line := range strings.Split(body, "\n") { // other events may come first: errors about earlier messages
		var m struct {
			ID     string
			Result *struct{ Lines []string }
		}
		if data, ok := strings.CutPrefix(line, "data: "); ok && json.Unmarshal([]byte(data), &m) == nil && m.ID == "m" && m.Result != nil {
			return m.Result.Lines
		}
	}
	c.t.Fatalf("marker answered %q", body)
	return nil
}
