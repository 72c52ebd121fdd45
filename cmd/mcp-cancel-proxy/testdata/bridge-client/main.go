// Command bridge-client is the client under test of the MCP conformance
// suite's client scenarios, for the bridge: the suite runs it with the
// scenario's server URL as its last argument, and it runs the bridge
// (PROXY_BIN --upstream URL) as a stdio server, with the go-sdk client,
// which connects, lists the tools and calls test-tool (or add_numbers),
// as the go-sdk's own conformance client does. The bridge is the client the
// suite judges: it signs in (OAuth) where the scenario asks, opening the
// authorization URL with $BROWSER. A scenario's pre-registered client
// (MCP_CONFORMANCE_CONTEXT) is given to the bridge with --client-id and
// --client-secret-file; its client ID metadata document URL is always
// given. BRIDGE_ARGS, split on spaces, are more flags for the bridge.
//
// With OWN_OAUTH set, the go-sdk client does OAuth itself (its
// auth.AuthorizationCodeHandler, as the go-sdk's conformance client does),
// straight to URL (OWN_OAUTH=direct) or through the sidecar
// (OWN_OAUTH=sidecar: PROXY_BIN --listen on a free port --upstream URL),
// which must be transparent to it.
//
// "bridge-client browse URL" is the headless browser the bridge opens
// (BROWSER): it follows URL's redirects, as the suite's authorization
// server sends the browser straight back to the bridge's redirect URI.
// "bridge-client browse-once FILE URL" does so only if FILE does not
// exist, and makes it: a user who signs in once; later it writes URL to
// FILE.fifo, a named pipe the test reads, for the test to finish the
// sign-in when it will.
package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"html"
	"net/http"
	neturl "net/url"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/modelcontextprotocol/go-sdk/auth"
	"github.com/modelcontextprotocol/go-sdk/mcp"
	"github.com/modelcontextprotocol/go-sdk/oauthex"
)

func main() {
	if err := run(); err != nil {
		fmt.Fprintln(os.Stderr, "bridge-client:", err)
		os.Exit(1)
	}
}

func run() error {
	if len(os.Args) < 2 {
		return fmt.Errorf("usage: bridge-client URL | bridge-client browse URL")
	}
	if os.Args[1] == "browse-once" && len(os.Args) == 4 {
		if _, err := os.Stat(os.Args[2]); err == nil {
			u, err := authorizationURL(os.Args[3])
			if err != nil {
				return err
			}
			return os.WriteFile(os.Args[2]+".fifo", []byte(u), 0o600)
		}
		os.WriteFile(os.Args[2], nil, 0o600)
		os.Args = []string{os.Args[0], "browse", os.Args[3]}
	}
	if os.Args[1] == "browse" && len(os.Args) == 3 {
		u, err := authorizationURL(os.Args[2])
		if err != nil {
			return err
		}
		resp, err := http.Get(u) // redirects followed
		if err != nil {
			return err
		}
		resp.Body.Close()
		return nil
	}
	url := os.Args[len(os.Args)-1]
	if mode := os.Getenv("OWN_OAUTH"); mode != "" {
		return ownOAuth(mode, url)
	}
	args := []string{"--upstream", url, "--log-level", "debug", "--client-metadata-url", "https://conformance-test.local/client-metadata.json"}
	var conf struct {
		ClientID      string `json:"client_id"`
		ClientSecret  string `json:"client_secret"`
		PrivateKeyPEM string `json:"private_key_pem"`
	}
	json.Unmarshal([]byte(os.Getenv("MCP_CONFORMANCE_CONTEXT")), &conf)
	dir, err := os.MkdirTemp("", "bridge-client")
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)
	switch {
	case conf.ClientID != "" && conf.PrivateKeyPEM != "":
		key := filepath.Join(dir, "key.pem")
		os.WriteFile(key, []byte(conf.PrivateKeyPEM), 0o600)
		args = append(args, "--client-id", conf.ClientID, "--client-key-file", key)
	case conf.ClientID != "":
		secret := filepath.Join(dir, "secret")
		os.WriteFile(secret, []byte(conf.ClientSecret+"\n"), 0o600)
		args = append(args, "--client-id", conf.ClientID, "--client-secret-file", secret)
	}
	args = append(args, strings.Fields(os.Getenv("BRIDGE_ARGS"))...)
	cmd := exec.Command(os.Getenv("PROXY_BIN"), args...)
	cmd.Env = append(os.Environ(), "XDG_STATE_HOME="+dir) // a store of its own: every scenario signs in
	cmd.Stderr = os.Stderr
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	client := mcp.NewClient(&mcp.Implementation{Name: "bridge-client", Version: "1"}, nil)
	cs, err := client.Connect(ctx, &mcp.CommandTransport{Command: cmd}, sessionOptions())
	if err != nil {
		return fmt.Errorf("connecting through the bridge: %w", err)
	}
	defer cs.Close()
	return listAndCall(ctx, cs)
}

