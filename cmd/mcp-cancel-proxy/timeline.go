package main

import (
	"context"
	"fmt"
	"html"
	"io"
	"os"
	"strings"
	"time"

	"go.uber.org/zap"

	"github.com/mcp-cancel-proxy/mcp-cancel-proxy/framing"
	"github.com/mcp-cancel-proxy/mcp-cancel-proxy/internal/config"
	"github.com/mcp-cancel-proxy/mcp-cancel-proxy/proxy"
	"github.com/mcp-cancel-proxy/mcp-cancel-proxy/proxy/child"
	"github.com/mcp-cancel-proxy/mcp-cancel-proxy/proxy/stdio"
	"github.com/mcp-cancel-proxy/mcp-cancel-proxy/proxy/upstream"
)

// mark is one thing a client saw (or did) in a recorded run, at a time
// from the call's start.
type mark struct {
	at   time.Duration
	what string // request, progress then cancel, late progress, late answer, answer held back
}

// recordCancel runs one cancelled call of the server's slow_ignore tool as
// a client sees it: directly (viaProxy false) or through the proxy, and
// returns what the client sent and got, until the server has answered the
// cancelled call (to the client, or to the proxy, which held it back).
func recordCancel(ctx context.Context, argv []string, viaProxy bool, log *zap.Logger) ([]mark, error) {
	p, err := child.Start(argv, child.Options{Stderr: io.Discard, Logger: log, TermAfter: 2 * time.Second, KillAfter: 2 * time.Second})
	if err != nil {
		return nil, err
	}
	defer p.Stop()
	start := time.Now()
	var marks []mark
	held := make(chan struct{}, 16)
	w, r := io.Writer(p.Stdin), io.Reader(p.Stdout)
	if viaProxy {
		sess := stdio.NewSession(stdio.Options{Logger: log, OnEvent: func(e proxy.Event) {
			if e.Action == proxy.ActSuppressed && e.Kind == framing.KindResponse {
				held <- struct{}{}
			}
		}})
		cIn, toProxy := io.Pipe()
		fromProxy, cOut := io.Pipe()
		done := make(chan error, 1)
		go func() {
			done <- sess.Run(stdio.Conn{In: cIn, Out: cOut}, stdio.PipeServer(p.Stdout, p.Stdin, upstream.PipeOptions{Logger: log}))
		}()
		defer func() { toProxy.Close(); <-done }()
		w, r = toProxy, fromProxy
	}
	c := &scriptClient{w: w, frames: make(chan []byte, 64)}
	go c.read(r)
	if err := c.send(`{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-06-18","capabilities":{},"clientInfo":{"name":"timeline","version":"1"}}}`); err != nil {
		return nil, err
	}
	if err := c.await(ctx, "initialize result", func(m *framing.Message) bool { return m.Kind == framing.KindResponse }); err != nil {
		return nil, err
	}
	c.send(`{"jsonrpc":"2.0","method":"notifications/initialized"}`)
	start = time.Now()
	note := func(what string) { marks = append(marks, mark{time.Since(start), what}) }
	note("request")
	c.send(`{"jsonrpc":"2.0","id":2,"method":"tools/call","params":{"name":"slow_ignore","arguments":{"seconds":1.2,"steps":4},"_meta":{"progressToken":"t"}}}`)
	cancelled := false
	err = c.awaitOr(ctx, "the cancelled call's answer", func(m *framing.Message) bool {
		switch {
		case m.Method == framing.MethodProgress && !cancelled:
			note("progress, then cancel")
			cancelled = true
			c.send(`{"jsonrpc":"2.0","method":"notifications/cancelled","params":{"requestId":2,"reason":"user pressed stop"}}`)
		case m.Method == framing.MethodProgress:
			note("late progress")
		case m.Kind == framing.KindResponse && m.ID == framing.IntID(2):
			note("late answer")
			return true
		}
		return false
	}, held)
	if err == nil && viaProxy && (len(marks) == 0 || marks[len(marks)-1].what != "late answer") {
		note("answer held back by the proxy")
	}
	return marks, err
}

