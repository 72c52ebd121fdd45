package config

import (
	"crypto/sha256"
	"encoding/hex"
	"net/url"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
)

// DefaultHookStore returns the hook store's directory when
// policy.hooks.store is not set: the user's local state, where a restarted
// proxy finds its hooks again (never a cache, which may be wiped):
//
//   - Linux and the BSDs: $XDG_STATE_HOME/mcp-cancel-proxy/hooks, or
//     ~/.local/state/mcp-cancel-proxy/hooks;
//   - macOS: ~/Library/Application Support/mcp-cancel-proxy/hooks;
//   - Windows: %LocalAppData%\mcp-cancel-proxy\hooks (not roaming).
//
// It returns "" when the platform names no such place (no home directory).
func DefaultHookStore() string {
	return hookStoreFor(runtime.GOOS, os.Getenv, os.UserHomeDir)
}

// hookStoreFor is DefaultHookStore for goos, with the environment and the
// home directory as given.
func hookStoreFor(goos string, getenv func(string) string, home func() (string, error)) string {
	var base string
	switch goos {
	case "windows":
		base = getenv("LocalAppData")
	case "darwin", "ios":
		if h, err := home(); err == nil && h != "" {
			base = filepath.Join(h, "Library", "Application Support")
		}
	default:
		base = getenv("XDG_STATE_HOME")
		if !filepath.IsAbs(base) { // the XDG rules: a relative path is to be ignored
			base = ""
			if h, err := home(); err == nil && h != "" {
				base = filepath.Join(h, ".local", "state")
			}
		}
	}
	if base == "" {
		return ""
	}
	return filepath.Join(base, "mcp-cancel-proxy", "hooks")
}

// ServerStoreName names a server's own hook store, under the platform's
// directory: a short readable label of the server (its program or package,
// or an HTTP upstream's host) and a hash of its whole command line or URL,
// which are never written out themselves (they can hold secrets). The same
// server gets the same name, so that a proxy adopts only the jobs a dead
// proxy of the same server left, and one server's status page and hooks
// list show only its jobs.
func ServerStoreName(argv []string, upstream string) string {
	label, whole := "", upstream
	if upstream != "" {
		if u, err := url.Parse(upstream); err == nil && u.Host != "" {
			label = u.Host
		}
	} else {
		label = commandLabel(argv)
		whole = strings.Join(argv, "\x00")
	}
	sum := sha256.Sum256([]byte(whole))
	return cleanLabel(label) + "-" + hex.EncodeToString(sum[:4])
}

// launchers are programs that run the server named by a later argument.
var launchers = []string{"npx", "node", "nodejs", "bun", "bunx", "deno", "uvx", "uv", "python", "python3", "py",
	"pipx", "docker", "podman", "npm", "pnpm", "yarn", "sh", "bash", "cmd", "java", "go", "ruby", "php", "dotnet"}

// commandLabel is the name of the program a command line runs: its first
// word, or for a launcher (npx, node, uvx, docker...) its first argument
// that is no flag, as a file's or package's base name.
func commandLabel(argv []string) string {
	if len(argv) == 0 {
		return ""
	}
	name := baseName(argv[0])
	if !slices.Contains(launchers, strings.ToLower(name)) {
		return name
	}
	for _, a := range argv[1:] {
		if a != "" && !strings.HasPrefix(a, "-") && !slices.Contains([]string{"run", "exec", "x", "dlx", "tool", "/c", "-m"}, a) {
			return baseName(a)
		}
	}
	return name
}

// baseName is a path's or package's last part, without its extension
// and version: /srv/reports/index.js -> index, @scope/pkg@1.2 -> pkg.
func baseName(s string) string {
	s = s[strings.LastIndexAny(s, `/\`)+1:]
	if i := strings.Index(s, "@"); i > 0 {
		s = s[:i]
	}
	if ext := filepath.Ext(s); ext != "" && len(ext) <= 5 {
		s = strings.TrimSuffix(s, ext)
	}
	return s
}

// cleanLabel keeps a label's letters, digits, dots, dashes and
// underscores, at most 32 of them ("server" if none).
func cleanLabel(s string) string {
	var b strings.Builder
	for _, r := range strings.ToLower(s) {
		switch {
		case r >= 'a' && r <= 'z' || r >= '0' && r <= '9' || r == '.' || r == '-' || r == '_':
			b.WriteRune(r)
		case r == ':':
			b.WriteByte('_')
		}
		if b.Len() == 32 {
			break
		}
	}
	if b.Len() == 0 {
		return "server"
	}
	return b.String()
}
