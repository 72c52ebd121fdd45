package httpx_test

import (
	"encoding/json"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"go.uber.org/zap"

	"github.com/mcp-cancel-proxy/mcp-cancel-proxy/policy"
	"github.com/mcp-cancel-proxy/mcp-cancel-proxy/proxy/httpx"
	"github.com/mcp-cancel-proxy/mcp-cancel-proxy/proxy/stdio"
)

// TestHostedTaskFailsWithItsPOST: a hosted task's call whose POST fails
// (the upstream answers it with an HTTP error, not JSON-RPC) fails the
// task with the proxy's own error, and the client's tasks/result says so,
// instead of a task that works on until its ttl.
func TestHostedTaskFailsWithItsPOST(t *testing.T) {
	t.Parallel()
	watchdog(t, 30*time.Second)
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		switch {
		case strings.Contains(string(body), `"initialize"`):
			w.Header().Set("Mcp-Session-Id", "s")
			w.Header().Set("Content-Type", "application/json")
			io.WriteString(w, `{"jsonrpc":"2.0","id":0,"result":{"protocolVersion":"2025-11-25","capabilities":{"tools":{}},"serverInfo":{"name":"up","version":"1"}}}`)
		case strings.Contains(string(body), `"tools/call"`):
			http.Error(w, "overloaded", http.StatusServiceUnavailable)
		default:
			w.WriteHeader(http.StatusAccepted)
		}
	}))
	t.Cleanup(up.Close)
	p := policy.Defaults()
	p.Rules = []policy.Rule{{Tool: "report", Task: "host"}}
	e, err := policy.New(policy.Options{Policy: p, Audit: policy.Audit{Path: "off"}, Logger: zap.NewNop()})
	if err != nil {
		t.Fatal(err)
	}
	defer e.Shutdown()
	c := &rawClient{t: t, url: serveSidecar(t, &httpx.Sidecar{Upstream: up.URL, Governor: e.Governor})}
	c.initialize()
	taskID := hostReport(t, c)
	res := lastJSON(t, c.post(`{"jsonrpc":"2.0","id":2,"method":"tasks/result","params":{"taskId":"`+taskID+`"}}`))
	if !strings.Contains(string(res), `"error"`) || !strings.Contains(string(res), "HTTP 503") {
		t.Errorf("tasks/result: %s, want the proxy's error naming HTTP 503", res)
	}
	got := lastJSON(t, c.post(`{"jsonrpc":"2.0","id":3,"method":"tasks/get","params":{"taskId":"`+taskID+`"}}`))
	if !strings.Contains(string(got), `"status":"failed"`) {
		t.Errorf("tasks/get: %s, want failed", got)
	}
}

// lastJSON is the last JSON-RPC message of an answer, JSON or an event
// stream.
func lastJSON(t *testing.T, resp *http.Response) []byte {
	t.Helper()
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	text := string(b)
	if i := strings.LastIndex(text, "data: "); i >= 0 {
		text = text[i+len("data: "):]
	}
	return []byte(strings.TrimSpace(text))
}

// TestHostedTasksPerClient: the sidecar bounds the tasks it hosts for one
// client (limits.hosted_tasks_per_principal, an eighth of
// limits.hosted_tasks): a second session from the same address gets the
// refusal naming the setting, and a client from another address is still
// served. Before, one client could take every hosted task.
func TestHostedTasksPerClient(t *testing.T) {
	t.Parallel()
	watchdog(t, 30*time.Second)
	_, url := workingUpstream(t, 8)
	from := func(ip string) *rawClient {
		d := &net.Dialer{LocalAddr: &net.TCPAddr{IP: net.ParseIP(ip)}}
		hc := &http.Client{Transport: &http.Transport{DialContext: d.DialContext}}
		t.Cleanup(hc.CloseIdleConnections)
		c := &rawClient{t: t, url: url, hc: hc}
		c.initialize()
		return c
	}
	call := `{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"report","task":{}}}`
	if got := lastJSON(t, from("127.0.0.1").post(call)); !strings.Contains(string(got), `"taskId"`) {
		t.Fatalf("the first task: %s", got)
	}
	if got := lastJSON(t, from("127.0.0.1").post(call)); !strings.Contains(string(got), "limits.hosted_tasks_per_principal") {
		t.Errorf("a second session of the same address: %s, want the refusal naming limits.hosted_tasks_per_principal", got)
	}
	if got := lastJSON(t, from("127.0.0.2").post(call)); !strings.Contains(string(got), `"taskId"`) {
		t.Errorf("another client's task: %s", got)
	}
}

// jsonrpcID is the string id of a JSON-RPC request body.
func jsonrpcID(body []byte) string {
	var m struct{ ID string }
	json.Unmarshal(body, &m)
	return m.ID
}

// TestHostedPollLeftIsFreed: a client that leaves the stream of its
// tasks/result poll (protocol 2025: leaving is no cancel) frees the poll,
// which the proxy answers itself and for which nothing runs upstream; the
// task itself runs on. Before, every such poll stayed held until its task
// ended (20,000 held 170 MB).
func TestHostedPollLeftIsFreed(t *testing.T) {
	t.Parallel()
	watchdog(t, 30*time.Second)
	sc, url := workingUpstream(t, 0)
	c := &rawClient{t: t, url: url}
	c.initialize()
	pollLeft(t, sc, c, hostReport(t, c))
}

