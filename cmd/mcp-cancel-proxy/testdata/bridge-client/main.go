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
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"
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
			return os.WriteFile(os.Args[2]+".fifo", []byte(os.Args[3]), 0o600)
		}
		os.WriteFile(os.Args[2], nil, 0o600)
		os.Args = []string{os.Args[0], "browse", os.Args[3]}
	}
	if os.Args[1] == "browse" && len(os.Args) == 3 {
		resp, err := http.Get(os.Args[2]) // redirects followed
		if err != nil {
			return err
		}
		resp.Body.Close()
		return nil
	}
	url := os.Args[len(os.Args)-1]
	args := []string{"--upstream", url, "--log-level", "debug", "--client-metadata-url", "https://conformance-test.local/client-metadata.json"}
	var conf struct {
		ClientID     string `json:"client_id"`
		ClientSecret string `json:"client_secret"`
	}
	json.Unmarshal([]byte(os.Getenv("MCP_CONFORMANCE_CONTEXT")), &conf)
	dir, err := os.MkdirTemp("", "bridge-client")
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)
	if conf.ClientID != "" {
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
	cs, err := client.Connect(ctx, &mcp.CommandTransport{Command: cmd}, nil)
	if err != nil {
		return fmt.Errorf("connecting through the bridge: %w", err)
	}
	defer cs.Close()
	tools, err := cs.ListTools(ctx, nil)
	if err != nil {
		return fmt.Errorf("tools/list: %w", err)
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
