package config

import (
	"errors"
	"path/filepath"
	"strings"
	"testing"
)

func TestHookStoreFor(t *testing.T) {
	env := func(vars map[string]string) func(string) string { return func(k string) string { return vars[k] } }
	home := func() (string, error) { return "/home/ada", nil }
	homeless := func() (string, error) { return "", errors.New("no home") }
	for _, c := range []struct {
		goos string
		env  map[string]string
		home func() (string, error)
		want string
	}{
		{"linux", nil, home, "/home/ada/.local/state/mcp-cancel-proxy/hooks"},
		{"linux", map[string]string{"XDG_STATE_HOME": "/var/lib/ada"}, home, "/var/lib/ada/mcp-cancel-proxy/hooks"},
		{"freebsd", map[string]string{"XDG_STATE_HOME": "relative"}, home, "/home/ada/.local/state/mcp-cancel-proxy/hooks"},
		{"linux", nil, homeless, ""},
		{"darwin", nil, home, "/home/ada/Library/Application Support/mcp-cancel-proxy/hooks"},
		{"windows", map[string]string{"LocalAppData": `C:\Users\ada\AppData\Local`}, home,
			filepath.Join(`C:\Users\ada\AppData\Local`, "mcp-cancel-proxy", "hooks")},
		{"windows", nil, home, ""},
	} {
		if got := hookStoreFor(c.goos, env(c.env), c.home); got != filepath.FromSlash(c.want) && got != c.want {
			t.Errorf("%s %v: %q, want %q", c.goos, c.env, got, c.want)
		}
	}
}

// TestServerStoreName: a short label of what the server is, and a hash of
// the whole command line or URL; the same server, the same name.
func TestServerStoreName(t *testing.T) {
	for _, c := range []struct {
		argv     []string
		upstream string
		label    string
	}{
		{[]string{"npx", "-y", "@modelcontextprotocol/server-everything"}, "", "server-everything"},
		{[]string{"node", "/srv/reports/dist/index.js", "stdio"}, "", "index"},
		{[]string{"uvx", "reports-mcp@1.2"}, "", "reports-mcp"},
		{[]string{"/usr/local/bin/my-server", "--token", "s3cret"}, "", "my-server"},
		{[]string{`C:\Tools\srv.exe`}, "", "srv"},
		{[]string{"docker", "run", "-i", "--rm", "ghcr.io/acme/mcp"}, "", "mcp"},
		{nil, "https://mcp.example.com:8443/mcp?key=s3cret", "mcp.example.com_8443"},
		{[]string{"∂∂"}, "", "server"},
	} {
		name := ServerStoreName(c.argv, c.upstream)
		label, hash, ok := strings.Cut(name, "-"+name[len(name)-8:])
		if !ok || hash != "" || label != c.label || strings.Contains(name, "s3cret") {
			t.Errorf("ServerStoreName(%q, %q) = %q, want the label %q and a hash", c.argv, c.upstream, name, c.label)
		}
		if again := ServerStoreName(c.argv, c.upstream); again != name {
			t.Errorf("the same server named %q, then %q", name, again)
		}
	}
	if ServerStoreName([]string{"srv", "a"}, "") == ServerStoreName([]string{"srv", "b"}, "") {
		t.Error("two command lines share a store")
	}
}
