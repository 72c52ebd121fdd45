//go:build unix

package main

import (
	"bufio"
	"context"
	"encoding/json"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/mcp-cancel-proxy/mcp-cancel-proxy/internal/events"
)

// TestE2ETypeScriptClientReissueJoins: the TypeScript SDK client times out
// on a call of a reissue: join tool (it cancels it) and issues it again;
// the proxy holds the cancel and the re-issue joins the call still running.
// The server runs the tool once (its log says so); the re-issue gets its
// answer and its later progress. Through the wrapper, through the bridge
// to the example server over Streamable HTTP, and, with the SDK's HTTP+SSE
// client, through the sidecar's old-client front to the same server.
func TestE2ETypeScriptClientReissueJoins(t *testing.T) {
	t.Parallel()
	node, dir := nodePeers(t)
	config, _ := writeConfig(t, "policy:\n  rules:\n    - tool: block\n      reissue: join\n")
	t.Run("wrapper", func(t *testing.T) {
		watchdog(t, 90*time.Second)
		r := reissueScript(t, node, dir, config, "")
		if r.Executions != 1 {
			t.Errorf("the server ran the tool %d times, want 1", r.Executions)
		}
	})
	t.Run("bridge", func(t *testing.T) {
		watchdog(t, 90*time.Second)
		up := freePort(t)
		cmd := exec.Command(proxyBin, "example-server", "--http", up)
		server := startServer(t, cmd)
		waitListening(t, up)
		reissueScript(t, node, dir, config, "http://"+up+"/mcp")
		cmd.Process.Kill()
		<-server.done // its whole log
		if n := strings.Count(server.all(), "example server: block pay: started"); n != 1 {
			t.Errorf("the server ran the tool %d times, want 1", n)
		}
	})
	// The sidecar's fronts, over the example server as a Streamable HTTP
	// upstream and as a stdio server it runs.
	for _, tc := range []struct{ name, path string }{
		{"old-client front", "/sse"},
		{"Streamable HTTP front", "/mcp"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			watchdog(t, 90*time.Second)
			up, front := freePort(t), freePort(t)
			cmd := exec.Command(proxyBin, "example-server", "--http", up)
			server := startServer(t, cmd)
			waitListening(t, up)
			reissueThroughSidecar(t, node, dir, "http://"+front+tc.path,
				"--config", config, "--log-level", "debug", "--listen", front, "--upstream", "http://"+up+"/mcp")
			cmd.Process.Kill()
			<-server.done // its whole log
			if n := strings.Count(server.all(), "example server: block pay: started"); n != 1 {
				t.Errorf("the server ran the tool %d times, want 1", n)
			}
		})
		t.Run(tc.name+" over stdio", func(t *testing.T) {
			watchdog(t, 90*time.Second)
			front := freePort(t)
			sc := reissueThroughSidecar(t, node, dir, "http://"+front+tc.path,
				"--config", config, "--log-level", "debug", "--listen", front, "--", proxyBin, "example-server")
			sc.cmd.Process.Signal(syscall.SIGTERM)
			<-sc.exited // its whole log: the server's stderr passes through it
			if n := strings.Count(sc.logs.all(), "example server: block pay: started"); n != 1 {
				t.Errorf("the server ran the tool %d times, want 1", n)
			}
		})
	}
}

// reissueThroughSidecar starts the sidecar with args and runs
// ts-client-reissue.mjs as its client at url, and checks what the client
// saw and that the sidecar joined the re-issue; it returns the sidecar.
func reissueThroughSidecar(t *testing.T, node, dir, url string, args ...string) *wrapped {
	t.Helper()
	sc := startWrapped(t, args...)
	sc.events.waitFor(t, events.SidecarListening)
	t.Cleanup(func() { sc.cmd.Process.Signal(syscall.SIGTERM) }) // runs before startWrapped's own
	script := exec.Command(node, filepath.Join(dir, "e2e", "ts-client-reissue.mjs"))
	script.Dir = dir
	script.Env = append(os.Environ(), "SIDECAR_URL="+url)
	script.Stderr = os.Stderr
	stdin, _ := script.StdinPipe()
	stdout, _ := script.StdoutPipe()
	if err := script.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { script.Process.Kill(); script.Wait() }) // by its PID, if the test ends early
	out := bufio.NewScanner(stdout)
	if !out.Scan() || out.Text() != "REISSUED" {
		t.Fatalf("script said %q, want REISSUED", out.Text())
	}
	sc.events.waitFor(t, events.ReissueJoined) // held by the sidecar, never sent
	// The SDK sends the first call's cancel and the re-issue as two POSTs
	// at once: the call is released only once the cancel is in too, or its
	// answer could reach the client, which had timed it out (as an answer
	// already on its way when the cancel comes is: no proxy can recall it).
	sc.events.waitFor(t, events.CancelAccepted, "tool", "block")
	io.WriteString(stdin, "GO\n")
	if !out.Scan() {
		t.Fatalf("no summary from the script: %v", out.Err())
	}
	checkReissue(t, []byte(out.Text()))
	sc.events.waitFor(t, events.Joined)
	return sc
}

