package main

import (
	"bufio"
	"fmt"
	"net"
	"net/http"
	"net/http/httputil"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/valyala/fasthttp"
)

// Separate processes (-procs): the upstream, the sidecar binary and the
// reverse proxy each run as a process of their own, as they are deployed,
// and each one's CPU time is read from /proc around the round trips sent
// through it: the proxies' CPU per relayed call is what the sidecar costs.

// serveRole runs this program as one of the processes of -procs, on addr.
func serveRole(role, addr, upstream string, jsonMode bool) error {
	var h http.Handler
	switch role {
	case "upstream":
		h = echoHandler(jsonMode)
	case "stdio":
		return serveStdio()
	case "fastproxy":
		return serveFastProxy(addr, upstream)
	case "reverseproxy":
		u, err := url.Parse(upstream)
		if err != nil {
			return err
		}
		h = httputil.NewSingleHostReverseProxy(&url.URL{Scheme: u.Scheme, Host: u.Host})
	default:
		return fmt.Errorf("unknown role %q", role)
	}
	return http.ListenAndServe(addr, h)
}

// serveFastProxy serves the second baseline: the least a fasthttp proxy
// does, each request forwarded whole and its response read whole before it
// is sent on (the upstream ends every response with the call's answer), no
// parsing at all. It is the floor of what the sidecar, written on the same
// library, could cost.
func serveFastProxy(addr, upstream string) error {
	u, err := url.Parse(upstream)
	if err != nil {
		return err
	}
	client := &fasthttp.HostClient{Addr: u.Host, MaxConns: 1024}
	return fasthttp.ListenAndServe(addr, func(ctx *fasthttp.RequestCtx) {
		if err := client.Do(&ctx.Request, &ctx.Response); err != nil {
			ctx.Error(err.Error(), fasthttp.StatusBadGateway)
		}
	})
}

// proc is a process of -procs and the URL it serves.
type proc struct {
	name, url string
	cmd       *exec.Cmd
}

// cpu returns the process's CPU time so far (user and system).
func (p *proc) cpu() time.Duration {
	cpu, _ := statOf(p.cmd.Process.Pid)
	return cpu
}

// statOf returns a process's CPU time so far (user and system) and its
// parent's pid, from /proc.
func statOf(pid int) (cpu time.Duration, ppid int) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0, 0
	}
	f := strings.Fields(string(b[strings.LastIndexByte(string(b), ')')+2:]))
	ppid, _ = strconv.Atoi(f[1])
	utime, _ := strconv.ParseInt(f[11], 10, 64)
	stime, _ := strconv.ParseInt(f[12], 10, 64)
	return time.Duration(utime+stime) * time.Second / 100, ppid // USER_HZ
}

// childrenCPU returns the CPU time so far of the process's live
// descendants (the stdio servers a front started, and their shells).
func (p *proc) childrenCPU() time.Duration {
	entries, _ := os.ReadDir("/proc")
	cpu, parent := map[int]time.Duration{}, map[int]int{}
	for _, e := range entries {
		if pid, err := strconv.Atoi(e.Name()); err == nil {
			cpu[pid], parent[pid] = statOf(pid)
		}
	}
	var total time.Duration
	for pid := range cpu {
		for a := parent[pid]; a > 1; a = parent[a] {
			if a == p.cmd.Process.Pid {
				total += cpu[pid]
				break
			}
		}
	}
	return total
}

// startProc starts a process and waits until addr accepts connections.
func startProc(name, addr string, argv ...string) (*proc, error) {
	cmd := exec.Command(argv[0], argv[1:]...)
	cmd.Stderr = os.Stderr
	if err := cmd.Start(); err != nil {
		return nil, err
	}
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(20 * time.Millisecond) {
		if c, err := net.Dial("tcp", addr); err == nil {
			c.Close()
			break
		}
		if time.Now().After(deadline) {
			cmd.Process.Kill()
			return nil, fmt.Errorf("%s never listened on %s", name, addr)
		}
	}
	return &proc{name: name, url: "http://" + addr + "/mcp", cmd: cmd}, nil
}

