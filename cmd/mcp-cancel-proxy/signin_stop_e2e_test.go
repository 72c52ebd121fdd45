//go:build unix

package main

import (
	"encoding/json"
	"net"
	"net/http"
	"os"
	"os/exec"
	"syscall"
	"testing"

	"github.com/mcp-cancel-proxy/mcp-cancel-proxy/internal/events"
)

// protectedServer serves, on loopback, an MCP endpoint that wants an OAuth
// token it never gets, with the metadata that lets a client start signing
// in: its resource metadata, and an authorization server whose user never
// comes. It returns the endpoint's URL.
func protectedServer(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	base := "http://" + ln.Addr().String()
	mux := http.NewServeMux()
	writeJSON := func(w http.ResponseWriter, v any) {
		w.Header().Set("Content-Type", "application/json")
		json.NewEncoder(w).Encode(v)
	}
	mux.HandleFunc("/mcp", func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("WWW-Authenticate", `Bearer resource_metadata="`+base+`/.well-known/oauth-protected-resource/mcp"`)
		http.Error(w, "sign in", http.StatusUnauthorized)
	})
	mux.HandleFunc("/.well-known/oauth-protected-resource/mcp", func(w http.ResponseWriter, r *http.Request) {
		writeJSON(w, map[string]any{"resource": base + "/mcp", "authorization_servers": []string{base}})
	})
	mux.HandleFunc("/.well-known/oauth-authorization-server", func(w http.ResponseWriter, r *http.Request) {
		writeJSON(w, map[string]any{"issuer": base, "authorization_endpoint": base + "/authorize", "token_endpoint": base + "/token",
			"registration_endpoint": base + "/register", "code_challenge_methods_supported": []string{"S256"},
			"response_types_supported": []string{"code"}})
	})
	mux.HandleFunc("/register", func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusCreated)
		json.NewEncoder(w).Encode(map[string]any{"client_id": "c1", "token_endpoint_auth_method": "none"})
	})
	srv := &http.Server{Handler: mux}
	done := make(chan struct{})
	go func() { defer close(done); srv.Serve(ln) }()
	t.Cleanup(func() { srv.Close(); <-done })
	return base + "/mcp"
}

// TestE2EBridgeStopsWhileSigningIn: a bridge whose sign-in waits for a user
// who never comes (no browser; a desktop client that does not pass BROWSER
// on) stops at once when its client closes stdin, on SIGTERM, and on SIGINT
// while the sign-in runs as the upstream is dialled (the transport probe):
// it waited up to five minutes, an orphan behind a client that had quit
// (issue 39, item 2). wait gives each 30 s.
func TestE2EBridgeStopsWhileSigningIn(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		name  string
		probe bool // the sign-in runs in the transport probe, before the client's first request
		stop  func(w *wrapped)
	}{
		{"stdin closed", false, func(w *wrapped) { w.stdin.Close() }},
		{"SIGTERM", false, func(w *wrapped) { w.cmd.Process.Signal(syscall.SIGTERM) }},
		{"SIGINT while dialling", true, func(w *wrapped) { w.cmd.Process.Signal(syscall.SIGINT) }},
		{"stdin closed while dialling", true, func(w *wrapped) { w.stdin.Close() }},
	} {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			url := protectedServer(t)
			args := []string{"--upstream", url, "--log-level", "debug"}
			if !c.probe {
				args = append(args, "--upstream-transport", "streamable")
			}
			cmd := exec.Command(proxyBin, args...)
			cmd.Env = append(os.Environ(), "BROWSER=true", "XDG_STATE_HOME="+t.TempDir())
			w := startCommand(t, cmd)
			if !c.probe {
				w.send(`{"jsonrpc":"2.0","id":"init","method":"initialize","params":{"protocolVersion":"2025-11-25","capabilities":{},"clientInfo":{"name":"e2e","version":"1"}}}`)
			}
			w.events.waitFor(t, events.SignInStarted)
			c.stop(w)
			w.wait() // 30 s at most: the sign-in's own wait is 5 minutes
		})
	}
}
