package config

import (
	"os"
	"path/filepath"
	"runtime"
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
