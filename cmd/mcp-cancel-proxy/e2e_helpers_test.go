package main

import (
	"bufio"
	"crypto/x509"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"runtime/debug"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/mcp-cancel-proxy/mcp-cancel-proxy/framing"
	"github.com/mcp-cancel-proxy/mcp-cancel-proxy/internal/leaktest"
	"github.com/mcp-cancel-proxy/mcp-cancel-proxy/internal/strict"
)

// proxyBin is the mcp-cancel-proxy binary built for these tests; the example
// server is the same binary's `example-server` command.
var proxyBin string

func TestMain(m *testing.M) {
	if os.Getenv(rootsProbeEnv) == "1" { // TestFallbackRoots's child: how many roots it would trust
		pool, err := x509.SystemCertPool()
		if err != nil {
			fmt.Println(0)
			os.Exit(0)
		}
		fmt.Println(len(pool.Subjects())) //nolint:staticcheck // a count, not the system's own roots
		os.Exit(0)
	}
	dir, err := os.MkdirTemp("", "mcp-cancel-proxy-e2e")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	proxyBin = filepath.Join(dir, "mcp-cancel-proxy")
	// The proxies under test keep their hook stores here, not in the
	// user's state directory.
	sharedState = filepath.Join(dir, "state")
	os.Setenv("XDG_STATE_HOME", sharedState)
	// Nor do they reach the user's own credential store: no session bus
	// (TestE2EBridgeKeepsTokensInTheKeyring gives its bridges a bus of
	// its own).
	os.Unsetenv("DBUS_SESSION_BUS_ADDRESS")
	os.Unsetenv("XDG_RUNTIME_DIR")
	// MCP_TEST_TAGS builds the binary with build tags (portable: the relay
	// path of macOS and Windows).
	build := exec.Command("go", "build", "-race", "-tags", os.Getenv("MCP_TEST_TAGS"), "-o", proxyBin, ".")
	build.Stdout, build.Stderr = os.Stderr, os.Stderr
	if err := build.Run(); err != nil {
		fmt.Fprintln(os.Stderr, "building the proxy:", err)
		os.Exit(1)
	}
	code := m.Run()
	os.RemoveAll(dir)
	if err := goleak.Find(leaktest.ProcessWide...); err != nil && code == 0 {
		fmt.Fprintln(os.Stderr, "goleak:", err) // every goroutine a test starts ends with it
		code = 1
	}
	os.Exit(code)
}

// watchdog dumps every goroutine and fails loudly if a test hangs.
func watchdog(t testing.TB, d time.Duration) {
	tm := time.AfterFunc(d, func() {
		debug.SetTraceback("all")
		panic("test " + t.Name() + " hung")
	})
	t.Cleanup(func() { tm.Stop() })
}

// wrapped is a running proxy binary driven by a raw JSON-RPC client, with
// the proxy's stderr log lines available for waiting on.
type wrapped struct {
	t      testing.TB
	cmd    *exec.Cmd
	stdin  io.WriteCloser
	frames chan []byte // what the proxy wrote to stdout
	logs   *logTail
	events *eventTail // its --events feed, when the command has one
	exited chan struct{}
	err    error
}

func startWrapped(t testing.TB, args ...string) *wrapped {
	t.Helper()
	return startCommand(t, exec.Command(proxyBin, args...))
}