// drawTimeline records a cancelled call without the proxy and through it,
// and writes the picture to path.
func drawTimeline(ctx context.Context, argv []string, path string, stdout, stderr io.Writer) error {
	log := newLogger(config.Log{Level: "warn", Format: "console"}, stderr, nil)
	direct, err := recordCancel(ctx, argv, false, log)
	if err != nil {
		return fmt.Errorf("without the proxy: %w", err)
	}
	proxied, err := recordCancel(ctx, argv, true, log)
	if err != nil {
		return fmt.Errorf("through the proxy: %w", err)
	}
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	if err := writeTimelineSVG(f, direct, proxied); err != nil {
		f.Close()
		return err
	}
	if err := f.Close(); err != nil {
		return err
	}
	count := func(ms []mark) (late int) {
		for _, m := range ms {
			if strings.HasPrefix(m.what, "late") {
				late++
			}
		}
		return late
	}
	fmt.Fprintf(stdout, "%s: after its cancel the client got %d messages without the proxy, %d with it\n", path, count(direct), count(proxied))
	return nil
}

// writeTimelineSVG draws the two recorded runs, one lane each, on one time
// axis: what the client got after its cancel without the proxy, and with it.
func writeTimelineSVG(w io.Writer, direct, proxied []mark) error {
	const width, left, right, laneH = 760, 190, 30, 90
	end := max(direct[len(direct)-1].at, proxied[len(proxied)-1].at)
	x := func(d time.Duration) float64 { return left + float64(width-left-right)*float64(d)/float64(end) }
	var b strings.Builder
	fmt.Fprintf(&b, `<svg xmlns="http://www.w3.org/2000/svg" width="%d" height="%d" font-family="sans-serif" font-size="12">`+"\n", width, 2*laneH+76)
	fmt.Fprintf(&b, `<text x="10" y="20" font-size="14" font-weight="bold">A cancelled call to a tool that ignores the cancel, as the client sees it (a real run)</text>`+"\n")
	colours := map[string]string{"request": "#555", "progress, then cancel": "#000", "late progress": "#c9473b",
		"late answer": "#c9473b", "answer held back by the proxy": "#3b9a5c"}
	for i, lane := range []struct {
		name  string
		marks []mark
	}{{"without the proxy", direct}, {"with mcp-cancel-proxy", proxied}} {
		y := 60 + i*laneH
		fmt.Fprintf(&b, `<text x="10" y="%d" font-weight="bold">%s</text>`+"\n", y+4, lane.name)
		fmt.Fprintf(&b, `<line x1="%d" y1="%d" x2="%d" y2="%d" stroke="#bbb"/>`+"\n", left, y, width-right, y)
		for j, m := range lane.marks {
			cx := x(m.at)
			fmt.Fprintf(&b, `<circle cx="%.1f" cy="%d" r="5" fill="%s"><title>%s at %s</title></circle>`+"\n",
				cx, y, colours[m.what], html.EscapeString(m.what), m.at.Round(time.Millisecond))
			dy := 22 + 14*(j%2) // alternate labels below the lane so that neighbours do not overlap
			anchor := "middle"
			if cx > width-right-60 {
				anchor = "end"
			}
			fmt.Fprintf(&b, `<text x="%.1f" y="%d" text-anchor="%s" fill="%s">%s</text>`+"\n", cx, y+dy, anchor, colours[m.what], html.EscapeString(m.what))
		}
	}
	fmt.Fprintf(&b, `<text x="%d" y="%d" fill="#777">0 s</text><text x="%d" y="%d" text-anchor="end" fill="#777">%.1f s</text>`+"\n",
		left, 2*laneH+55, width-right, 2*laneH+55, end.Seconds())
	fmt.Fprintf(&b, `<text x="10" y="%d" fill="#999" font-size="10">drawn by: mcp-cancel-proxy demo --svg FILE (the bundled example server's slow_ignore tool)</text>`+"\n", 2*laneH+68)
	b.WriteString("</svg>\n")
	_, err := io.WriteString(w, b.String())
	return err
}