// sessionOptions has the client start as a real client of the scenario's
// revision does (MCP_CONFORMANCE_PROTOCOL_VERSION): server/discover first
// for 2026-07-28, initialize for the revisions before it.
func sessionOptions() *mcp.ClientSessionOptions {
	if v := os.Getenv("MCP_CONFORMANCE_PROTOCOL_VERSION"); v != "" {
		return &mcp.ClientSessionOptions{ProtocolVersion: v}
	}
	return nil
}

// authorizationURL returns the URL a browser is given to open: the bridge
// gives the file URL of a page that sends the browser on to the
// authorization URL (its link's href), which a headless browser reads.
func authorizationURL(given string) (string, error) {
	u, err := neturl.Parse(given)
	if err != nil || u.Scheme != "file" {
		return given, nil
	}
	page, err := os.ReadFile(u.Path)
	if err != nil {
		return "", err
	}
	_, rest, ok := strings.Cut(string(page), `id="sign-in" href="`)
	href, _, ok2 := strings.Cut(rest, `"`)
	if !ok || !ok2 {
		return "", fmt.Errorf("the sign-in page %s has no link", u.Path)
	}
	return html.UnescapeString(href), nil
}

// listAndCall lists the tools and makes the calls the scenario names
// (its context's toolCalls); without them, it calls test-tool, or
// add_numbers, or, when neither is listed, every tool listed.
func listAndCall(ctx context.Context, cs *mcp.ClientSession) error {
	tools, err := cs.ListTools(ctx, nil)
	if err != nil {
		return fmt.Errorf("tools/list: %w", err)
	}
	var scenario struct {
		ToolCalls []mcp.CallToolParams `json:"toolCalls"`
	}
	json.Unmarshal([]byte(os.Getenv("MCP_CONFORMANCE_CONTEXT")), &scenario)
	if len(scenario.ToolCalls) == 0 && !slices.ContainsFunc(tools.Tools, func(t *mcp.Tool) bool { return t.Name == "test-tool" || t.Name == "add_numbers" }) {
		for _, t := range tools.Tools {
			scenario.ToolCalls = append(scenario.ToolCalls, mcp.CallToolParams{Name: t.Name, Arguments: map[string]any{}})
		}
	}
	for _, call := range scenario.ToolCalls {
		if _, err := cs.CallTool(ctx, &call); err != nil {
			return fmt.Errorf("tools/call %s: %w", call.Name, err)
		}
	}
	if len(scenario.ToolCalls) > 0 {
		return nil
	}
	name := "test-tool"
	if slices.ContainsFunc(tools.Tools, func(t *mcp.Tool) bool { return t.Name == "add_numbers" }) {
		name = "add_numbers"
	}
	res, err := cs.CallTool(ctx, &mcp.CallToolParams{Name: name, Arguments: map[string]any{"a": 5, "b": 3}})
	if err != nil {
		return fmt.Errorf("tools/call %s: %w", name, err)
	}
	if res.IsError {
		return fmt.Errorf("tools/call %s: an error result", name)
	}
	return nil
}