// reissueSummary is what ts-client-reissue.mjs saw.
type reissueSummary struct {
	First                        string
	Second                       struct{ JobID, Status string }
	Progress, Executions, Joined int
	Errors                       []string
}

// reissueScript runs ts-client-reissue.mjs, through the bridge to upstream
// if it is set, and checks what the client saw.
func reissueScript(t *testing.T, node, dir, config, upstream string) reissueSummary {
	t.Helper()
	cmd := exec.Command(node, filepath.Join(dir, "e2e", "ts-client-reissue.mjs"))
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), "PROXY_BIN="+proxyBin, "CONFIG="+config, "UPSTREAM="+upstream)
	cmd.Stderr = os.Stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("ts-client-reissue.mjs: %v\n%s", err, out)
	}
	r := checkReissue(t, out)
	if r.Joined != 1 {
		t.Errorf("the proxy joined %d re-issues, want 1", r.Joined)
	}
	return r
}

// checkReissue checks what the client saw: the first call timed out, the
// re-issue got the answer and its progress.
func checkReissue(t *testing.T, out []byte) reissueSummary {
	t.Helper()
	var r reissueSummary
	if err := json.Unmarshal(out, &r); err != nil {
		t.Fatalf("bad summary %q: %v", out, err)
	}
	t.Logf("summary: %s", out)
	if !strings.Contains(r.First, "timed out") || r.Second.Status != "released" || r.Second.JobID != "pay" || r.Progress < 1 || len(r.Errors) != 0 {
		t.Errorf("client: first call %q, re-issue %+v with %d progress, errors %q; want a timeout, then the released answer with progress",
			r.First, r.Second, r.Progress, r.Errors)
	}
	return r
}

// TestE2EGoSDKClientReissueAfterABrokenStream: the go-sdk client speaks
// 2026-07-28 to the sidecar (requests without a session); the connection
// carrying a call of a reissue: join tool breaks, which in that revision
// is the call's cancel, and the test, as an application would, calls
// again with the same arguments on a request of its own and the same
// credential. The sidecar holds the close, the re-issue joins the call
// still running, the server never hears of a cancel and runs the tool
// once, and the re-issue gets the call's answer. In front of the example
// server as a stateless Streamable HTTP upstream, and as a stdio server
// the sidecar runs.
func TestE2EGoSDKClientReissueAfterABrokenStream(t *testing.T) {
	t.Parallel()
	config, _ := writeConfig(t, "policy:\n  rules:\n    - tool: block\n      reissue: join\n")
	t.Run("stateless upstream", func(t *testing.T) {
		watchdog(t, 90*time.Second)
		up, front := freePort(t), freePort(t)
		server := startExampleStateless(t, up)
		sc := startWrapped(t, "--config", config, "--listen", front, "--log-level", "debug", "--upstream", "http://"+up+"/mcp")
		goSDKReissueAfterBreak(t, sc, front)
		checkRanOnce(t, server.all())
	})
	t.Run("stdio server", func(t *testing.T) {
		watchdog(t, 90*time.Second)
		front := freePort(t)
		sc := startWrapped(t, "--config", config, "--listen", front, "--log-level", "debug", "--", proxyBin, "example-server")
		goSDKReissueAfterBreak(t, sc, front)
		sc.cmd.Process.Signal(syscall.SIGTERM)
		<-sc.exited // its whole log: the server's stderr passes through it
		checkRanOnce(t, sc.logs.all())
	})
}

