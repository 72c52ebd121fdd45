package child

import (
	"os"
	"slices"
	"strings"
)

// OwnPrefix begins the names of the proxy's own environment variables
// (MCP_CANCEL_PROXY_NATS_TOKEN, say): secrets of the proxy's, which the
// servers it starts and the hooks it runs never see unless a setting
// passes one on by name.
const OwnPrefix = "MCP_CANCEL_PROXY_"

// Environ returns the process's environment without the proxy's own
// variables, but those named in pass: what a server or a hook is started
// with. Every other variable goes through (OTEL_* among them, which an
// instrumented server needs).
func Environ(pass []string) []string {
	return slices.DeleteFunc(os.Environ(), func(kv string) bool {
		name, _, _ := strings.Cut(kv, "=")
		return strings.HasPrefix(strings.ToUpper(name), OwnPrefix) && !slices.Contains(pass, name)
	})
}
