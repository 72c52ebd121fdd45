//go:build unix

package main

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/mcp-cancel-proxy/mcp-cancel-proxy/internal/events"
	"github.com/mcp-cancel-proxy/mcp-cancel-proxy/internal/otlptest"
)

// oauthStats is what test/e2e/oauth-server.mjs says it did.
type oauthStats struct {
	Authorizations, Registrations, Refreshes, Calls int
	Tokens, Messages                                []string
}

// TestE2EBridgeSignsIn: the bridge in front of an MCP server that the
// TypeScript SDK's authorization server protects (test/e2e/oauth-server.mjs:
// its metadata, dynamic registration, PKCE, tokens and refresh), its
// "browser" following the authorization URL. The go-sdk client calls a
// tool through a bridge, as a desktop client would, each time a bridge of
// its own:
//   - the first call signs in (one authorization, one registration);
//   - a second bridge reuses the token kept;
//   - a token the server expired is refreshed, with no new sign-in;
//   - a revoked token (its refresh token too) starts the flow again;
//   - two bridges started together, with nothing kept, sign in once;
//   - no token the server issued appears in anything a bridge wrote;
//   - a call made while a sign-in waits for the user, and cancelled, is
//     withdrawn: the server never gets it, and the bridge serves on; so
//     for the same server over the 2024-11-05 HTTP+SSE transport.
func TestE2EBridgeSignsIn(t *testing.T) {
	t.Parallel()
	watchdog(t, 3*time.Minute)
	server := startOAuthServer(t)
	browser := bridgeClient(t) + " browse"
	var logs lockedBuffer
	call := func(store, msg string) {
		t.Helper()
		ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
		defer cancel()
		cs := bridgeSession(ctx, t, []string{"--upstream", server + "/mcp", "--log-level", "debug"},
			[]string{"XDG_STATE_HOME=" + store, "BROWSER=" + browser}, &logs)
		defer cs.Close()
		res, err := cs.CallTool(ctx, &mcp.CallToolParams{Name: "echo", Arguments: map[string]any{"message": msg}})
		if err != nil || res.IsError || len(res.Content) == 0 || res.Content[0].(*mcp.TextContent).Text != msg {
			t.Fatalf("echo %q through the bridge: %v, %+v", msg, err, res)
		}
	}
	stats := func() oauthStats { return statsOf(t, server) }
	admin := func(what string) {
		t.Helper()
		resp, err := http.Post(server+"/admin/"+what, "application/json", nil)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
	}
	want := func(step string, authorizations, registrations, refreshes int) {
		t.Helper()
		if s := stats(); s.Authorizations != authorizations || s.Registrations != registrations || s.Refreshes != refreshes {
			t.Errorf("%s: %d authorizations, %d registrations, %d refreshes; want %d, %d, %d", step,
				s.Authorizations, s.Registrations, s.Refreshes, authorizations, registrations, refreshes)
		}
	}
	store := t.TempDir()
	call(store, "one")
	want("the first call", 1, 1, 0)
	call(store, "two")
	want("a second bridge", 1, 1, 0)
	admin("expire")
	call(store, "three")
	want("an expired token", 1, 1, 1)
	admin("revoke")
	call(store, "four")
	want("a revoked token", 2, 1, 1)
	together := t.TempDir()
	var wg sync.WaitGroup
	for _, msg := range []string{"five", "six"} {
		wg.Go(func() { call(together, msg) })
	}
	wg.Wait()
	want("two bridges started together", 3, 2, 1)
	// The withdrawal, to each kind of upstream; wrote: the bridges' audit
	// trails, spans, status pages and metrics.
	var wrote []string
	for _, kind := range []string{"streamable", "sse"} {
		path := map[string]string{"streamable": "/mcp", "sse": "/sse"}[kind]
		wrote = append(wrote, cancelWhileSigningIn(t, server, server+path, kind, bridgeClient(t), &logs)...)
	}
	if s := stats(); s.Calls != 8 || slices.Contains(s.Messages, "never") {
		t.Errorf("the server echoed %q; want eight calls, not the withdrawn ones", s.Messages)
	}
	written := logs.String() + strings.Join(wrote, "\n")
	for _, tok := range stats().Tokens {
		if strings.Contains(written, tok) {
			t.Errorf("a token the server issued is in what a bridge wrote")
		}
	}
	if !strings.Contains(written, `"event":"signed_in"`) {
		t.Errorf("no bridge logged its sign-in:\n%s", written)
	}
}

// startOAuthServer starts test/e2e/oauth-server.mjs, and returns its URL.
func startOAuthServer(t *testing.T) string {
	node, dir := nodePeers(t)
	addr := freePort(t)
	startBackgroundEnv(t, []string{"PORT=" + strings.TrimPrefix(addr, "127.0.0.1:")}, node, filepath.Join(dir, "e2e", "oauth-server.mjs"))
	waitListening(t, addr)
	return "http://" + addr
}

