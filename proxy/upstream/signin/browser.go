package signin

import (
	"encoding/json"
	"fmt"
	"html"
	"io"
	neturl "net/url"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
)

// OpenBrowser opens url in the user's browser: with the commands the
// BROWSER environment variable names, as xdg-open and Python's webbrowser
// read it (a list split by the OS's path list separator; "%s" in a command
// stands for the URL, which is otherwise its last argument), the first that
// starts; else with the OS's opener. It writes the URL to w either way, so
// that a user without a browser on this machine can open it elsewhere.
//
// The browser is given not url but a page that sends it on to url, in a
// directory only the user can read: an authorization URL (its state, code
// challenge and redirect port) in a process's arguments is readable by
// every local user. done removes the page; call it once the sign-in ends.
func OpenBrowser(url string, w io.Writer) (done func(), err error) {
	fmt.Fprintf(w, "mcp-cancel-proxy: sign in to the MCP server in your browser: %s\n", url)
	page, done, err := launcher(url)
	if err != nil {
		return func() {}, fmt.Errorf("no page could be written for the browser (%w): open the URL above", err)
	}
	cmd, err := startBrowser(page, w)
	if err != nil {
		return done, err
	}
	go cmd.Wait() // reaped whenever the browser returns (xdg-open at once)
	return done, nil
}

// launcherName is the page launcher writes.
const launcherName = "sign-in.html"

// launcher writes a page that sends the browser on to url, in a new
// directory only the user can read (0700, the page 0600), and returns the
// page's file URL and what removes it.
func launcher(url string) (page string, done func(), err error) {
	dir, err := os.MkdirTemp("", "mcp-cancel-proxy-sign-in-")
	if err != nil {
		return "", nil, err
	}
	done = func() { os.RemoveAll(dir) }
	js, _ := json.Marshal(url)
	body := fmt.Sprintf(`<!doctype html><meta charset="utf-8"><meta name="referrer" content="no-referrer">`+
		`<meta http-equiv="refresh" content="0;url=%s"><title>Sign in</title>`+
		`<p><a id="sign-in" href="%s">Sign in to the MCP server</a></p><script>location.replace(%s)</script>`,
		html.EscapeString(url), html.EscapeString(url), js)
	path := filepath.Join(dir, launcherName)
	if err := os.WriteFile(path, []byte(body), 0o600); err != nil {
		done()
		return "", nil, err
	}
	return (&neturl.URL{Scheme: "file", Path: filepath.ToSlash(path)}).String(), done, nil
}

// startBrowser starts the first browser command that starts, with url.
func startBrowser(url string, w io.Writer) (*exec.Cmd, error) {
	for _, cmdline := range browsers(os.Getenv("BROWSER")) {
		args := strings.Fields(cmdline)
		if len(args) == 0 {
			continue
		}
		substituted := false
		for i, a := range args {
			if strings.Contains(a, "%s") {
				args[i], substituted = strings.ReplaceAll(a, "%s", url), true
			}
		}
		if !substituted {
			args = append(args, url)
		}
		cmd := exec.Command(args[0], args[1:]...)
		cmd.Stdout, cmd.Stderr = w, w
		if cmd.Start() == nil {
			return cmd, nil
		}
	}
	return nil, fmt.Errorf("no browser could be opened: open the URL above")
}

// browsers returns the commands to try: BROWSER's, then the OS's opener.
func browsers(env string) []string {
	var out []string
	if env != "" {
		out = strings.Split(env, string(os.PathListSeparator))
	}
	switch runtime.GOOS {
	case "darwin":
		out = append(out, "open")
	case "windows":
		out = append(out, "rundll32 url.dll,FileProtocolHandler")
	default:
		out = append(out, "xdg-open")
	}
	return out
}
