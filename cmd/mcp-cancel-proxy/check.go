package main

import (
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"strings"
	"time"

	"go.uber.org/zap"

	"github.com/mcp-cancel-proxy/mcp-cancel-proxy/internal/check"
	"github.com/mcp-cancel-proxy/mcp-cancel-proxy/internal/config"
	"github.com/mcp-cancel-proxy/mcp-cancel-proxy/proxy/child"
	"github.com/mcp-cancel-proxy/mcp-cancel-proxy/proxy/upstream"
)

// exitMust is check's status when the server broke a MUST of the spec.
const exitMust = 3

// checkHead heads check's usage.
const checkHead = "usage: mcp-cancel-proxy check [flags] -- COMMAND ARGS...\n       mcp-cancel-proxy check [flags] --url URL\n\n" +
	"Connects to a server as a client and reports how it handles cancellation of the call --tool and --args name\n" +
	"(it runs nothing else; without --tool it lists the tools). Exits 3 when the server breaks a MUST of the spec.\n\nflags:\n"

// checkOptions are the values of check's flags.
type checkOptions struct {
	url, tool, args             *string
	runs                        *int
	cancelAfter, watch, timeout *time.Duration
	json                        *bool
	headers                     *[]upstream.Header
	oauth                       *config.OAuth
}

// checkFlags are check's flags.
func checkFlags() (*flag.FlagSet, checkOptions) {
	fs := flag.NewFlagSet("check", flag.ContinueOnError)
	headers := new([]upstream.Header)
	fs.Func("header", "with --url: a `Name: value` header for every request (repeatable; ${VAR} takes VAR from the environment)", func(v string) error {
		h, err := parseHeader(v)
		*headers = append(*headers, h)
		return err
	})
	oauth := new(config.OAuth)
	oauthFlags(fs, oauth, "with --url: ")
	return fs, checkOptions{
		oauth:       oauth,
		url:         fs.String("url", "", "check the Streamable HTTP or HTTP+SSE server at this `URL` instead of a command"),
		tool:        fs.String("tool", "", "the `name` of the tool to call and cancel"),
		args:        fs.String("args", "{}", "the tool's arguments, a JSON `object`"),
		runs:        fs.Int("runs", 3, "how many times to call and cancel it (besides the race and the task)"),
		cancelAfter: fs.Duration("cancel-after", time.Second, "cancel each call this `long` after it"),
		watch:       fs.Duration("watch", 5*time.Second, "listen this `long` after each cancel"),
		timeout:     fs.Duration("timeout", 30*time.Second, "wait at most this `long` for an answer the server owes"),
		json:        fs.Bool("json", false, "print the report as JSON"),
		headers:     headers,
	}
}

// checkCommand is `mcp-cancel-proxy check`.
func checkCommand(args []string, stdout, stderr io.Writer) int {
	fs, o := checkFlags()
	if help, err := parseFlags(fs, args, checkHead, stdout, stderr); help || err != nil {
		return exitOf(help)
	}
	argv := fs.Args()
	if (*o.url == "") == (len(argv) == 0) {
		fmt.Fprintln(stderr, "mcp-cancel-proxy check: give a server: -- COMMAND ARGS... or --url URL (one of them)")
		return exitUsage
	}
	var raw json.RawMessage
	if err := json.Unmarshal([]byte(*o.args), &raw); err != nil || !strings.HasPrefix(strings.TrimSpace(*o.args), "{") {
		fmt.Fprintf(stderr, "mcp-cancel-proxy check: --args must be a JSON object, not %q\n", *o.args)
		return exitUsage
	}
	opts := check.Options{Tool: *o.tool, Args: raw, Runs: *o.runs, CancelAfter: *o.cancelAfter, Watch: *o.watch, Timeout: *o.timeout,
		Progress: func(s string) { fmt.Fprintln(stderr, "check:", s) }}
	conn, err := dialCheck(*o.url, *o.headers, *o.oauth, argv, stderr)
	if err != nil {
		fmt.Fprintln(stderr, "mcp-cancel-proxy check:", err)
		return 1
	}
	b := check.OverConn(conn)
	if *o.tool == "" {
		return listTools(b, opts, stdout, stderr)
	}
	fmt.Fprintf(stderr, "check: will run tools/call %s %s %d times and cancel each, then once more cancelled at once (and as a task, if the server offers it)\n",
		*o.tool, raw, *o.runs)
	opts.OverHTTP = *o.url != ""
	r, err := check.Run(b, opts)
	if err != nil {
		fmt.Fprintln(stderr, "mcp-cancel-proxy check:", err)
		return 1
	}
	if *o.url != "" && !upstream.SpeaksSSE(conn) { // an HTTP+SSE server's URL takes no Streamable HTTP POST
		r.Lines = append(r.Lines, check.CancelPOST(*o.url, *o.headers, r.Server.Protocol, *o.timeout))
	}
	if *o.json {
		enc := json.NewEncoder(stdout)
		enc.SetIndent("", "  ")
		enc.Encode(r)
	} else {
		check.Print(stdout, r)
	}
	if r.BrokeMust() {
		return exitMust
	}
	return 0
}

// dialCheck reaches the server check is given: a child for argv, or a
// session of the server at rawURL, as the bridge does.
func dialCheck(rawURL string, headers []upstream.Header, oauth config.OAuth, argv []string, stderr io.Writer) (upstream.Conn, error) {
	if rawURL != "" {
		signIn, err := signInFor(rawURL, oauth, headers, zap.NewNop())
		if err != nil {
			return nil, err
		}
		return upstream.Dial(rawURL, upstream.TransportAuto, upstream.Options{Headers: headers, Auth: signIn}, zap.NewNop())
	}
	return (&upstream.Command{Argv: argv, Options: child.Options{Stderr: stderr, TermAfter: 2 * time.Second, KillAfter: 2 * time.Second}}).Dial(zap.NewNop())
}

// listTools prints the server's tools, for check without --tool.
func listTools(b check.Lines, o check.Options, stdout, stderr io.Writer) int {
	s, tools, err := check.List(b, o)
	if err != nil {
		fmt.Fprintln(stderr, "mcp-cancel-proxy check:", err)
		return 1
	}
	fmt.Fprintf(stdout, "%s %s (protocol %s): %d tools; name one with --tool NAME --args JSON\n", check.Printable(s.Name), check.Printable(s.Version), check.Printable(string(s.Protocol)), len(tools))
	for _, t := range tools {
		fmt.Fprintf(stdout, "  %-32s %s\n", check.Printable(t.Name), check.Printable(firstLine(t.Description)))
	}
	return 0
}

func firstLine(s string) string {
	s, _, _ = strings.Cut(s, "\n")
	return s
}
