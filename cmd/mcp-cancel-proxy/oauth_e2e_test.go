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
//     withdrawn: the server never gets it, and the bridge serves on.
func TestE2EBridgeSignsIn(t *testing.T) {
	node, dir := nodePeers(t)
	watchdog(t, 3*time.Minute)
	browser := bridgeClient(t) + " browse"
	addr := freePort(t)
	startBackgroundEnv(t, []string{"PORT=" + strings.TrimPrefix(addr, "127.0.0.1:")}, node, filepath.Join(dir, "e2e", "oauth-server.mjs"))
	waitListening(t, addr)
	server := "http://" + addr
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
	stats := func() oauthStats {
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
	cancelWhileSigningIn(t, server, bridgeClient(t), &logs)
	if s := stats(); s.Calls != 7 || slices.Contains(s.Messages, "never") {
		t.Errorf("the server echoed %q; want seven calls, not the withdrawn one", s.Messages)
	}
	written := logs.String()
	for _, tok := range stats().Tokens {
		if strings.Contains(written, tok) {
			t.Errorf("a token the server issued is in what a bridge wrote")
		}
	}
	if !strings.Contains(written, `"event":"signed_in"`) {
		t.Errorf("no bridge logged its sign-in:\n%s", written)
	}
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
func cancelWhileSigningIn(t *testing.T, server, client string, logs *lockedBuffer) {
	t.Helper()
	marker := filepath.Join(t.TempDir(), "browsed")
	if err := syscall.Mkfifo(marker+".fifo", 0o600); err != nil {
		t.Fatal(err)
	}
	args, feed := eventsFor(t, []string{"--upstream", server + "/mcp", "--upstream-transport", "streamable", "--log-level", "debug"})
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	cs := bridgeSession(ctx, t, args, []string{"XDG_STATE_HOME=" + t.TempDir(), "BROWSER=" + client + " browse-once " + marker}, logs)
	defer cs.Close()
	feed.waitFor(t, events.SignedIn)
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
}