// runProcs drives each process in turn, rounds times per concurrency, and
// prints throughput and the CPU each process spent per round trip; with
// straceN > 0 it also counts the system calls of the sidecar and of the
// fasthttp proxy over straceN round trips.
func runProcs(proxyBin string, n, rounds, straceN int) error {
	self, err := os.Executable()
	if err != nil {
		return err
	}
	for _, jsonMode := range []bool{true, false} {
		procs, err := startProcs(self, proxyBin, jsonMode)
		if err != nil {
			return err
		}
		up, targets := procs[0], procs
		mode := map[bool]string{true: "json", false: "sse"}[jsonMode]
		for _, conc := range []int{1, 16} {
			for _, t := range targets {
				var rps []float64
				var own, upstream time.Duration
				errors := 0
				for range rounds {
					c0, u0 := t.cpu(), up.cpu()
					r := drive(t.url, conc, n)
					own += t.cpu() - c0
					upstream += up.cpu() - u0
					rps = append(rps, r.rps)
					errors += r.errors
				}
				calls := time.Duration(n * rounds)
				proxyCPU := "-"
				if t != up {
					proxyCPU = fmt.Sprint((own / calls).Microseconds())
				}
				fmt.Printf("%-5s %-13s %5d %10.0f %14s %15d %7d\n", mode, t.name, conc, medianOf(rps), proxyCPU, (upstream / calls).Microseconds(), errors)
			}
		}
		if straceN > 0 {
			for _, p := range []*proc{procs[1], procs[3]} { // the sidecar and the fasthttp proxy
				fmt.Printf("%s ", mode)
				if err := countSyscalls(p, straceN); err != nil {
					fmt.Fprintln(os.Stderr, "strace:", err)
				}
			}
		}
		for _, p := range procs {
			p.cmd.Process.Kill()
			p.cmd.Wait()
		}
	}
	return nil
}

// startProcs starts the upstream, the sidecar binary in front of it (the
// default policy, no audit trail), the reverse proxy and the fasthttp
// proxy: direct first.
func startProcs(self, proxyBin string, jsonMode bool) ([]*proc, error) {
	addrs, err := freeAddrs(4)
	if err != nil {
		return nil, err
	}
	upURL := "http://" + addrs[0] + "/mcp"
	cfg := filepath.Join(os.TempDir(), "httpload-sidecar.yaml")
	if err := os.WriteFile(cfg, []byte("audit:\n  path: off\nlog:\n  level: warn\n"), 0o644); err != nil {
		return nil, err
	}
	specs := [][]string{
		{"direct", addrs[0], self, "-role", "upstream", "-addr", addrs[0], "-json=" + strconv.FormatBool(jsonMode)},
		{"sidecar", addrs[1], proxyBin, "--config", cfg, "--listen", addrs[1], "--upstream", upURL, "--upstream-transport", "streamable"},
		{"reverseproxy", addrs[2], self, "-role", "reverseproxy", "-addr", addrs[2], "-upstream", upURL},
		{"fastproxy", addrs[3], self, "-role", "fastproxy", "-addr", addrs[3], "-upstream", upURL},
	}
	var procs []*proc
	for _, s := range specs {
		p, err := startProc(s[0], s[1], s[2:]...)
		if err != nil {
			for _, p := range procs {
				p.cmd.Process.Kill()
			}
			return nil, err
		}
		procs = append(procs, p)
	}
	return procs, nil
}

// countSyscalls counts the system calls the process makes (all threads)
// over n round trips at one client, with strace -c, and prints them per
// round trip, the most frequent first.
func countSyscalls(p *proc, n int) error {
	out := filepath.Join(os.TempDir(), "httpload-strace.txt")
	st := exec.Command("strace", "-c", "-f", "-o", out, "-p", strconv.Itoa(p.cmd.Process.Pid))
	if err := st.Start(); err != nil {
		return err
	}
	time.Sleep(500 * time.Millisecond) // strace attaches to every thread: give it time
	drive(p.url, 1, n)
	st.Process.Signal(syscall.SIGINT)
	st.Wait()
	f, err := os.Open(out)
	if err != nil {
		return err
	}
	defer f.Close()
	fmt.Printf("%s system calls per round trip (strace -c -f, %d round trips at 1 client):\n", p.name, n)
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		fields := strings.Fields(sc.Text())
		if len(fields) < 5 || fields[0] == "%" {
			continue
		}
		calls, err := strconv.Atoi(fields[3])
		if err != nil {
			continue
		}
		fmt.Printf("  %-16s %6.2f\n", fields[len(fields)-1], float64(calls)/float64(n))
	}
	return sc.Err()
}
