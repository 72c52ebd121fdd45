package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"strings"
	"sync"
	"time"

	"github.com/mcp-cancel-proxy/mcp-cancel-proxy/framing"
	"github.com/mcp-cancel-proxy/mcp-cancel-proxy/internal/config"
	"github.com/mcp-cancel-proxy/mcp-cancel-proxy/proxy"
	"github.com/mcp-cancel-proxy/mcp-cancel-proxy/proxy/child"
	"github.com/mcp-cancel-proxy/mcp-cancel-proxy/proxy/stdio"
	"github.com/mcp-cancel-proxy/mcp-cancel-proxy/proxy/upstream"
)

// demoHead heads demo's usage.
const demoHead = "usage: mcp-cancel-proxy demo [flags] [-- COMMAND ARGS...]\n\nRuns the proxy between a scripted client and the bundled example server (or COMMAND), cancels two calls, and prints the timeline.\n\nflags:\n"

// demoOptions are the values of demo's flags.
type demoOptions struct{ server, svg *string }

// demoFlags are demo's flags.
func demoFlags() (*flag.FlagSet, demoOptions) {
	fs := flag.NewFlagSet("demo", flag.ContinueOnError)
	return fs, demoOptions{
		server: fs.String("server", "", "the `command` to run instead of the bundled example server, its words split at spaces (or give it after --)"),
		svg: fs.String("svg", "", "instead, record a cancelled call to the server's slow_ignore tool without the proxy and through it, "+
			"and draw what the client saw as an SVG timeline in this `file` (the README's picture)"),
	}
}

// demo runs the real proxy between a scripted client and the bundled example
// server (this binary, as `example-server`, in a child process), cancels two
// calls, one to a tool that honours cancellation and one to a tool that
// ignores it, and prints what the proxy forwarded and suppressed.
func demo(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	fs, o := demoFlags()
	server := o.server
	if help, err := parseFlags(fs, args, demoHead, stdout, stderr); help || err != nil {
		return exitOf(help)
	}
	argv, name := fs.Args(), ""
	switch {
	case len(argv) == 0 && *server != "":
		argv = strings.Fields(*server)
	case len(argv) == 0:
		self, err := os.Executable()
		if err != nil {
			fmt.Fprintln(stderr, "demo:", err)
			return 1
		}
		argv, name = []string{self, "example-server"}, "the bundled example server (mcp-cancel-proxy example-server)"
	}
	if name == "" {
		name = strings.Join(argv, " ")
	}
	if *o.svg != "" {
		if err := drawTimeline(ctx, argv, *o.svg, stdout, stderr); err != nil {
			fmt.Fprintln(stderr, "demo:", err)
			return 1
		}
		return 0
	}
	if err := runDemo(ctx, argv, name, stdout, stderr); err != nil {
		fmt.Fprintln(stderr, "demo:", err)
		return 1
	}
	return 0
}

// timeline prints events relative to the demo's start. Safe for concurrent use.
type timeline struct {
	mu    sync.Mutex // guards w
	w     io.Writer
	start time.Time
}

func (t *timeline) printf(who, format string, a ...any) {
	t.mu.Lock()
	defer t.mu.Unlock()
	fmt.Fprintf(t.w, "+%6.3fs  %-7s %s\n", time.Since(t.start).Seconds(), who, fmt.Sprintf(format, a...))
}

func (t *timeline) event(e proxy.Event) {
	id := "-"
	if e.ID.IsValid() {
		id = e.ID.String()
	}
	what := fmt.Sprintf("%-12s %-24s id=%-7s", e.Kind, e.Method, id)
	switch e.Action {
	case proxy.ActForwarded:
		t.printf(e.From, "%s -> forwarded", what)
	case proxy.ActSuppressed:
		t.printf(e.From, "%s -> SUPPRESSED (%s)", what, e.Note)
	case proxy.ActCancelAccepted:
		t.printf(e.From, "%-12s %-24s id=%-7s -> CANCEL ACCEPTED, forwarded; reason %q", e.Kind, framing.MethodCancelled, id, e.Note)
	default:
		t.printf(e.From, "%s -> %s (%s)", what, e.Action, e.Note)
	}
}

func runDemo(ctx context.Context, argv []string, name string, stdout, stderr io.Writer) error {
	tl := &timeline{w: stdout, start: time.Now()}
	log := newLogger(config.Log{Level: "warn", Format: "console"}, stderr, nil)
	p, err := child.Start(argv, child.Options{Stderr: io.Discard, Logger: log, TermAfter: 2 * time.Second, KillAfter: 2 * time.Second})
	if err != nil {
		return err
	}
	defer p.Stop()
	suppressed := make(chan framing.ID, 16)
	sess := stdio.NewSession(stdio.Options{Logger: log, OnEvent: func(e proxy.Event) {
		tl.event(e)
		if e.Action == proxy.ActSuppressed && e.Kind == framing.KindResponse {
			suppressed <- e.ID
		}
	}, OnClientClosed: func() { go p.Stop() }})

	cIn, toProxy := io.Pipe()
	fromProxy, cOut := io.Pipe()
	done := make(chan error, 1)
	go func() {
		done <- sess.Run(stdio.Conn{In: cIn, Out: cOut}, stdio.PipeServer(p.Stdout, p.Stdin, upstream.PipeOptions{Logger: log}))
	}()
	c := &scriptClient{w: toProxy, frames: make(chan []byte, 64), tl: tl}
	go c.read(fromProxy)

	fmt.Fprintf(stdout, "mcp-cancel-proxy demo: client <-> proxy <-> %s\n\n", name)
	err = c.script(ctx, suppressed)
	toProxy.Close()
	if runErr := <-done; err == nil && runErr != nil {
		err = runErr
	}
	st := sess.Stats()
	fmt.Fprintf(stdout, "\nforwarded %d messages; cancels forwarded %d; late responses suppressed %d; late progress suppressed %d\n",
		st.Forwarded, st.CancelsForwarded, st.ResponsesSuppressed, st.ProgressSuppressed)
	fmt.Fprintln(stdout, "The client got no answer and no progress after either cancel: no \"unknown message ID\" for it to choke on.")
	fmt.Fprintln(stdout, "\nTo watch each cancel's story live, run the proxy with an admin listener and open its status page:")
	fmt.Fprintln(stdout, "  mcp-cancel-proxy --admin 127.0.0.1:9464 -- YOUR-SERVER ARGS...   then http://127.0.0.1:9464/status")
	return err
}

