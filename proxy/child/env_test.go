//go:build unix

package child_test

import (
	"io"
	"strings"
	"testing"
	"time"

	"github.com/mcp-cancel-proxy/mcp-cancel-proxy/proxy/child"
)

// TestServerEnvironment: the server the proxy starts gets none of the
// proxy's own variables (a server's tool, such as server-everything's
// get-env, would hand the NATS token to any client), but those a setting
// passes by name, and every other variable (OTEL_* among them).
func TestServerEnvironment(t *testing.T) {
	t.Setenv("MCP_CANCEL_PROXY_NATS_TOKEN", "s3cret")
	t.Setenv("mcp_cancel_proxy_lower", "s3cret")
	t.Setenv("MCP_CANCEL_PROXY_PASSED", "yes")
	t.Setenv("OTEL_EXPORTER_OTLP_ENDPOINT", "http://127.0.0.1:4318")
	p, err := child.Start([]string{"sh", "-c", "env; exec cat"}, child.Options{TermAfter: 100 * time.Millisecond,
		KillAfter: 100 * time.Millisecond, Stderr: io.Discard, PassEnv: []string{"MCP_CANCEL_PROXY_PASSED"}})
	if err != nil {
		t.Fatal(err)
	}
	defer p.Stop()
	p.Stdin.Close()
	out, _ := io.ReadAll(p.Stdout)
	env := "\n" + string(out)
	for _, bad := range []string{"MCP_CANCEL_PROXY_NATS_TOKEN=", "mcp_cancel_proxy_lower="} {
		if strings.Contains(env, "\n"+bad) {
			t.Errorf("the server got %s", bad)
		}
	}
	for _, want := range []string{"MCP_CANCEL_PROXY_PASSED=yes", "OTEL_EXPORTER_OTLP_ENDPOINT=http://127.0.0.1:4318", "PATH="} {
		if !strings.Contains(env, "\n"+want) {
			t.Errorf("the server lacks %s:\n%s", want, out)
		}
	}
}