// ownOAuth connects the go-sdk client, which signs in itself, to url or
// through the sidecar in front of it.
func ownOAuth(mode, url string) error {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	if mode == "sidecar" {
		addr, stop, err := startSidecar(ctx, url)
		if err != nil {
			return err
		}
		defer stop()
		url = "http://" + addr + "/mcp"
	}
	var conf struct {
		ClientID     string `json:"client_id"`
		ClientSecret string `json:"client_secret"`
	}
	json.Unmarshal([]byte(os.Getenv("MCP_CONFORMANCE_CONTEXT")), &conf)
	cfg := &auth.AuthorizationCodeHandlerConfig{
		RedirectURL:                    "http://localhost:3000/callback",
		AuthorizationCodeFetcher:       codeFromRedirect,
		ClientIDMetadataDocumentConfig: &auth.ClientIDMetadataDocumentConfig{URL: "https://conformance-test.local/client-metadata.json"},
		DynamicClientRegistrationConfig: &auth.DynamicClientRegistrationConfig{Metadata: &oauthex.ClientRegistrationMetadata{
			RedirectURIs: []string{"http://localhost:3000/callback"}}},
	}
	if conf.ClientID != "" {
		cfg.PreregisteredClient = &oauthex.ClientCredentials{ClientID: conf.ClientID,
			ClientSecretAuth: &oauthex.ClientSecretAuth{ClientSecret: conf.ClientSecret}}
	}
	h, err := auth.NewAuthorizationCodeHandler(cfg)
	if err != nil {
		return err
	}
	client := mcp.NewClient(&mcp.Implementation{Name: "own-oauth-client", Version: "1"}, nil)
	cs, err := client.Connect(ctx, &mcp.StreamableClientTransport{Endpoint: url, OAuthHandler: h}, nil)
	if err != nil {
		return fmt.Errorf("connecting: %w", err)
	}
	defer cs.Close()
	return listAndCall(ctx, cs)
}

// codeFromRedirect follows the authorization URL to its redirect, whose
// query has the code (the suite's authorization server consents at once).
func codeFromRedirect(ctx context.Context, args *auth.AuthorizationArgs) (*auth.AuthorizationResult, error) {
	client := &http.Client{CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, args.URL, nil)
	if err != nil {
		return nil, err
	}
	resp, err := client.Do(req)
	if err != nil {
		return nil, err
	}
	resp.Body.Close()
	loc, err := neturl.Parse(resp.Header.Get("Location"))
	if err != nil {
		return nil, err
	}
	q := loc.Query()
	return &auth.AuthorizationResult{Code: q.Get("code"), State: q.Get("state"), Iss: q.Get("iss")}, nil
}

// startSidecar starts the sidecar in front of url on a port of its own
// choosing, and returns the address it listens on, from its events feed:
// a port picked here and closed before the sidecar binds it may be another
// scenario's sidecar's by then (the suite runs scenarios at once), and a
// client that found something listening there talked to another
// scenario's server.
func startSidecar(ctx context.Context, url string) (addr string, stop func(), err error) {
	dir, err := os.MkdirTemp("", "bridge-client-sidecar")
	if err != nil {
		return "", nil, err
	}
	feed := filepath.Join(dir, "events.jsonl")
	sidecar := exec.Command(os.Getenv("PROXY_BIN"), "--listen", "127.0.0.1:0", "--events", feed, "--upstream", url, "--log-level", "warn")
	sidecar.Stderr = os.Stderr
	if err := sidecar.Start(); err != nil {
		os.RemoveAll(dir)
		return "", nil, err
	}
	exited := make(chan struct{})
	go func() { sidecar.Wait(); close(exited) }()
	stop = func() { sidecar.Process.Kill(); <-exited; os.RemoveAll(dir) }
	for { // until its feed says where it listens, it exits, or the deadline
		if addr := listeningAt(feed); addr != "" {
			return addr, stop, nil
		}
		select {
		case <-exited:
			stop()
			return "", nil, errors.New("the sidecar exited before it listened")
		case <-ctx.Done():
			stop()
			return "", nil, fmt.Errorf("the sidecar does not listen: %w", ctx.Err())
		case <-time.After(20 * time.Millisecond): // another program's feed: polled, bounded by ctx
		}
	}
}

// listeningAt returns the address the sidecar_listening event of the
// events feed at path names, or "".
func listeningAt(path string) string {
	b, _ := os.ReadFile(path)
	for line := range strings.Lines(string(b)) {
		var e struct{ Event, Listen string }
		if json.Unmarshal([]byte(line), &e) == nil && e.Event == "sidecar_listening" {
			return e.Listen
		}
	}
	return ""
}