// checkRanOnce checks, in the example server's log, that block ran once
// and never saw its request cancelled.
func checkRanOnce(t *testing.T, log string) {
	t.Helper()
	if n := strings.Count(log, "example server: block pay: started"); n != 1 {
		t.Errorf("the server ran the tool %d times, want 1", n)
	}
	if strings.Contains(log, "block pay: the request was cancelled") {
		t.Error("the server saw the call cancelled: the close reached it")
	}
}

// goSDKReissueAfterBreak runs the go-sdk client through the sidecar sc at
// front: a block call whose connection the test breaks once it reports
// progress, then the same call again, released once the sidecar says it
// joined the first.
func goSDKReissueAfterBreak(t *testing.T, sc *wrapped, front string) {
	t.Helper()
	t.Cleanup(func() { sc.cmd.Process.Signal(syscall.SIGTERM) })
	sc.events.waitFor(t, events.SidecarListening)
	conns := &connSet{}
	hc := &http.Client{Transport: withAuthorization{"Bearer alice", &http.Transport{DialContext: conns.dial}}}
	progressed := make(chan struct{}, 8)
	client := mcp.NewClient(&mcp.Implementation{Name: "go-sdk-reissue", Version: "1"}, &mcp.ClientOptions{
		ProgressNotificationHandler: func(context.Context, *mcp.ProgressNotificationClientRequest) { progressed <- struct{}{} },
	})
	cs, err := client.Connect(context.Background(), &mcp.StreamableClientTransport{Endpoint: "http://" + front + "/mcp", HTTPClient: hc, MaxRetries: -1}, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer cs.Close()
	call := func(token string) (*mcp.CallToolResult, error) {
		p := &mcp.CallToolParams{Name: "block", Arguments: map[string]any{"key": "pay"}}
		p.SetProgressToken(token)
		return cs.CallTool(context.Background(), p)
	}
	errc := make(chan error, 1)
	go func() {
		_, err := call("first")
		errc <- err
	}()
	<-progressed
	conns.breakAll() // the stream breaks under the call
	if err := <-errc; err == nil {
		t.Fatal("the call whose stream broke returned no error")
	}
	sc.events.waitFor(t, events.CancelAccepted, "tool", "block") // the close, held: a re-issue may join the call
	type answer struct {
		res *mcp.CallToolResult
		err error
	}
	again := make(chan answer, 1)
	go func() {
		res, err := call("again")
		again <- answer{res, err}
	}()
	sc.events.waitFor(t, events.ReissueJoined) // held by the sidecar, never sent
	if _, err := cs.CallTool(context.Background(), &mcp.CallToolParams{Name: "release", Arguments: map[string]any{"key": "pay"}}); err != nil {
		t.Fatalf("release: %v", err)
	}
	a := <-again
	if a.err != nil {
		t.Fatalf("the re-issue: %v", a.err)
	}
	if got, _ := json.Marshal(a.res.StructuredContent); !strings.Contains(string(got), `"status":"released"`) {
		t.Errorf("the re-issue's answer: %s, want the call's (released)", got)
	}
	sc.events.waitFor(t, events.Joined)
}

// withAuthorization sets the Authorization header of every request.
type withAuthorization struct {
	value string
	next  http.RoundTripper
}

func (w withAuthorization) RoundTrip(r *http.Request) (*http.Response, error) {
	r = r.Clone(r.Context())
	r.Header.Set("Authorization", w.value)
	return w.next.RoundTrip(r)
}

// connSet keeps the client's connections, so that a test can break them.
type connSet struct {
	mu    sync.Mutex
	conns []net.Conn
}

func (s *connSet) dial(ctx context.Context, network, addr string) (net.Conn, error) {
	c, err := (&net.Dialer{}).DialContext(ctx, network, addr)
	if err == nil {
		s.mu.Lock()
		s.conns = append(s.conns, c)
		s.mu.Unlock()
	}
	return c, err
}

// breakAll closes every connection dialled so far.
func (s *connSet) breakAll() {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, c := range s.conns {
		c.Close()
	}
	s.conns = nil
}
