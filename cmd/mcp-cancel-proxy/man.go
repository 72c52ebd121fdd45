package main

import (
	"bufio"
	"flag"
	"fmt"
	"io"
	"strings"
)

// manCommand is `mcp-cancel-proxy man`: the manual page, in roff, made
// from the same flag definitions the commands parse with.
func manCommand(args []string, stdout, stderr io.Writer) int {
	if isHelp(args) {
		fmt.Fprint(stdout, "usage: mcp-cancel-proxy man\n\nPrints the manual page (roff): mcp-cancel-proxy man > mcp-cancel-proxy.1; man -l mcp-cancel-proxy.1\n")
		return 0
	}
	if len(args) != 0 {
		fmt.Fprintln(stderr, "usage: mcp-cancel-proxy man")
		return exitUsage
	}
	w := bufio.NewWriter(stdout)
	writeMan(w, version())
	if err := w.Flush(); err != nil {
		fmt.Fprintln(stderr, "mcp-cancel-proxy man:", err)
		return 1
	}
	return 0
}

// writeMan writes the manual page for the given version.
func writeMan(w io.Writer, ver string) {
	cmds := commands()
	fmt.Fprintf(w, ".TH MCP-CANCEL-PROXY 1 \"\" \"mcp-cancel-proxy %s\" \"User Commands\"\n", roff(ver))
	fmt.Fprint(w, ".SH NAME\nmcp-cancel-proxy \\- make cancellation of MCP tool calls work, for servers already deployed\n.SH SYNOPSIS\n")
	for i, c := range cmds {
		if i > 0 {
			fmt.Fprint(w, ".br\n")
		}
		fmt.Fprintf(w, ".B %s\n", roff(strings.TrimSpace("mcp-cancel-proxy "+c.name)))
		if c.flags != nil {
			fmt.Fprint(w, "[\\fIflags\\fR]\n")
		}
		if c.args != "" {
			fmt.Fprintf(w, "%s\n", roff(c.args))
		}
	}
	fmt.Fprint(w, ".SH DESCRIPTION\n")
	_, desc, _ := strings.Cut(usage, "\n\n")
	desc, _, _ = strings.Cut(desc, "\n\nflags:")
	fmt.Fprintf(w, "%s\n.PP\nNothing after the server command is read by the proxy; put \\fB\\-\\-\\fR before it.\n", roff(strings.Join(strings.Fields(desc), " ")))
	fmt.Fprint(w, ".SH OPTIONS\n")
	manFlags(w, cmds[0].flags())
	fmt.Fprint(w, ".SH COMMANDS\n")
	for _, c := range cmds[1:] {
		fmt.Fprintf(w, ".TP\n.B %s\n%s.\n", roff(strings.TrimSpace(c.name+" "+c.args)), roff(c.summary))
		if c.flags != nil {
			fmt.Fprint(w, ".RS\n")
			manFlags(w, c.flags())
			fmt.Fprint(w, ".RE\n")
		}
	}
	fmt.Fprint(w, `.SH ENVIRONMENT
.TP
.B HTTPS_PROXY, HTTP_PROXY, NO_PROXY
The bridge (\-\-upstream alone) reaches its upstream through the proxy they name; a loopback upstream never.
.TP
.B OTEL_EXPORTER_OTLP_ENDPOINT
Export traces to this collector when tracing.endpoint is not set.
.TP
.B SSL_CERT_FILE, SSL_CERT_DIR
CA certificates trusted for HTTPS, besides the system's.
.SH EXIT STATUS
The wrapper exits with its server's status; 2 for a command line it cannot understand; 1 when the bridge's upstream ends the session.
.PP
.B check
exits 0 when the server broke no MUST of the spec (SHOULD failures included), 3 when it broke one, 1 when the check could not run (no server, no such tool), and 2 for a usage error.
.SH SEE ALSO
The README and docs/ of the source, and config.example.yaml, which documents every setting.
`)
}

// manFlags writes fs's flags as a tagged list.
func manFlags(w io.Writer, fs *flag.FlagSet) {
	fs.VisitAll(func(f *flag.Flag) {
		value, text := flag.UnquoteUsage(f)
		fmt.Fprintf(w, ".TP\n.BR \\-\\-%s", roff(f.Name))
		if value != "" {
			fmt.Fprintf(w, " \" \\fI%s\\fR\"", roff(value))
		}
		fmt.Fprintf(w, "\n%s\n", roff(text))
	})
}

// roff escapes text for a roff line: backslashes, dashes, and a leading
// period or quote that would make it a request.
func roff(s string) string {
	s = strings.ReplaceAll(s, `\`, `\e`)
	s = strings.ReplaceAll(s, "-", `\-`)
	if strings.HasPrefix(s, ".") || strings.HasPrefix(s, "'") {
		s = `\&` + s
	}
	return s
}
