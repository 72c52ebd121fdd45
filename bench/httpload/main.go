// Command httpload is the HTTP sidecar's load driver. In one process it
// serves a go-sdk Streamable HTTP server (stateless, with an echo tool) and,
// in front of it, the sidecar and a plain reverse proxy (net/http/httputil)
// as a baseline; then, side by side, it drives tools/call round trips
// straight to the server, through the sidecar and through the reverse proxy,
// with JSON and with event-stream responses, at several concurrencies, and
// prints requests per second and p50/p99 latency.
//
// With -procs the upstream, the sidecar binary and the reverse proxy run as
// processes of their own instead, and the CPU each spends per round trip is
// read from /proc; -strace N also counts the sidecar's system calls.
//
//	go run ./bench/httpload                 # 5 rounds of 2000 round trips per case
//	go run ./bench/httpload -idle 4000 -proxy /tmp/mcp-cancel-proxy   # memory per idle stream
//	go build -o /tmp/httpload ./bench/httpload && /tmp/httpload -procs -proxy /tmp/mcp-cancel-proxy -strace 2000
//	go run ./bench/httpload -sessions       # Streamable HTTP against HTTP+SSE upstreams, with sessions
//	go build -o /tmp/httpload ./bench/httpload && /tmp/httpload -peers -proxy /tmp/mcp-cancel-proxy -rounds 3   # against mcp-proxy and supergateway
//	go run ./bench/httpload -strict -proxy /tmp/mcp-cancel-proxy -n 10000   # a strict client's random cancels on every transport
package main

import (
	"bytes"
	"context"
	"flag"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httputil"
	"net/url"
	"os"
	"runtime/pprof"
	"slices"
	"sync"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"
	"github.com/valyala/fasthttp"

	"github.com/mcp-cancel-proxy/mcp-cancel-proxy/policy"
	"github.com/mcp-cancel-proxy/mcp-cancel-proxy/proxy/httpx"
)

func main() {
	n := flag.Int("n", 2000, "round trips per case and round")
	rounds := flag.Int("rounds", 5, "rounds per case; figures are medians over them")
	idle := flag.Int("idle", 0, "instead: open this many idle event streams through the sidecar binary and report its memory per stream")
	proxyBin := flag.String("proxy", "", "with -idle or -procs: the mcp-cancel-proxy binary")
	procs := flag.Bool("procs", false, "instead: run the upstream, the sidecar binary and the reverse proxy as processes, and report CPU per round trip")
	straceN := flag.Int("strace", 0, "with -procs: also count the sidecar's system calls over this many round trips")
	sessions := flag.Bool("sessions", false, "instead: clients with a session each, through the sidecar to Streamable HTTP and to HTTP+SSE upstreams")
	peers := flag.Bool("peers", false, "instead: a stdio server served over HTTP by the proxy binary (-proxy), mcp-proxy and supergateway, each a process, with a session per client")
	strictMode := flag.Bool("strict", false, "instead: a strict client's n calls with random cancels through every transport of the proxy binary (-proxy), counting what it could not place")
	nodeModules := flag.String("node-modules", "test/node_modules", "with -peers: where the test command installed the npm peers")
	role := flag.String("role", "", "internal to -procs: serve as upstream or reverseproxy")
	addr := flag.String("addr", "", "internal to -procs: the address to serve on")
	upstream := flag.String("upstream", "", "internal to -procs: the reverse proxy's upstream")
	jsonMode := flag.Bool("json", true, "internal to -procs: the upstream answers with JSON (else event streams)")
	flag.BoolVar(&modernLoad, "modern", false, "send 2026-07-28 requests (_meta protocol version, Mcp-Method and Mcp-Name headers) instead of 2025-06-18 ones without a session")
	cpuProfile := flag.String("cpuprofile", "", "write a CPU profile of this process (in-process modes: the sidecar, the upstream and the driver) to this file")
	memProfile := flag.String("memprofile", "", "write an allocation profile of this process to this file at the end")
	flag.Parse()
	if *memProfile != "" {
		defer writeAllocs(*memProfile)
	}
	if *cpuProfile != "" {
		stop, err := profileCPU(*cpuProfile)
		if err != nil {
			fmt.Fprintln(os.Stderr, "httpload:", err)
			os.Exit(1)
		}
		defer stop()
	}
	var err error
	switch {
	case *role != "":
		err = serveRole(*role, *addr, *upstream, *jsonMode)
	case *idle > 0:
		err = idleStreams(*proxyBin, *idle)
	case *sessions:
		err = runSessions(*n, *rounds)
	case *strictMode:
		err = runStrict(*proxyBin, *n)
	case *peers:
		err = runPeers(*proxyBin, *nodeModules, *n, *rounds)
	case *procs:
		fmt.Printf("%-5s %-13s %5s %10s %14s %15s %7s\n", "body", "target", "conc", "req/s", "proxy µs CPU", "upstream µs CPU", "errors")
		err = runProcs(*proxyBin, *n, *rounds, *straceN)
	default:
		err = run(*n, *rounds)
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "httpload:", err)
		os.Exit(1)
	}
}

