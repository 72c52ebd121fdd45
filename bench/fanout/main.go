// Command fanout measures how long a client that starts several tool calls
// at once waits for a Streamable HTTP server to have started them all,
// through the bridge (mcp-cancel-proxy --upstream URL, a stdio client to an
// HTTP server) and directly, side by side in one run. The server is the
// go-sdk's, whose calls send no headers until they are done: the case in
// which the bridge once held each POST until the one before it had its
// headers, or 100 ms.
//
//	go build -o /tmp/fanout ./bench/fanout && go build -o /tmp/mcp-cancel-proxy ./cmd/mcp-cancel-proxy
//	/tmp/fanout -proxy /tmp/mcp-cancel-proxy -calls 8 -rounds 5
package main

import (
	"context"
	"flag"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"slices"
	"sync"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"
)

func main() {
	proxyBin := flag.String("proxy", "", "the mcp-cancel-proxy binary (required)")
	calls := flag.Int("calls", 8, "tool calls started at once")
	rounds := flag.Int("rounds", 5, "rounds per chain (the median is reported)")
	flag.Parse()
	if *proxyBin == "" {
		fmt.Fprintln(os.Stderr, "fanout: -proxy is required")
		os.Exit(2)
	}
	if err := run(*proxyBin, *calls, *rounds); err != nil {
		fmt.Fprintln(os.Stderr, "fanout:", err)
		os.Exit(1)
	}
}

// holder is the server's tool: each call says it started, then waits for
// the round's release.
type holder struct {
	started chan struct{}
	mu      sync.Mutex
	release chan struct{}
}

func (h *holder) hold(ctx context.Context, _ *mcp.CallToolRequest, _ struct{}) (*mcp.CallToolResult, any, error) {
	h.mu.Lock()
	release := h.release
	h.mu.Unlock()
	h.started <- struct{}{}
	select {
	case <-release:
	case <-ctx.Done():
	}
	return &mcp.CallToolResult{}, nil, nil
}

func run(proxyBin string, calls, rounds int) error {
	h := &holder{started: make(chan struct{}, calls)}
	srv := mcp.NewServer(&mcp.Implementation{Name: "fanout", Version: "1"}, nil)
	mcp.AddTool(srv, &mcp.Tool{Name: "hold"}, h.hold)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return err
	}
	hs := &http.Server{Handler: mcp.NewStreamableHTTPHandler(func(*http.Request) *mcp.Server { return srv }, nil)}
	go hs.Serve(ln)
	defer hs.Close()
	url := "http://" + ln.Addr().String() + "/mcp"
	chains := []struct {
		name string
		tr   func() mcp.Transport
	}{
		{"direct", func() mcp.Transport { return &mcp.StreamableClientTransport{Endpoint: url} }},
		{"bridge", func() mcp.Transport {
			return &mcp.CommandTransport{Command: exec.Command(proxyBin, "--upstream", url, "--log-level", "error")}
		}},
	}
	fmt.Printf("%d calls started at once, time until the server has started all of them (median of %d)\n", calls, rounds)
	for _, c := range chains {
		var took []time.Duration
		for range rounds {
			d, err := fanOut(c.tr(), h, calls)
			if err != nil {
				return fmt.Errorf("%s: %w", c.name, err)
			}
			took = append(took, d)
		}
		slices.Sort(took)
		fmt.Printf("%-7s %8.1f ms   (all: %v)\n", c.name, float64(took[len(took)/2].Microseconds())/1000, took)
	}
	return nil
}

// fanOut connects over tr, starts calls tool calls at once, and returns how
// long the server took to have started them all.
func fanOut(tr mcp.Transport, h *holder, calls int) (time.Duration, error) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	cs, err := mcp.NewClient(&mcp.Implementation{Name: "fanout", Version: "1"}, nil).Connect(ctx, tr, nil)
	if err != nil {
		return 0, err
	}
	defer cs.Close()
	h.mu.Lock()
	h.release = make(chan struct{})
	release := h.release
	h.mu.Unlock()
	var wg sync.WaitGroup
	errs := make(chan error, calls)
	start := time.Now()
	for range calls {
		wg.Go(func() {
			if _, err := cs.CallTool(ctx, &mcp.CallToolParams{Name: "hold"}); err != nil {
				errs <- err
			}
		})
	}
	for range calls {
		select {
		case <-h.started:
		case err := <-errs:
			return 0, err
		case <-ctx.Done():
			return 0, ctx.Err()
		}
	}
	took := time.Since(start)
	close(release)
	wg.Wait()
	return took, nil
}
