package main

import (
	"bytes"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"syscall"
	"time"

	"github.com/mcp-cancel-proxy/mcp-cancel-proxy/internal/strict"
)

// Strict (-strict): the strict client of internal/strict (one that would
// close its connection over a message it cannot place) makes n calls of
// the example server's slow_honour through every transport of the proxy
// binary, 16 at a time, and cancels about a third of them at random. Each
// transport runs the binary (and its example server) as processes of their
// own, as users deploy them; the HTTP fronts get --cancel-grace 50ms, as in
// the tests, so that a cancelled call's stream ends soon. It prints, per
// transport, what the client saw (the raced answers and progress that no
// proxy can recall, counted apart), the cancels the proxy's events feed
// says it accepted, and the time taken; any stray message stops the run.

// strictCall is the example server's slow_honour, 10 ms in two steps.
const strictCall = `{"jsonrpc":"2.0","id":%d,"method":"tools/call","params":{"name":"slow_honour","arguments":{"seconds":0.01,"steps":2},"_meta":{"progressToken":"t%d"}}}`

// strictTransport is one way through the proxy: the upstream server, if
// one of its own (example-server's flag for it, and its path), and the
// client's side.
type strictTransport struct {
	name       string
	serverFlag string // --http or --sse: an HTTP upstream; else a stdio child
	path       string
	client     string // "stdio", "http" (Streamable HTTP) or "old" (HTTP+SSE)
}

var strictTransports = []strictTransport{
	{"wrapper", "", "", "stdio"},
	{"bridge", "--http", "/mcp", "stdio"},
	{"bridge-to-sse", "--sse", "/sse", "stdio"},
	{"sidecar-to-streamable", "--http", "/mcp", "http"},
	{"sidecar-to-sse", "--sse", "/sse", "http"},
	{"sidecar-to-stdio", "", "", "http"},
	{"old-client-to-streamable", "--http", "/mcp", "old"},
	{"old-client-to-stdio", "", "", "old"},
}

// runStrict drives every transport in turn.
func runStrict(proxyBin string, n int) error {
	if proxyBin == "" {
		return fmt.Errorf("-strict needs -proxy")
	}
	fmt.Printf("%-26s %7s %9s %7s %9s %9s %8s %9s\n", "transport", "calls", "cancelled", "raced", "raced pr", "accepted", "seconds", "calls/s")
	for _, tr := range strictTransports {
		got, accepted, took, err := tr.run(proxyBin, n)
		if err != nil {
			return fmt.Errorf("%s: %w", tr.name, err)
		}
		mark := ""
		if accepted != got.Accepted() {
			mark = fmt.Sprintf("  (want %d)", got.Accepted())
		}
		fmt.Printf("%-26s %7d %9d %7d %9d %9d %8.1f %9.0f%s\n", tr.name, got.Calls, got.Cancels, got.Raced,
			got.RacedProgress, accepted, took.Seconds(), float64(got.Calls)/took.Seconds(), mark)
	}
	return nil
}

// run starts the transport's processes, drives n calls through it, stops
// them, and counts the cancels the proxy accepted.
func (tr strictTransport) run(proxyBin string, n int) (got strict.Tally, accepted int, took time.Duration, err error) {
	dir, err := os.MkdirTemp("", "httpload-strict")
	if err != nil {
		return got, 0, 0, err
	}
	defer os.RemoveAll(dir)
	addrs, err := freeAddrs(2)
	if err != nil {
		return got, 0, 0, err
	}
	events := filepath.Join(dir, "events.jsonl")
	args := []string{"--events", events}
	if tr.client != "stdio" {
		args = append(args, "--listen", addrs[1], "--cancel-grace", "50ms")
	}
	if tr.serverFlag != "" {
		up := exec.Command(proxyBin, "example-server", tr.serverFlag, addrs[0])
		if err := up.Start(); err != nil {
			return got, 0, 0, err
		}
		defer stopProcess(up)
		if err := waitFor(addrs[0]); err != nil {
			return got, 0, 0, err
		}
		args = append(args, "--upstream", "http://"+addrs[0]+tr.path)
	} else {
		args = append(args, "--", proxyBin, "example-server")
	}
	proxy := exec.Command(proxyBin, args...)
	load := strict.Load{Calls: n, Window: 16, Call: strictCall, Cancels: true, Seed: 41}
	start := time.Now()
	got, err = tr.drive(proxy, addrs[1], load)
	took = time.Since(start)
	stopProcess(proxy) // its events feed is whole once it has ended
	if err != nil {
		return got, 0, took, err
	}
	feed, err := os.ReadFile(events)
	return got, acceptedFromClient(feed), took, err
}

// drive starts the proxy and plays load through it, as the transport's
// client.
func (tr strictTransport) drive(proxy *exec.Cmd, front string, load strict.Load) (strict.Tally, error) {
	if tr.client == "stdio" {
		stdin, _ := proxy.StdinPipe()
		stdout, _ := proxy.StdoutPipe()
		if err := proxy.Start(); err != nil {
			return strict.Tally{}, err
		}
		c := strict.NewLines(stdin, stdout)
		if err := strict.Initialize(c, "2025-06-18"); err != nil {
			return strict.Tally{}, err
		}
		return strict.Stream(c, load)
	}
	if err := proxy.Start(); err != nil {
		return strict.Tally{}, err
	}
	if err := waitFor(front); err != nil {
		return strict.Tally{}, err
	}
	url := "http://" + front + "/mcp"
	if tr.client == "http" {
		session, err := strict.OpenSession(url)
		if err != nil {
			return strict.Tally{}, err
		}
		return strict.HTTP(url, session, load)
	}
	c, err := strict.OpenLegacy("http://" + front)
	if err != nil {
		return strict.Tally{}, err
	}
	defer c.Close()
	if err := strict.Initialize(c, "2024-11-05"); err != nil {
		return strict.Tally{}, err
	}
	return strict.Stream(c, load)
}

// stopProcess ends a process of the run: SIGTERM, then SIGKILL after 10 s.
func stopProcess(cmd *exec.Cmd) {
	if cmd.Process == nil {
		return
	}
	cmd.Process.Signal(syscall.SIGTERM)
	done := make(chan struct{})
	go func() { cmd.Wait(); close(done) }()
	select {
	case <-done:
	case <-time.After(10 * time.Second):
		cmd.Process.Kill()
		<-done
	}
}

// acceptedFromClient counts the client's cancels an events feed says the
// proxy accepted.
func acceptedFromClient(feed []byte) int {
	n := 0
	for line := range bytes.Lines(feed) {
		if bytes.Contains(line, []byte(`"event":"cancel_accepted"`)) && bytes.Contains(line, []byte(`"from":"client"`)) {
			n++
		}
	}
	return n
}