// profileCPU starts a CPU profile into path; stop ends and writes it.
func profileCPU(path string) (stop func(), err error) {
	f, err := os.Create(path)
	if err != nil {
		return nil, err
	}
	if err := pprof.StartCPUProfile(f); err != nil {
		f.Close()
		return nil, err
	}
	return func() { pprof.StopCPUProfile(); f.Close() }, nil
}

// writeAllocs writes the allocations made so far to path.
func writeAllocs(path string) {
	f, err := os.Create(path)
	if err != nil {
		fmt.Fprintln(os.Stderr, "httpload:", err)
		return
	}
	defer f.Close()
	pprof.Lookup("allocs").WriteTo(f, 0)
}

func run(n, rounds int) error {
	fmt.Printf("%-6s %-13s %5s %10s %10s %10s %12s %7s\n", "body", "target", "conc", "req/s", "p50 µs", "p99 µs", "vs direct", "errors")
	for _, jsonMode := range []bool{true, false} {
		targets, stop, err := serveAll(jsonMode)
		if err != nil {
			return err
		}
		mode := map[bool]string{true: "json", false: "sse"}[jsonMode]
		for _, conc := range []int{1, 16, 64} {
			// The targets take turns, round after round, so that a slow
			// spell of the machine falls on all of them; each figure is
			// the median over the rounds.
			runs := make([][]result, len(targets))
			for range rounds {
				for i, t := range targets {
					runs[i] = append(runs[i], drive(t.url, conc, n))
				}
			}
			for i, t := range targets {
				r := median(runs[i], runs[0])
				fmt.Printf("%-6s %-13s %5d %10.0f %10.0f %10.0f %11.2fx %7d\n", mode, t.name, conc, r.rps,
					float64(r.p50.Microseconds()), float64(r.p99.Microseconds()), r.ratio, r.errors)
			}
		}
		stop()
	}
	return nil
}

// median returns the median of each figure of runs, the median ratio of
// its throughput to the direct runs of the same rounds, and all errors.
func median(runs, direct []result) result {
	pick := func(f func(r result, i int) float64) float64 {
		v := make([]float64, len(runs))
		for i, r := range runs {
			v[i] = f(r, i)
		}
		slices.Sort(v)
		return v[len(v)/2]
	}
	var m result
	m.rps = pick(func(r result, _ int) float64 { return r.rps })
	m.ratio = pick(func(r result, i int) float64 { return r.rps / direct[i].rps })
	m.p50 = time.Duration(pick(func(r result, _ int) float64 { return float64(r.p50) }))
	m.p99 = time.Duration(pick(func(r result, _ int) float64 { return float64(r.p99) }))
	for _, r := range runs {
		m.errors += r.errors
	}
	return m
}

type target struct{ name, url string }

// serveAll starts the upstream, the sidecar and the reverse proxy on
// loopback ports and returns their MCP URLs, direct first.
func serveAll(jsonMode bool) ([]target, func(), error) {
	up, upURL, err := listen(echoHandler(jsonMode))
	if err != nil {
		return nil, nil, err
	}
	u, _ := url.Parse(upURL)
	rp, rpURL, err := listen(httputil.NewSingleHostReverseProxy(&url.URL{Scheme: u.Scheme, Host: u.Host}))
	if err != nil {
		return nil, nil, err
	}
	// The sidecar as the binary runs it: with the default policy's governor.
	engine, err := policy.New(policy.Options{Policy: policy.Defaults(), Audit: policy.Audit{Path: "off"}})
	if err != nil {
		return nil, nil, err
	}
	sc, stopSC, err := serveSidecar(&httpx.Sidecar{Upstream: upURL, Governor: engine.Governor})
	if err != nil {
		return nil, nil, err
	}
	// And without any policy, to show what the policy layer costs.
	bare, stopBare, err := serveSidecar(&httpx.Sidecar{Upstream: upURL})
	if err != nil {
		return nil, nil, err
	}
	stop := func() { up.Close(); rp.Close(); stopSC(); stopBare(); engine.Shutdown() }
	return []target{{"direct", upURL}, {"sidecar", sc}, {"reverseproxy", rpURL}, {"sidecar-nopol", bare}}, stop, nil
}

// echoHandler is the upstream: a go-sdk server, stateless, whose echo tool
// answers its text, with JSON or event-stream answers.
func echoHandler(jsonMode bool) http.Handler {
	s := echoServer()
	return mcp.NewStreamableHTTPHandler(func(*http.Request) *mcp.Server { return s },
		&mcp.StreamableHTTPOptions{Stateless: true, JSONResponse: jsonMode})
}

