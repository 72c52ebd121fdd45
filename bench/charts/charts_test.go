package main

import (
	"encoding/xml"
	"errors"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// Samples of each driver's output, as it prints it.
var samples = map[string]string{
	"procs.txt": `body  target         conc      req/s   proxy µs CPU upstream µs CPU  errors
json  direct            1       1300              -             300       0
json  sidecar           1       1000            168             310       0
json  reverseproxy      1        950            300             305       0
json  fastproxy         1       1150            105             300       0
json  direct           16       2800              -             280       0
json  sidecar          16       2000            136             290       0
json  reverseproxy     16       1800            330             285       0
json  fastproxy        16       2366             80             280       0
`,
	"relay.txt": `window 1 (requests in flight)
response  chain       pairs/s         MB/s  vs bare relay   peak RSS    CPU µs/pair µs/round trip
256B      direct         8000          2.0          1.20x      10.0M            1.0        120.0
256B      bare           7000          1.8          1.00x      10.0M            1.0        124.0
256B      proxy          6000          1.5          0.84x      12.0M            9.0        148.0
window 64 (requests in flight)
response  chain       pairs/s         MB/s  vs bare relay   peak RSS    CPU µs/pair µs/round trip
256B      bare         300000         76.8          1.00x      10.0M            0.8          0.0
256B      proxy        135000         34.6          0.45x      12.0M            3.9          0.0
4KiB      bare         100000        400.0          1.00x      10.0M            4.4          0.0
4KiB      proxy         60000        240.0          0.60x      12.0M           12.2          0.0
`,
	"idle.txt": `before: 2000 idle event streams through the sidecar: RSS 21192 KiB -> 80872 KiB, 29.8 KiB per stream
before: 9900 idle event streams through the sidecar: RSS 19476 KiB -> 300804 KiB, 28.4 KiB per stream
after: 2000 idle event streams through the sidecar: RSS 21748 KiB -> 57272 KiB, 17.8 KiB per stream
after: 2000 idle event streams through the sidecar: RSS 21748 KiB -> 57272 KiB, 18.9 KiB per stream
after: 9900 idle event streams through the sidecar: RSS 21988 KiB -> 186484 KiB, 16.6 KiB per stream
`,
	"cancel.txt": `transport           front         conc  calls  cncls  fwded |   forward p50/p99/max |      note p50/p99/max | ratio |    accept p50/p99/max |      free p50/p99/max | unfreed  raced failures errors
wrapper             direct           1   1000    559    559 |           48/246/3913 |           48/244/2407 |  1.00 |                     - |                     - |      -     18     1074      0
wrapper             proxy            1   1000    621    586 |           168/574/856 |           96/314/2421 |  1.75 |             85/240/714 |                     - |      -     28        0      0
wrapper             proxy           16   1000    849    785 |         447/3840/4814 |         452/4006/4657 |  0.99 |         119/2170/3247 |                     - |      -    146        0      0
legacy-front        direct           1   1000    538    538 |           49/3456/4886 |           50/1112/4069 |  0.96 |                     - |                     - |      -     11     1058      0
legacy-front        proxy            1   1000    582    549 |          453/4994/9462 |          318/4986/8500 |  1.42 |          213/4171/7013 |                     - |      -     33        0      0
legacy-front        supergateway     1    799    405    405 |      1360/11253/42930 |      2486/23826/54453 |  0.55 |                     - |                     - |      -      9     792*      0
legacy-front        mcp-proxy        1     10      5      0 |                     - |                     - |     - |                     - |                     - |      -      0       0*      0
`,
	"peers.txt": `front             conc      req/s     p50 µs     p99 µs   front µs servers µs  driver µs  proxy vs it  errors
mcp-cancel-proxy     1       1471        560       3213        278        315        230        1.00x       0
mcp-proxy            1        503       1598       7943       1378        540        341        2.78x       0
supergateway         1        555       1380       7728       1376        523        338        2.37x       0
`,
}

// TestChartsFromDriversOutput: each chart is drawn from its driver's
// output, as well-formed SVG holding the figures it was given (medians of
// repeated runs, ratios against the baseline of the same run).
func TestChartsFromDriversOutput(t *testing.T) {
	in, out := t.TempDir(), t.TempDir()
	for name, s := range samples {
		if err := os.WriteFile(filepath.Join(in, name), []byte(s), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	if err := draw(in, out); err != nil {
		t.Fatal(err)
	}
	want := map[string][]string{
		"sidecar-cpu.svg":        {"sidecar: 168", "fastproxy: 80", "reverseproxy: 330"},
		"sidecar-throughput.svg": {"sidecar: 0.77", "sidecar: 0.71", "reverseproxy: 0.64"},
		"wrapper-relay.svg":      {"1 in flight: 0.84", "64 in flight: 0.45", "64 in flight: 0.6"},
		"idle-memory.svg":        {"before: 28.4 at 9900", "after: 18.9 at 2000", "after: 16.6 at 9900"},
		"peers.svg":              {"mcp-proxy: 503", "mcp-cancel-proxy: 1471"},
		"cancel-forward.svg":     {"direct: the cancel: 48", "proxy: the cancel: 168", "proxy: a plain notification: 96", "proxy: the cancel: 453"},
		"cancel-peers.svg":       {"supergateway: 1.36", "proxy: 0.45"},
	}
	for file, figures := range want {
		b, err := os.ReadFile(filepath.Join(out, file))
		if err != nil {
			t.Fatal(err)
		}
		if err := wellFormed(string(b)); err != nil {
			t.Errorf("%s: %v", file, err)
		}
		for _, f := range figures {
			if !strings.Contains(string(b), "<title>"+f+"</title>") {
				t.Errorf("%s lacks %q", file, f)
			}
		}
	}
}

// TestCancelPeersSayNone: a peer that forwarded no cancel gets the word
// "none" where its bar would be, not a bar of 0; a peer not run on a
// transport gets nothing there.
func TestCancelPeersSayNone(t *testing.T) {
	svg, err := cancelPeers(strings.NewReader(samples["cancel.txt"]))
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(svg, ">none</text>") || strings.Contains(svg, "<title>mcp-proxy:") || strings.Contains(svg, "<title>mcp-remote:") {
		t.Errorf("mcp-proxy (no cancel forwarded) and mcp-remote (not run) drawn as:\n%s", svg)
	}
}

// TestChartsSayWhatIsMissing: an input without its table is an error; a
// missing input is skipped.
func TestChartsSayWhatIsMissing(t *testing.T) {
	for _, c := range charts {
		if _, err := c.make(strings.NewReader("nothing here\n")); !errors.Is(err, errNoRows) {
			t.Errorf("%s from no table: %v, want errNoRows", c.output, err)
		}
	}
	if err := draw(t.TempDir(), t.TempDir()); err != nil {
		t.Fatalf("no inputs: %v", err)
	}
}

// FuzzCharts: no input makes a chart panic or write broken SVG.
func FuzzCharts(f *testing.F) {
	for _, s := range samples {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		for _, c := range charts {
			if svg, err := c.make(strings.NewReader(s)); err == nil {
				if err := wellFormed(svg); err != nil {
					t.Fatalf("%s: %v", c.output, err)
				}
			}
		}
	})
}

// wellFormed reports whether s parses as XML, to its end.
func wellFormed(s string) error {
	d := xml.NewDecoder(strings.NewReader(s))
	for {
		if _, err := d.Token(); err == io.EOF {
			return nil
		} else if err != nil {
			return err
		}
	}
}
