// Command relay is mcp-cancel-proxy's load driver. It pushes JSON-RPC
// request/response pairs through three chains, side by side in one run:
//
//	direct: driver <-> echo server
//	bare:   driver <-> bare byte relay (io.Copy both ways) <-> echo server
//	proxy:  driver <-> mcp-cancel-proxy <-> echo server
//
// and prints throughput per response size, the proxy's ratio to the bare
// relay, and the proxy's peak memory. The echo server and the bare relay are
// this same binary in other roles.
//
//	go build -o /tmp/relay ./bench/relay && go build -o /tmp/mcp-cancel-proxy ./cmd/mcp-cancel-proxy
//	/tmp/relay -proxy /tmp/mcp-cancel-proxy
package main

import (
	"bufio"
	"bytes"
	"flag"
	"fmt"
	"io"
	"os"
	"os/exec"
	"sort"
	"strconv"
	"strings"
	"time"
)

// window is how many requests the driver keeps in flight.
var window = 64

const (
	reqHead = `{"jsonrpc":"2.0","id":`
	reqMid  = `,"method":"tools/call","params":{"name":"bench","arguments":{},"_meta":{"progressToken":`
	reqTail = `}}}`
	idWidth = 10 // ids are 1_000_000_000 + i
)

func main() {
	role := flag.String("role", "driver", "driver, echo or bare-relay")
	size := flag.Int("size", 256, "echo: response payload bytes")
	proxyBin := flag.String("proxy", "", "driver: the mcp-cancel-proxy binary")
	rounds := flag.Int("rounds", 3, "driver: rounds per case (the median is reported)")
	big := flag.Int("big", 64<<20, "driver: frame size for the peak-memory case (0 to skip)")
	only := flag.Int("only", 0, "driver: run only the case with this response size")
	flag.IntVar(&window, "window", 64, "driver: requests in flight at once (1 measures round-trip latency)")
	flag.Parse()
	var err error
	switch *role {
	case "echo":
		err = echo(*size)
	case "bare-relay":
		err = bareRelay(flag.Args())
	default:
		err = drive(*proxyBin, *rounds, *big, *only)
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "relay:", err)
		os.Exit(1)
	}
}

// echo answers each request with a response whose text is size bytes.
func echo(size int) error {
	tail := []byte(`,"result":{"content":[{"type":"text","text":"` + strings.Repeat("x", size) + `"}]}}` + "\n")
	r := bufio.NewReaderSize(os.Stdin, 1<<20)
	w := bufio.NewWriterSize(os.Stdout, 1<<20)
	var out []byte
	for {
		line, err := r.ReadSlice('\n')
		if err == io.EOF {
			return w.Flush()
		} else if err != nil {
			return err
		}
		out = append(append(append(out[:0], reqHead...), line[len(reqHead):len(reqHead)+idWidth]...), tail...)
		if _, err := w.Write(out); err != nil {
			return err
		}
		if r.Buffered() == 0 {
			if err := w.Flush(); err != nil {
				return err
			}
		}
	}
}

// bareRelay runs argv and copies bytes both ways, knowing nothing of frames:
// the floor any relay pays for an extra process and two pipe hops.
func bareRelay(argv []string) error {
	cmd := exec.Command(argv[0], argv[1:]...)
	cmd.Stderr = os.Stderr
	in, err := cmd.StdinPipe()
	if err != nil {
		return err
	}
	out, err := cmd.StdoutPipe()
	if err != nil {
		return err
	}
	if err := cmd.Start(); err != nil {
		return err
	}
	// Both directions pass through this process, as they do through a proxy.
	go func() { io.Copy(in, os.Stdin); in.Close() }()
	if _, err := io.Copy(os.Stdout, out); err != nil {
		return err
	}
	return cmd.Wait()
}

type chain struct {
	name string
	argv func(echoArgs []string) []string
}

func drive(proxyBin string, rounds, big, only int) error {
	self, err := os.Executable()
	if err != nil {
		return err
	}
	if proxyBin == "" {
		return fmt.Errorf("-proxy is required")
	}
	chains := []chain{
		{"direct", func(e []string) []string { return e }},
		{"bare", func(e []string) []string { return append([]string{self, "-role", "bare-relay"}, e...) }},
		{"proxy", func(e []string) []string {
			return append([]string{proxyBin, "--log-level", "warn", "--max-frame-size", "80MiB", "--"}, e...)
		}},
	}
	cases := []struct{ size, pairs int }{{256, 100000}, {4 << 10, 50000}, {1 << 20, 400}}
	fmt.Printf("window %d (requests in flight)\n", window)
	fmt.Printf("%-9s %-7s %12s %12s %14s %10s %14s %12s\n", "response", "chain", "pairs/s", "MB/s", "vs bare relay", "peak RSS", "CPU µs/pair", "µs/round trip")
	for _, c := range cases {
		if only != 0 && c.size != only {
			continue
		}
		res := map[string][]result{}
		for range rounds { // interleaved, so that drift hits every chain alike
			for _, ch := range chains {
				r, err := run(ch.argv([]string{self, "-role", "echo", "-size", strconv.Itoa(c.size)}), c.size, c.pairs)
				if err != nil {
					return fmt.Errorf("%s at %d bytes: %w", ch.name, c.size, err)
				}
				res[ch.name] = append(res[ch.name], r)
			}
		}
		bare := median(res["bare"]).mbps
		for _, ch := range chains {
			m := median(res[ch.name])
			fmt.Printf("%-9s %-7s %12.0f %12.1f %13.2fx %9.1fM %14.1f %12.1f\n", sizeName(c.size), ch.name, m.pairsPerSec, m.mbps,
				m.mbps/bare, float64(m.peakKB)/1024, m.cpuPerPair, float64(window)*1e6/m.pairsPerSec)
		}
	}
	if big > 0 {
		return bigFrame(proxyBin, self, big)
	}
	return nil
}