// startCommand is startWrapped for a command that runs the proxy some other
// way (through npm's launcher, say). The proxy binary itself is given
// --events (withEvents); another command passes it on if it wants events.
func startCommand(t testing.TB, cmd *exec.Cmd) *wrapped {
	t.Helper()
	if cmd.Path == proxyBin {
		cmd.Args = append(cmd.Args[:1:1], withEvents(t, cmd.Args[1:])...)
	}
	ownState(t, cmd)
	watchdog(t, 60*time.Second)
	stdin, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	stderr, err := cmd.StderrPipe()
	if err != nil {
		t.Fatal(err)
	}
	exited := make(chan struct{})
	var feed *eventTail
	if path := eventsPath(cmd.Args[1:]); path != "" {
		feed = followEvents(t, path, exited)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	w := &wrapped{t: t, cmd: cmd, stdin: stdin, frames: make(chan []byte, 256),
		logs: newLogTail(stderr), events: feed, exited: exited}
	read, stdoutRead, ended := make(chan []byte), make(chan struct{}), make(chan struct{})
	go func() { // stdout's reader, which never waits for the test
		defer close(read)
		rd := framing.NewReader(stdout, 0)
		for {
			f, err := rd.Read(nil)
			if err != nil {
				return
			}
			read <- f
		}
	}()
	// Between the reader and the test, a queue without bound: the test
	// gets every frame, those that came just before the proxy exited too
	// (a drain of w.frames here once raced the test for them), and Wait
	// closes stdout only once it is read to its end.
	go func() {
		defer close(w.frames)
		var queue [][]byte
		in := read
		for in != nil || len(queue) > 0 {
			var out chan<- []byte
			var next []byte
			if len(queue) > 0 {
				out, next = w.frames, queue[0]
			}
			select {
			case f, ok := <-in:
				if !ok {
					in = nil
					close(stdoutRead)
					continue
				}
				queue = append(queue, f)
			case out <- next:
				queue = queue[1:]
			case <-ended: // the test is over: what it did not read is dropped
				return
			}
		}
	}()
	go func() {
		<-w.logs.done
		<-stdoutRead
		w.err = cmd.Wait()
		close(w.exited)
	}()
	t.Cleanup(func() {
		stdin.Close()
		if serves(cmd.Args[1:]) { // a sidecar does not end with its stdin
			cmd.Process.Signal(syscall.SIGTERM)
		}
		select {
		case <-w.exited:
		case <-time.After(20 * time.Second): // a proxy that outlives its client is a bug: its goroutines say where
			cmd.Process.Signal(syscall.SIGQUIT)
			select {
			case <-w.exited:
			case <-time.After(5 * time.Second):
				cmd.Process.Kill()
				<-w.exited
			}
			t.Errorf("%v did not exit within 20 s of its input's end", cmd.Args)
		}
		close(ended)
		if t.Failed() {
			t.Logf("proxy stderr:\n%s", w.logs.all())
		}
	})
	return w
}

// states are the state directories (XDG_STATE_HOME) of the tests running,
// by test: the proxies of one test share one, and so their hook stores,
// while tests that run in parallel never see each other's.
var states sync.Map

// sharedState is the state directory TestMain gives every process the
// tests start; ownState replaces it with the test's own.
var sharedState string

// ownState gives cmd the state directory of t's own, unless its
// environment names one.
func ownState(t testing.TB, cmd *exec.Cmd) {
	if cmd.Env == nil {
		cmd.Env = os.Environ()
	}
	for _, kv := range cmd.Env {
		if strings.HasPrefix(kv, "XDG_STATE_HOME=") && kv != "XDG_STATE_HOME="+sharedState {
			return // the test's own choice
		}
	}
	cmd.Env = append(cmd.Env, "XDG_STATE_HOME="+stateDir(t))
}

// stateDir returns t's own state directory (see states).
func stateDir(t testing.TB) string {
	dir, loaded := states.LoadOrStore(t, filepath.Join(t.TempDir(), "state"))
	if !loaded {
		t.Cleanup(func() { states.Delete(t) })
	}
	return dir.(string)
}

// serves says whether the proxy's arguments make it serve HTTP (--listen
// before any "--"), a process that runs until it is stopped.
func serves(args []string) bool {
	for _, a := range args {
		switch {
		case a == "--":
			return false
		case a == "--listen", strings.HasPrefix(a, "--listen="):
			return true
		}
	}
	return false
}

func (w *wrapped) send(frame string) {
	w.t.Helper()
	if _, err := io.WriteString(w.stdin, frame+"\n"); err != nil {
		w.t.Fatalf("writing to the proxy: %v", err)
	}
}

// recv returns the next frame the proxy sent the client.
func (w *wrapped) recv() map[string]any {
	w.t.Helper()
	select {
	case f, ok := <-w.frames:
		if !ok {
			w.t.Fatal("proxy closed stdout")
		}
		var m map[string]any
		if err := json.Unmarshal(f, &m); err != nil {
			w.t.Fatalf("proxy wrote invalid JSON %s: %v", f, err)
		}
		return m
	case <-time.After(30 * time.Second):
		w.t.Fatal("no frame from the proxy in 30s")
		return nil
	}
}

// recvUntil collects frames until one satisfies stop, returning all of them.
func (w *wrapped) recvUntil(stop func(map[string]any) bool) []map[string]any {
	w.t.Helper()
	var got []map[string]any
	for {
		m := w.recv()
		got = append(got, m)
		if stop(m) {
			return got
		}
	}
}

func (w *wrapped) initialize(capabilities string) {
	w.t.Helper()
	w.send(`{"jsonrpc":"2.0","id":"init","method":"initialize","params":{"protocolVersion":"2025-06-18","capabilities":` + capabilities + `,"clientInfo":{"name":"e2e","version":"1"}}}`)
	w.recvUntil(isResponse("init"))
	w.send(`{"jsonrpc":"2.0","method":"notifications/initialized"}`)
}

// wait waits for the proxy to exit and returns its exit code.
func (w *wrapped) wait() int {
	w.t.Helper()
	select {
	case <-w.exited:
	case <-time.After(30 * time.Second):
		w.t.Fatal("proxy did not exit")
	}
	if w.err == nil {
		return 0
	}
	if ee, ok := w.err.(*exec.ExitError); ok {
		return ee.ExitCode()
	}
	w.t.Fatalf("proxy: %v", w.err)
	return -1
}

func isResponse(id any) func(map[string]any) bool {
	want := fmt.Sprint(id)
	return func(m map[string]any) bool {
		_, hasMethod := m["method"]
		return !hasMethod && m["id"] != nil && fmt.Sprint(m["id"]) == want
	}
}

// concerns reports whether a frame is the response to id, or progress for token.
func concerns(m map[string]any, id any, token string) bool {
	if isResponse(id)(m) {
		return true
	}
	if m["method"] == framing.MethodProgress {
		p, _ := m["params"].(map[string]any)
		return fmt.Sprint(p["progressToken"]) == token
	}
	return false
}

// startServer starts cmd, a server for a test (the example server, a peer
// of another language), killed when the test ends, and returns its stderr's
// lines.
func startServer(t testing.TB, cmd *exec.Cmd) *logTail {
	t.Helper()
	stderr, err := cmd.StderrPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cmd.Process.Kill(); cmd.Wait() })
	return newLogTail(stderr)
}

