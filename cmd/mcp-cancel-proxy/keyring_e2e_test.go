//go:build linux

package main

import (
	"bufio"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/mcp-cancel-proxy/mcp-cancel-proxy/internal/events"
)

// secretService starts a D-Bus session bus of the test's own, on which
// GNOME Keyring's Secret Service starts when first called (D-Bus
// activation), with a login keyring unlocked and kept under dir; it
// returns the variable that points a process at that bus. GNOME Keyring
// leaves when the bus does, which the test stops by its PID. Without
// Debian's dbus-daemon, gnome-keyring and libsecret-tools, which
// scripts/test installs, the test is skipped, except under CI.
func secretService(t *testing.T) string {
	t.Helper()
	for _, tool := range []string{"dbus-daemon", "gnome-keyring-daemon", "secret-tool"} {
		if _, err := exec.LookPath(tool); err != nil {
			if os.Getenv("CI") != "" {
				t.Fatalf("%s is not installed (scripts/test installs it)", tool)
			}
			t.Skipf("%s is not installed", tool)
		}
	}
	dir := t.TempDir()
	conf := fmt.Sprintf(`<!DOCTYPE busconfig PUBLIC "-//freedesktop//DTD D-Bus Bus Configuration 1.0//EN"
 "http://www.freedesktop.org/standards/dbus/1.0/busconfig.dtd">
<busconfig>
  <type>session</type>
  <listen>unix:path=%[1]s/bus</listen>
  <auth>EXTERNAL</auth>
  <servicedir>%[1]s/services</servicedir>
  <policy context="default"><allow send_destination="*" eavesdrop="true"/><allow eavesdrop="true"/><allow own="*"/></policy>
</busconfig>
`, dir)
	service := fmt.Sprintf(`[D-BUS Service]
Name=org.freedesktop.secrets
Exec=/bin/sh -c "printf test | HOME=%[1]s XDG_DATA_HOME=%[1]s/data XDG_RUNTIME_DIR=%[1]s exec gnome-keyring-daemon --unlock --components=secrets --foreground"
`, dir)
	os.Mkdir(filepath.Join(dir, "services"), 0o700)
	if os.WriteFile(filepath.Join(dir, "bus.conf"), []byte(conf), 0o600) != nil ||
		os.WriteFile(filepath.Join(dir, "services", "secrets.service"), []byte(service), 0o600) != nil {
		t.Fatal("cannot write the bus's configuration")
	}
	cmd := exec.Command("dbus-daemon", "--config-file="+filepath.Join(dir, "bus.conf"), "--nofork", "--print-address=1")
	cmd.Stderr = os.Stderr
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		cmd.Process.Kill()
		cmd.Wait()
	})
	addr, err := bufio.NewReader(out).ReadString('\n') // printed once it listens
	if err != nil {
		t.Fatalf("the bus gave no address: %v", err)
	}
	return "DBUS_SESSION_BUS_ADDRESS=" + strings.TrimSpace(addr)
}

// secretsKept returns what secret-tool finds of the proxy's in the
// Secret Service on bus: each item's attributes and secret.
func secretsKept(t *testing.T, bus string) string {
	t.Helper()
	cmd := exec.Command("secret-tool", "search", "--all", "service", "mcp-cancel-proxy")
	cmd.Env = append(os.Environ(), bus)
	out, _ := cmd.CombinedOutput() // no item is exit status 1
	return string(out)
}

