// Command charts draws the figures of docs/performance.md as SVG, from the
// load drivers' output saved under bench/results (scripts/charts runs the
// drivers and then this): the sidecar's CPU per call and throughput against
// the parse-free fasthttp proxy, per concurrency (httpload -procs); the
// wrapper against the bare byte relay, per frame size (relay); memory per
// idle stream against the number of streams (httpload -idle); and the
// stdio server over HTTP against mcp-proxy and supergateway (httpload
// -peers); and how fast a cancel is forwarded, per transport, beside a
// plain notification and beside the peers (bench/cancel). It needs no
// network and no library beyond Go's.
//
//	go run ./bench/charts                  # bench/results/*.txt -> docs/charts/*.svg
package main

import (
	"bufio"
	"flag"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strconv"
	"strings"
)

func main() {
	in := flag.String("in", "bench/results", "the directory of the drivers' saved output")
	out := flag.String("out", "docs/charts", "the directory to write the charts to")
	flag.Parse()
	if err := draw(*in, *out); err != nil {
		fmt.Fprintln(os.Stderr, "charts:", err)
		os.Exit(1)
	}
}

// chart is one figure: a file name and how to make it from its input.
type chart struct {
	input, output string
	make          func(io.Reader) (string, error)
}

var charts = []chart{
	{"procs.txt", "sidecar-cpu.svg", sidecarCPU},
	{"procs.txt", "sidecar-throughput.svg", sidecarThroughput},
	{"relay.txt", "wrapper-relay.svg", wrapperRelay},
	{"idle.txt", "idle-memory.svg", idleMemory},
	{"peers.txt", "peers.svg", peersChart},
	{"cancel.txt", "cancel-forward.svg", cancelForward},
	{"cancel.txt", "cancel-peers.svg", cancelPeers},
}

// draw writes every chart whose input is saved; a missing input is said
// and skipped.
func draw(in, out string) error {
	if err := os.MkdirAll(out, 0o755); err != nil {
		return err
	}
	for _, c := range charts {
		f, err := os.Open(filepath.Join(in, c.input))
		if os.IsNotExist(err) {
			fmt.Fprintf(os.Stderr, "charts: no %s: %s not drawn\n", c.input, c.output)
			continue
		}
		if err != nil {
			return err
		}
		svg, err := c.make(f)
		f.Close()
		if err != nil {
			return fmt.Errorf("%s: %w", c.input, err)
		}
		if err := os.WriteFile(filepath.Join(out, c.output), []byte(svg), 0o644); err != nil {
			return err
		}
		fmt.Println("wrote", filepath.Join(out, c.output))
	}
	return nil
}

// rows returns the whitespace-separated fields of each line of r that
// has at least min fields and whose first field is one of first (any, if
// first is empty).
func rows(r io.Reader, min int, first ...string) ([][]string, error) {
	var out [][]string
	sc := bufio.NewScanner(r)
	for sc.Scan() {
		f := strings.Fields(sc.Text())
		if len(f) < min {
			continue
		}
		for _, want := range first {
			if f[0] == want {
				out = append(out, f)
				break
			}
		}
		if len(first) == 0 {
			out = append(out, f)
		}
	}
	return out, sc.Err()
}

// num parses a figure of a table ("1.23x", "140.5M" and "-" included).
func num(s string) float64 {
	v, err := strconv.ParseFloat(strings.TrimRight(s, "xM"), 64)
	if err != nil {
		return 0
	}
	return v
}
