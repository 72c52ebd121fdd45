package main

import (
	"bytes"
	"strings"
	"testing"
)

// TestAuthCommandArguments: auth answers a missing verb or URL with its
// usage, lists an empty store as no server, and refuses a client key
// without the client credentials grant before it reaches any server.
func TestAuthCommandArguments(t *testing.T) {
	t.Parallel()
	store := t.TempDir()
	for _, c := range []struct {
		args     []string
		code     int
		out, err string
	}{
		{[]string{"auth"}, exitUsage, "", "usage: mcp-cancel-proxy auth login"},
		{[]string{"auth", "logout", "--store", store}, exitUsage, "", "usage:"},
		{[]string{"auth", "list", "--store", store, "extra"}, exitUsage, "", "usage:"},
		{[]string{"auth", "list", "--store", store}, 0, "signed in to no server", ""},
		{[]string{"auth", "logout", "--store", store, "--keyring", "off", "https://mcp.example/mcp"}, 1, "", "not signed in to https://mcp.example/mcp"},
		{[]string{"auth", "login", "--store", store, "--client-key-file", "k.pem", "http://127.0.0.1:1/mcp"}, 1, "", "--client-key-file is for --oauth client_credentials only"},
	} {
		var out, errb bytes.Buffer
		code := authCommand(c.args[1:], &out, &errb)
		if code != c.code || !strings.Contains(out.String(), c.out) || !strings.Contains(errb.String(), c.err) {
			t.Errorf("%q: exit %d, stdout %q, stderr %q; want %d, %q, %q", c.args, code, out.String(), errb.String(), c.code, c.out, c.err)
		}
	}
}