// TestE2EBridgeKeepsTokensInTheKeyring: on a Linux desktop (a session
// bus with GNOME Keyring's Secret Service), the token and registration
// the bridge gets are kept there, not in its files. Against the
// TypeScript SDK's authorization server (test/e2e/oauth-server.mjs):
//   - auth login signs in before any bridge runs, and says so; the
//     token is in the keyring (secret-tool finds it) and in no file;
//   - auth list says where it is kept; a bridge uses it, with no new
//     sign-in; auth login again finds it kept;
//   - auth logout takes it out of the keyring as well as the file;
//   - a bridge with --oauth start signs in before its client's first
//     request: the server has the sign-in and no call; with --keyring
//     off, its token is in the file, and the keyring has none.
func TestE2EBridgeKeepsTokensInTheKeyring(t *testing.T) {
	t.Parallel()
	bus := secretService(t)
	watchdog(t, 2*time.Minute)
	server := startOAuthServer(t)
	mcpURL := server + "/mcp"
	store := t.TempDir()
	env := []string{bus, "XDG_STATE_HOME=" + store, "BROWSER=" + bridgeClient(t) + " browse"}
	var logs lockedBuffer
	run := func(args ...string) string {
		t.Helper()
		cmd := exec.Command(proxyBin, args...)
		cmd.Env = append(os.Environ(), env...)
		cmd.Stderr = &logs
		out, err := cmd.Output()
		if err != nil {
			t.Fatalf("%s: %v\n%s", strings.Join(args, " "), err, logs.String())
		}
		return string(out)
	}
	stats := func() oauthStats { return statsOf(t, server) }
	if out := run("auth", "login", mcpURL); !strings.Contains(out, "signed in to "+mcpURL) || stats().Authorizations != 1 {
		t.Fatalf("auth login: %q, %d authorizations", out, stats().Authorizations)
	}
	tokens := stats().Tokens
	kept := secretsKept(t, bus)
	for _, tok := range tokens {
		if filesHold(store, tok) {
			t.Error("a token the server issued is in a file of the store")
		}
	}
	if !strings.Contains(kept, tokens[len(tokens)-1]) {
		t.Errorf("the keyring does not hold the token: secret-tool found\n%s", kept)
	}
	if out := run("auth", "list"); !strings.Contains(out, "kept in: keyring") {
		t.Errorf("auth list: %q", out)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	cs := bridgeSession(ctx, t, []string{"--upstream", mcpURL}, env, &logs)
	res, err := cs.CallTool(ctx, &mcp.CallToolParams{Name: "echo", Arguments: map[string]any{"message": "one"}})
	cs.Close()
	if err != nil || res.IsError {
		t.Fatalf("a call with the kept token: %v, %+v", err, res)
	}
	if s := stats(); s.Authorizations != 1 || s.Calls != 1 {
		t.Errorf("after a bridge's call: %d authorizations, %d calls; want 1, 1", s.Authorizations, s.Calls)
	}
	if out := run("auth", "login", mcpURL); !strings.Contains(out, "already") {
		t.Errorf("auth login with a token kept: %q", out)
	}
	run("auth", "logout", mcpURL)
	if kept := secretsKept(t, bus); strings.Contains(kept, "mcp-cancel-proxy") {
		t.Errorf("after logout, the keyring still holds\n%s", kept)
	}
	if out := run("auth", "list"); !strings.Contains(out, "signed in to no server") {
		t.Errorf("auth list after logout: %q", out)
	}
	signInAtStartOnly(t, mcpURL, env, &logs, "--keyring", "off")
	if s := stats(); s.Authorizations != 2 || s.Calls != 1 {
		t.Errorf("a bridge with --oauth start and no request: %d authorizations, %d calls; want 2, 1", s.Authorizations, s.Calls)
	}
	if now := stats().Tokens; !filesHold(store, now[len(now)-1]) || strings.Contains(secretsKept(t, bus), "mcp-cancel-proxy") {
		t.Error("with --keyring off, the token is not in the store's file alone")
	}
	if written := logs.String(); strings.Contains(written, tokens[len(tokens)-1]) {
		t.Error("a token the server issued is in what the proxy wrote")
	}
}

// signInAtStartOnly starts a bridge with --oauth start, whose client
// sends nothing, waits for its sign-in, and ends it.
func signInAtStartOnly(t *testing.T, mcpURL string, env []string, logs *lockedBuffer, flags ...string) {
	t.Helper()
	args, feed := eventsFor(t, append([]string{"--upstream", mcpURL, "--oauth", "start"}, flags...))
	cmd := exec.Command(proxyBin, args...)
	cmd.Env = append(os.Environ(), env...)
	cmd.Stderr = logs
	stdin, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	feed.waitFor(t, events.SignedIn)
	stdin.Close() // the client leaves
	if err := cmd.Wait(); err != nil {
		t.Errorf("the bridge: %v", err)
	}
}

// filesHold reports whether any file under dir holds s.
func filesHold(dir, s string) bool {
	found := false
	filepath.WalkDir(dir, func(p string, d os.DirEntry, err error) error {
		if err == nil && !d.IsDir() {
			b, _ := os.ReadFile(p)
			found = found || strings.Contains(string(b), s)
		}
		return nil
	})
	return found
}