// logTail collects the proxy's stderr lines and lets a test wait for one.
type logTail struct {
	mu    sync.Mutex // guards lines and waiters
	lines []string
	wake  chan struct{} // closed and replaced on every new line
	done  chan struct{}
}

func newLogTail(r io.Reader) *logTail {
	l := &logTail{wake: make(chan struct{}), done: make(chan struct{})}
	go func() {
		defer close(l.done)
		sc := bufio.NewScanner(r)
		sc.Buffer(make([]byte, 1<<20), 1<<20)
		for sc.Scan() {
			l.mu.Lock()
			l.lines = append(l.lines, sc.Text())
			close(l.wake)
			l.wake = make(chan struct{})
			l.mu.Unlock()
		}
	}()
	return l
}

// waitFor blocks until a log line contains every one of parts.
func (l *logTail) waitFor(t testing.TB, parts ...string) string {
	t.Helper()
	return l.waitMatch(t, 1, func(line string) bool { return containsAll(line, parts) }, fmt.Sprintf("a line containing %q", parts))[0]
}

// waitCount blocks until n lines contain every one of parts, and returns
// the first n.
func (l *logTail) waitCount(t testing.TB, n int, parts ...string) []string {
	t.Helper()
	return l.waitMatch(t, n, func(line string) bool { return containsAll(line, parts) }, fmt.Sprintf("lines containing %q", parts))
}

// waitMatch blocks until n lines match, and returns the first n; what
// says what is waited for.
func (l *logTail) waitMatch(t testing.TB, n int, match func(string) bool, what string) []string {
	t.Helper()
	deadline := time.NewTimer(30 * time.Second)
	defer deadline.Stop()
	var found []string
	seen := 0
	for {
		l.mu.Lock()
		for ; seen < len(l.lines) && len(found) < n; seen++ {
			if match(l.lines[seen]) {
				found = append(found, l.lines[seen])
			}
		}
		wake := l.wake
		l.mu.Unlock()
		if len(found) == n {
			return found
		}
		select {
		case <-wake:
		case <-l.done:
			t.Fatalf("the stream ended with %d of %d of %s", len(found), n, what)
		case <-deadline.C:
			t.Fatalf("%d of %d of %s in 30s", len(found), n, what)
		}
	}
}

func (l *logTail) all() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return strings.Join(l.lines, "\n")
}

func containsAll(s string, parts []string) bool {
	for _, p := range parts {
		if !strings.Contains(s, p) {
			return false
		}
	}
	return true
}

// mcpPost POSTs one JSON-RPC message to a Streamable HTTP endpoint, as an
// MCP client would, in a session if one is given.
func mcpPost(t testing.TB, url, session, body string) *http.Response {
	t.Helper()
	resp, err := http.DefaultClient.Do(mcpRequest(url, session, body))
	if err != nil {
		t.Fatalf("POST %s: %v", body, err)
	}
	return resp
}

// openSession initializes an MCP session at url (protocol 2025-06-18) and
// returns its id, once notifications/initialized is sent.
func openSession(t testing.TB, url, client string) string {
	t.Helper()
	resp := mcpPost(t, url, "", `{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-06-18","capabilities":{},"clientInfo":{"name":"`+client+`","version":"1"}}}`)
	session := resp.Header.Get("Mcp-Session-Id")
	io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	mcpPost(t, url, session, `{"jsonrpc":"2.0","method":"notifications/initialized"}`).Body.Close()
	return session
}

// mcpRequest is the POST of one JSON-RPC message, as an MCP client sends it.
func mcpRequest(url, session, body string) *http.Request {
	return strict.Request(url, session, body)
}

// sseMessages returns the data of each event of a response, in order,
// closed when the response ends.
func sseMessages(resp *http.Response) <-chan string {
	ch := make(chan string, 16)
	go func() {
		defer close(ch)
		defer resp.Body.Close()
		sc := bufio.NewScanner(resp.Body)
		for sc.Scan() {
			if d, ok := strings.CutPrefix(sc.Text(), "data: "); ok {
				ch <- d
			}
		}
	}()
	return ch
}