// waitFor waits until cond holds (checked each millisecond; the test's
// watchdog bounds it).
func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	tick := time.NewTicker(time.Millisecond)
	defer tick.Stop()
	for !cond() {
		<-tick.C
	}
}

// workingUpstream is a Streamable HTTP server whose tools/call works on
// until the test ends (its answer then comes, so that the hosted calls'
// own POSTs end before the sidecar's Cleanup waits for them), and a
// sidecar in front of it that hosts tasks of the tool report under
// limits.hosted_tasks = tasks (0: the default). It returns the sidecar
// and its URL.
func workingUpstream(t *testing.T, tasks int) (*httpx.Sidecar, string) {
	t.Helper()
	release := make(chan struct{})
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		switch {
		case strings.Contains(string(body), `"initialize"`):
			answerInitialize(w, fmt.Sprint("s", rand.Int64()))
		case strings.Contains(string(body), `"tools/call"`):
			select { // works on until the test ends
			case <-release:
				w.Header().Set("Content-Type", "application/json")
				io.WriteString(w, `{"jsonrpc":"2.0","id":"`+jsonrpcID(body)+`","result":{"content":[]}}`)
			case <-r.Context().Done():
			}
		default:
			w.WriteHeader(http.StatusAccepted)
		}
	}))
	t.Cleanup(up.Close)
	p := policy.Defaults()
	p.Rules = []policy.Rule{{Tool: "report", Task: "host"}}
	e, err := policy.New(policy.Options{Policy: p, Audit: policy.Audit{Path: "off"}, Logger: zap.NewNop(), HostedTasks: tasks})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(e.Shutdown) // after the sidecar's
	// What the sidecar logs of the hosted calls' POSTs as the test ends
	// is no matter here.
	sc := &httpx.Sidecar{Upstream: up.URL, Governor: e.Governor, Logger: zap.NewNop()}
	url := serveSidecar(t, sc)
	t.Cleanup(func() { close(release) }) // before the sidecar's: the hosted calls end
	return sc, url
}

// answerInitialize answers an initialize (2025-11-25) as a server with
// tools and the session id does.
func answerInitialize(w http.ResponseWriter, session string) {
	w.Header().Set("Mcp-Session-Id", session)
	w.Header().Set("Content-Type", "application/json")
	io.WriteString(w, `{"jsonrpc":"2.0","id":0,"result":{"protocolVersion":"2025-11-25","capabilities":{"tools":{}},"serverInfo":{"name":"up","version":"1"}}}`)
}

// hostReport calls report as a task (id 1) and returns the task's id.
func hostReport(t *testing.T, c *rawClient) string {
	t.Helper()
	created := lastJSON(t, c.post(`{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"report","task":{}}}`))
	var task struct {
		Result struct {
			Task struct{ TaskID string } `json:"task"`
		} `json:"result"`
	}
	if json.Unmarshal(created, &task) != nil || task.Result.Task.TaskID == "" {
		t.Fatalf("no task: %s", created)
	}
	return task.Result.Task.TaskID
}

// TestHostedPollLeftIsFreedOnAChild: as TestHostedPollLeftIsFreed, for a
// stdio server served over HTTP: a 2025 client that closes the stream of
// its tasks/result poll frees the poll; the task runs on.
func TestHostedPollLeftIsFreedOnAChild(t *testing.T) {
	t.Parallel()
	watchdog(t, 30*time.Second)
	p := policy.Defaults()
	p.Rules = []policy.Rule{{Tool: "hang", Task: "host"}}
	e, err := policy.New(policy.Options{Policy: p, Audit: policy.Audit{Path: "off"}, Logger: zap.NewNop()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(e.Shutdown) // after the sidecar's
	var sc *httpx.Sidecar
	cs := &httpx.Children{Session: stdio.Options{Governor: e.Governor("child")}}
	url := childSidecar(t, cs, func(s *httpx.Sidecar) { sc = s })
	c := &rawClient{t: t, url: url}
	c.initialize()
	resp := c.post(`{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"hang","task":{}}}`)
	defer resp.Body.Close()
	created := <-events(resp.Body) // the task; the stream stays open
	task, _ := created["result"].(map[string]any)["task"].(map[string]any)["taskId"].(string)
	if task == "" {
		t.Fatalf("no task: %v", created)
	}
	pollLeft(t, sc, c, task)
}

// pollLeft sends a tasks/result of task on a connection of its own, which
// it closes once the poll is held (the client leaves the poll's stream),
// and waits until the poll is freed; the task then still works.
func pollLeft(t *testing.T, sc *httpx.Sidecar, c *rawClient, task string) {
	t.Helper()
	before := sc.InFlight()
	conn, err := net.Dial("tcp", strings.TrimPrefix(strings.TrimSuffix(c.url, "/mcp"), "http://"))
	if err != nil {
		t.Fatal(err)
	}
	c.request(`{"jsonrpc":"2.0","id":2,"method":"tasks/result","params":{"taskId":"` + task + `"}}`).Write(conn)
	waitFor(t, "the poll held", func() bool { return sc.InFlight() == before+1 })
	conn.Close()
	waitFor(t, "the poll freed", func() bool { return sc.InFlight() == before })
	got := lastJSON(t, c.post(`{"jsonrpc":"2.0","id":3,"method":"tasks/get","params":{"taskId":"`+task+`"}}`))
	if !strings.Contains(string(got), `"status":"working"`) {
		t.Errorf("tasks/get after the poll left: %s, want the task working on", got)
	}
}
