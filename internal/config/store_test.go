package config

import (
	"errors"
	"path/filepath"
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