// statsOf returns what the oauth-server.mjs at server says it did.
func statsOf(t *testing.T, server string) oauthStats {
	t.Helper()
	resp, err := http.Get(server + "/admin/stats")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var s oauthStats
	json.NewDecoder(resp.Body).Decode(&s)
	return s
}

// bridgeSession starts the bridge with args and env, its stderr to
// stderr, and connects the go-sdk client to it.
func bridgeSession(ctx context.Context, t *testing.T, args, env []string, stderr io.Writer) *mcp.ClientSession {
	t.Helper()
	cmd := exec.Command(proxyBin, args...)
	cmd.Env = append(cmd.Environ(), env...)
	cmd.Stderr = stderr
	cs, err := mcp.NewClient(&mcp.Implementation{Name: "oauth-e2e", Version: "1"}, nil).Connect(ctx, &mcp.CommandTransport{Command: cmd}, nil)
	if err != nil {
		t.Fatalf("connecting through the bridge: %v", err)
	}
	return cs
}

// lockedBuffer is a buffer several processes' output is written to.
type lockedBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *lockedBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *lockedBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

// cancelWhileSigningIn signs a bridge in, has the server revoke its
// tokens, and calls again: the call waits for the sign-in its 401 starts,
// and the client cancels it meanwhile. Then the user finishes the
// sign-in (the test follows the authorization URL the "browser" was
// given), and the client calls once more. The withdrawn call never
// reaches the server; the next one does.
func cancelWhileSigningIn(t *testing.T, server, upstream, transport, client string, logs *lockedBuffer) (wrote []string) {
	t.Helper()
	dir := t.TempDir()
	marker := filepath.Join(dir, "browsed")
	if err := syscall.Mkfifo(marker+".fifo", 0o600); err != nil {
		t.Fatal(err)
	}
	rcv := otlptest.StartHTTP(t)
	cfg := filepath.Join(dir, "proxy.yaml")
	os.WriteFile(cfg, []byte("tracing:\n  endpoint: "+rcv.URL+"\naudit:\n  path: "+filepath.Join(dir, "audit.jsonl")+"\n"), 0o600)
	admin := freePort(t)
	args, feed := eventsFor(t, []string{"--config", cfg, "--admin", admin, "--upstream", upstream, "--upstream-transport", transport, "--log-level", "debug"})
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	cs := bridgeSession(ctx, t, args, []string{"XDG_STATE_HOME=" + t.TempDir(), "BROWSER=" + client + " browse-once " + marker, "OTEL_BSP_SCHEDULE_DELAY=50"}, logs)
	defer cs.Close()
	feed.waitFor(t, events.SignedIn)
	if _, err := cs.ListTools(ctx, nil); err != nil { // every POST of the session's start answered
		t.Fatal(err)
	}
	if resp, err := http.Post(server+"/admin/revoke", "application/json", nil); err == nil {
		resp.Body.Close()
	}
	callCtx, stop := context.WithCancel(ctx)
	errc := make(chan error, 1)
	go func() {
		_, err := cs.CallTool(callCtx, &mcp.CallToolParams{Name: "echo", Arguments: map[string]any{"message": "never"}})
		errc <- err
	}()
	feed.waitCount(t, 2, events.SignInStarted) // the first signed the bridge in
	stop()                                     // the go-sdk client sends notifications/cancelled
	if err := <-errc; err == nil {
		t.Fatal("the cancelled call returned no error")
	}
	feed.waitFor(t, events.CancelAccepted, "tool", "echo")
	authURL, err := os.ReadFile(marker + ".fifo") // what the "browser" was given
	if err != nil {
		t.Fatal(err)
	}
	resp, err := http.Get(string(authURL)) // the user signs in at last
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	feed.waitCount(t, 2, events.SignedIn)
	res, err := cs.CallTool(ctx, &mcp.CallToolParams{Name: "echo", Arguments: map[string]any{"message": "after"}})
	if err != nil || res.IsError {
		t.Fatalf("the call after the sign-in: %v, %+v", err, res)
	}
	rcv.Wait(t, 20*time.Second, "the cancelled call's span", func(s otlptest.Span) bool { return s.Name == "tools/call echo" })
	for _, page := range []string{"/status", "/metrics"} {
		resp, err := http.Get("http://" + admin + page)
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK || !strings.Contains(string(b), "echo") {
			t.Errorf("%s: %d, without the calls: %.300s", page, resp.StatusCode, b)
		}
		wrote = append(wrote, string(b))
	}
	cs.Close() // the audit line of a cancel is written once its story ends, at the latest with the session
	audit, _ := os.ReadFile(filepath.Join(dir, "audit.jsonl"))
	if !strings.Contains(string(audit), `"tool":"echo"`) {
		t.Errorf("no audit line for the withdrawn call: %s", audit)
	}
	spans, _ := json.Marshal(rcv.Spans())
	feedText, _ := os.ReadFile(eventsPath(args))
	return append(wrote, string(audit), string(spans), string(feedText))
}