// scriptClient is the demo's MCP client, written out by hand.
type scriptClient struct {
	w      io.Writer
	frames chan []byte
	tl     *timeline
}

func (c *scriptClient) read(r io.Reader) {
	rd := framing.NewReader(r, 0)
	for {
		f, err := rd.Read(nil)
		if err != nil {
			close(c.frames)
			return
		}
		c.frames <- f
	}
}

func (c *scriptClient) send(frame string) error {
	_, err := io.WriteString(c.w, frame+"\n")
	return err
}

// await reads frames until one satisfies ok.
func (c *scriptClient) await(ctx context.Context, what string, ok func(*framing.Message) bool) error {
	return c.awaitOr(ctx, what, ok, nil)
}

// awaitOr is await that also ends, without error, when stop receives.
func (c *scriptClient) awaitOr(ctx context.Context, what string, ok func(*framing.Message) bool, stop <-chan struct{}) error {
	timeout := time.NewTimer(30 * time.Second)
	defer timeout.Stop()
	var f framing.Frame
	for {
		select {
		case raw, open := <-c.frames:
			if !open {
				return fmt.Errorf("the connection closed while waiting for %s", what)
			}
			if f.Parse(raw) == nil && ok(&f.Msgs[0]) {
				return nil
			}
		case <-stop:
			return nil
		case <-timeout.C:
			return fmt.Errorf("timed out waiting for %s", what)
		case <-ctx.Done():
			return ctx.Err()
		}
	}
}

func (c *scriptClient) script(ctx context.Context, suppressed <-chan framing.ID) error {
	steps := []func() error{
		func() error {
			return c.send(`{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-06-18","capabilities":{},"clientInfo":{"name":"demo-client","version":"1"}}}`)
		},
		func() error {
			return c.await(ctx, "initialize result", func(m *framing.Message) bool { return m.Kind == framing.KindResponse && m.ID == framing.IntID(1) })
		},
		func() error { return c.send(`{"jsonrpc":"2.0","method":"notifications/initialized"}`) },
	}
	for _, step := range steps {
		if err := step(); err != nil {
			return err
		}
	}
	calls := []struct {
		id   int64
		tool string
		note string
	}{
		{2, "slow_ignore", "a tool that IGNORES cancellation (keeps sending progress, answers anyway)"},
		{3, "slow_honour", "a tool that honours cancellation (the go-sdk still answers it with an error)"},
	}
	for _, call := range calls {
		c.tl.printf("demo", "--- calling %s: %s", call.tool, call.note)
		if err := c.cancelCall(ctx, call.id, call.tool, suppressed); err != nil {
			return err
		}
	}
	c.tl.printf("demo", "--- closing the client's input: the proxy closes the server's stdin, then TERM, then KILL if needed")
	return nil
}

// cancelCall calls a slow tool, cancels it after its first progress, and
// waits until the proxy has suppressed the server's late answer.
func (c *scriptClient) cancelCall(ctx context.Context, id int64, tool string, suppressed <-chan framing.ID) error {
	token := fmt.Sprintf("job-%d", id)
	err := c.send(fmt.Sprintf(`{"jsonrpc":"2.0","id":%d,"method":"tools/call","params":{"name":%q,"arguments":{"seconds":1.2,"steps":4,"job_id":"report-%d"},"_meta":{"progressToken":%q}}}`,
		id, tool, id, token))
	if err != nil {
		return err
	}
	err = c.await(ctx, "first progress", func(m *framing.Message) bool {
		return m.Method == framing.MethodProgress && m.Token == framing.StringID(token)
	})
	if err != nil {
		return err
	}
	c.tl.printf("client", "user pressed stop: cancelling id=%d", id)
	if err := c.send(fmt.Sprintf(`{"jsonrpc":"2.0","method":"notifications/cancelled","params":{"requestId":%d,"reason":"user pressed stop"}}`, id)); err != nil {
		return err
	}
	timeout := time.NewTimer(30 * time.Second)
	defer timeout.Stop()
	for {
		select {
		case got := <-suppressed:
			if got == framing.IntID(id) {
				return nil
			}
		case <-timeout.C:
			return errors.New("the server never answered the cancelled call")
		}
	}
}
