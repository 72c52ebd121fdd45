package main

import (
	"bufio"
	"bytes"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"time"
)

// idleStreams measures the sidecar's memory per idle event stream: it
// starts the sidecar binary in front of an upstream that answers every GET
// with an event stream that then stays silent, opens n streams through the
// sidecar, and reads the sidecar's resident memory before and after.
func idleStreams(proxyBin string, n int) error {
	up, upURL, err := listen(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/event-stream")
		w.WriteHeader(http.StatusOK)
		fmt.Fprint(w, ": open\n\n")
		w.(http.Flusher).Flush()
		<-r.Context().Done() // silent until the client leaves
	}))
	if err != nil {
		return err
	}
	defer up.Close()
	addrs, err := freeAddrs(1)
	if err != nil {
		return err
	}
	addr := addrs[0]
	// Every stream comes from this one address: exempt it from
	// http.max_connections_per_client (4096), as an ingress would be.
	cfg, err := os.CreateTemp("", "httpload-idle-*.yaml")
	if err != nil {
		return err
	}
	defer os.Remove(cfg.Name())
	fmt.Fprintln(cfg, "http:\n  trusted_proxies: [127.0.0.1]")
	cfg.Close()
	cmd := exec.Command(proxyBin, "--config", cfg.Name(), "--listen", addr, "--upstream", upURL, "--log-level", "error")
	cmd.Stderr = os.Stderr
	if err := cmd.Start(); err != nil {
		return err
	}
	defer func() { cmd.Process.Kill(); cmd.Wait() }()
	if err := waitFor(addr); err != nil {
		return err
	}
	before := rssKB(cmd.Process.Pid)
	conns := make([]net.Conn, 0, n)
	defer func() {
		for _, c := range conns {
			c.Close()
		}
	}()
	for i := range n {
		c, err := openStream(addr)
		if err != nil {
			return fmt.Errorf("stream %d: %w", i, err)
		}
		conns = append(conns, c)
	}
	time.Sleep(500 * time.Millisecond) // let the runtime settle before reading RSS; a measurement, not a synchronisation
	after := rssKB(cmd.Process.Pid)
	fmt.Printf("%d idle event streams through the sidecar: RSS %d KiB -> %d KiB, %.1f KiB per stream\n",
		n, before, after, float64(after-before)/float64(n))
	return nil
}

func waitFor(addr string) error {
	for range 200 {
		if c, err := net.Dial("tcp", addr); err == nil {
			return c.Close()
		}
		time.Sleep(10 * time.Millisecond)
	}
	return fmt.Errorf("%s never listened", addr)
}

// openStream opens one event stream with a raw connection, and returns once
// the first event arrived, which proves the whole path is open.
func openStream(addr string) (net.Conn, error) {
	c, err := net.Dial("tcp", addr)
	if err != nil {
		return nil, err
	}
	fmt.Fprintf(c, "GET /mcp HTTP/1.1\r\nHost: %s\r\nAccept: text/event-stream\r\n\r\n", addr)
	r := bufio.NewReader(c)
	for {
		line, err := r.ReadBytes('\n')
		if err != nil {
			c.Close()
			return nil, err
		}
		if bytes.Contains(line, []byte(": open")) {
			return c, nil
		}
	}
}

func rssKB(pid int) int {
	data, _ := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	for _, l := range strings.Split(string(data), "\n") {
		if f := strings.Fields(l); len(f) >= 2 && f[0] == "VmRSS:" {
			n, _ := strconv.Atoi(f[1])
			return n
		}
	}
	return 0
}