// echoServer is a go-sdk server whose echo tool answers its text.
func echoServer() *mcp.Server {
	s := mcp.NewServer(&mcp.Implementation{Name: "load", Version: "1"}, nil)
	mcp.AddTool(s, &mcp.Tool{Name: "echo"}, func(ctx context.Context, req *mcp.CallToolRequest, in struct {
		Text string `json:"text"`
	}) (*mcp.CallToolResult, any, error) {
		return &mcp.CallToolResult{Content: []mcp.Content{&mcp.TextContent{Text: in.Text}}}, nil, nil
	})
	return s
}

// medianOf returns the median of v.
func medianOf(v []float64) float64 {
	v = slices.Clone(v)
	slices.Sort(v)
	return v[len(v)/2]
}

// serveSidecar serves sc on a loopback port and returns its MCP URL.
func serveSidecar(sc *httpx.Sidecar) (string, func(), error) {
	handler, err := sc.Handler()
	if err != nil {
		return "", nil, err
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return "", nil, err
	}
	fs := &fasthttp.Server{Handler: handler, CloseOnShutdown: true, IdleTimeout: time.Second}
	go fs.Serve(httpx.Listener(ln))
	return "http://" + ln.Addr().String() + "/mcp", func() { sc.Cleanup("done"); fs.Shutdown() }, nil
}

func listen(h http.Handler) (*http.Server, string, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, "", err
	}
	srv := &http.Server{Handler: h}
	go srv.Serve(ln)
	return srv, "http://" + ln.Addr().String() + "/mcp", nil
}

type result struct {
	rps      float64
	p50, p99 time.Duration
	errors   int
	ratio    float64 // to direct, in a median
}

// drive runs n tools/call round trips against url from conc workers.
// The load: a tools/call of the echo tool, as a 2025-06-18 client without a
// session sends it or, with -modern, as a 2026-07-28 client does.
var (
	modernLoad bool
	loadBody   = []byte(`{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"echo","arguments":{"text":"hello, load"}}}`)
	modernBody = []byte(`{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"echo","arguments":{"text":"hello, load"},` +
		`"_meta":{"io.modelcontextprotocol/protocolVersion":"2026-07-28","io.modelcontextprotocol/clientCapabilities":{}}}}`)
)

func drive(url string, conc, n int) result { return driveWith(url, conc, n, nil) }

// driveWith is drive with each worker's headers made by open (a session
// opened for it, say), if not nil.
func driveWith(url string, conc, n int, open func(*http.Client) (http.Header, error)) result {
	client := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: conc, MaxConnsPerHost: conc}}
	body := loadBody
	if modernLoad {
		body = modernBody
	}
	lat := make([]time.Duration, 0, n)
	var next sync.Mutex // guards i, lat and failed
	i, failed := 0, 0
	var wg sync.WaitGroup
	start := time.Now()
	for range conc {
		wg.Add(1)
		go func() {
			defer wg.Done()
			hdr := http.Header{}
			if open != nil {
				var err error
				if hdr, err = open(client); err != nil {
					next.Lock()
					failed++
					next.Unlock()
					fmt.Fprintln(os.Stderr, "opening a session:", err)
					return
				}
			}
			for {
				next.Lock()
				k := i
				i++
				next.Unlock()
				if k >= n {
					return
				}
				t0 := time.Now()
				err := roundTrip(client, url, body, hdr)
				d := time.Since(t0)
				next.Lock()
				if err != nil {
					failed++
					if failed == 1 {
						fmt.Fprintln(os.Stderr, "round trip:", err)
					}
				} else {
					lat = append(lat, d)
				}
				next.Unlock()
			}
		}()
	}
	wg.Wait()
	elapsed := time.Since(start)
	slices.Sort(lat)
	ok := len(lat)
	if ok == 0 {
		return result{errors: failed}
	}
	return result{rps: float64(ok) / elapsed.Seconds(), p50: lat[ok/2], p99: lat[ok*99/100], errors: failed}
}

func roundTrip(c *http.Client, url string, body []byte, hdr http.Header) error {
	req, _ := http.NewRequest("POST", url, bytes.NewReader(body))
	for k, v := range hdr {
		req.Header[k] = v
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Accept", "application/json, text/event-stream")
	if modernLoad {
		req.Header.Set("MCP-Protocol-Version", "2026-07-28")
		req.Header.Set("Mcp-Method", "tools/call")
		req.Header.Set("Mcp-Name", "echo")
	} else {
		req.Header.Set("MCP-Protocol-Version", "2025-06-18")
	}
	resp, err := c.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		return err
	}
	if resp.StatusCode != 200 || !bytes.Contains(b, []byte("hello, load")) {
		return fmt.Errorf("status %d: %.200s", resp.StatusCode, b)
	}
	return nil
}
