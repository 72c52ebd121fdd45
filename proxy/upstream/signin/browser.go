package signin

import (
	"fmt"
	"io"
	"os"
	"os/exec"
	"runtime"
	"strings"
)

// OpenBrowser opens url in the user's browser: with the commands the
// BROWSER environment variable names, as xdg-open and Python's webbrowser
// read it (a list split by the OS's path list separator; "%s" in a command
// stands for the URL, which is otherwise its last argument), the first that
// starts; else with the OS's opener. It writes the URL to w either way, so
// that a user without a browser on this machine can open it elsewhere.
func OpenBrowser(url string, w io.Writer) error {
	fmt.Fprintf(w, "mcp-cancel-proxy: sign in to the MCP server in your browser: %s\n", url)
	cmd, err := startBrowser(url, w)
	if err != nil {
		return err
	}
	go cmd.Wait() // reaped whenever the browser returns (xdg-open at once)
	return nil
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