type result struct {
	pairsPerSec, mbps float64
	peakKB            int     // VmHWM of the first process of the chain
	cpuPerPair        float64 // its own CPU time (user+system), µs per pair
}

func median(rs []result) result {
	sort.Slice(rs, func(i, j int) bool { return rs[i].mbps < rs[j].mbps })
	return rs[len(rs)/2]
}

func sizeName(n int) string {
	switch {
	case n >= 1<<20:
		return fmt.Sprintf("%dMiB", n>>20)
	case n >= 1<<10:
		return fmt.Sprintf("%dKiB", n>>10)
	}
	return fmt.Sprintf("%dB", n)
}

// run sends pairs requests through argv, keeping a window in flight, and
// measures the time until the last response is read.
func run(argv []string, size, pairs int) (result, error) {
	cmd := exec.Command(argv[0], argv[1:]...)
	cmd.Stderr = os.Stderr
	in, err := cmd.StdinPipe()
	if err != nil {
		return result{}, err
	}
	out, err := cmd.StdoutPipe()
	if err != nil {
		return result{}, err
	}
	if err := cmd.Start(); err != nil {
		return result{}, err
	}
	credit := make(chan struct{}, window)
	for range window {
		credit <- struct{}{}
	}
	start := time.Now()
	go func() {
		w := bufio.NewWriterSize(in, 256<<10)
		var req []byte
		for i := range pairs {
			<-credit
			req = append(req[:0], reqHead...)
			req = strconv.AppendInt(req, int64(1_000_000_000+i), 10)
			req = append(req, reqMid...)
			req = strconv.AppendInt(req, int64(i), 10) // unique tokens, as the spec requires
			req = append(append(req, reqTail...), '\n')
			w.Write(req)
			if len(credit) == 0 {
				w.Flush()
			}
		}
		w.Flush()
	}()
	r := bufio.NewReaderSize(out, 1<<20)
	var respBytes int64
	for range pairs {
		line, err := readLine(r)
		if err != nil {
			cmd.Process.Kill()
			cmd.Wait()
			return result{}, fmt.Errorf("reading response: %w", err)
		}
		respBytes += int64(len(line))
		credit <- struct{}{}
	}
	elapsed := time.Since(start)
	peak := peakKB(cmd.Process.Pid)
	cpu := cpuTime(cmd.Process.Pid)
	in.Close()
	if err := cmd.Wait(); err != nil {
		return result{}, err
	}
	return result{pairsPerSec: float64(pairs) / elapsed.Seconds(), mbps: float64(respBytes) / elapsed.Seconds() / 1e6,
		peakKB: peak, cpuPerPair: float64(cpu.Microseconds()) / float64(pairs)}, nil
}

// readLine reads one line of any length.
func readLine(r *bufio.Reader) ([]byte, error) {
	line, err := r.ReadSlice('\n')
	if err != bufio.ErrBufferFull {
		return line, err
	}
	long := append([]byte(nil), line...)
	for err == bufio.ErrBufferFull {
		line, err = r.ReadSlice('\n')
		long = append(long, line...)
	}
	return long, err
}

// peakKB reads a process's peak resident set size.
func peakKB(pid int) int {
	data, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return 0
	}
	for _, l := range bytes.Split(data, []byte("\n")) {
		if f := strings.Fields(string(l)); len(f) >= 2 && f[0] == "VmHWM:" {
			n, _ := strconv.Atoi(f[1])
			return n
		}
	}
	return 0
}

// cpuTime reads a process's own user+system time (not its children's).
func cpuTime(pid int) time.Duration {
	data, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0
	}
	f := strings.Fields(string(data[bytes.LastIndexByte(data, ')')+2:]))
	if len(f) < 13 {
		return 0
	}
	ut, _ := strconv.Atoi(f[11]) // utime and stime: fields 14 and 15 of stat(5)
	st, _ := strconv.Atoi(f[12])
	return time.Duration(ut+st) * time.Second / 100 // USER_HZ
}

// bigFrame forwards one response of about size bytes through the proxy and
// reports the proxy's peak memory against an idle proxy's.
func bigFrame(proxyBin, self string, size int) error {
	payload := size - 200 // the JSON envelope
	argv := []string{proxyBin, "--log-level", "warn", "--max-frame-size", "80MiB", "--", self, "-role", "echo", "-size", strconv.Itoa(payload)}
	idle, err := run([]string{proxyBin, "--log-level", "warn", "--", self, "-role", "echo", "-size", "10"}, 10, 1)
	if err != nil {
		return err
	}
	r, err := run(argv, payload, 1)
	if err != nil {
		return err
	}
	grew := float64(r.peakKB-idle.peakKB) / 1024
	fmt.Printf("\none %s frame through the proxy: peak RSS %.1fM (idle proxy %.1fM): %.2fx the frame\n",
		sizeName(size), float64(r.peakKB)/1024, float64(idle.peakKB)/1024, grew*1024*1024/float64(size))
	return nil
}
