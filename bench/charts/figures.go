package main

import (
	"errors"
	"io"
	"math"
	"slices"
	"strings"
)

// errNoRows is returned for an input that holds none of the rows a chart
// draws.
var errNoRows = errors.New("no rows of the expected table")

// procsRows returns httpload -procs' rows by body and concurrency: each
// target's requests per second and its CPU per call. Repeated runs of the
// same case (several runs saved one after the other) are kept in order.
func procsRows(r io.Reader) (cases []string, by map[string]map[string][][2]float64, err error) {
	rs, err := rows(r, 7, "json", "sse")
	if err != nil {
		return nil, nil, err
	}
	by = map[string]map[string][][2]float64{}
	for _, f := range rs {
		c := strings.ToUpper(f[0]) + ", " + clients(f[2])
		if by[c] == nil {
			by[c] = map[string][][2]float64{}
			cases = append(cases, c)
		}
		by[c][f[1]] = append(by[c][f[1]], [2]float64{num(f[3]), num(f[4])})
	}
	if len(cases) == 0 {
		return nil, nil, errNoRows
	}
	return cases, by, nil
}

// median returns the median of the i-th figure of runs (0 if none).
func median(runs [][2]float64, i int) float64 {
	if len(runs) == 0 {
		return 0
	}
	v := make([]float64, len(runs))
	for k, r := range runs {
		v[k] = r[i]
	}
	slices.Sort(v)
	return v[len(v)/2]
}

// proxies are the targets of httpload -procs drawn against each other,
// the floor first.
var proxies = []string{"fastproxy", "sidecar", "reverseproxy"}

// perCase returns a series per proxy of f's figure for each case.
func perCase(cases []string, f func(c, proxy string) float64) []series {
	ss := make([]series, len(proxies))
	for i, n := range proxies {
		ss[i].name = n
		for _, c := range cases {
			ss[i].values = append(ss[i].values, f(c, n))
		}
	}
	return ss
}

// sidecarCPU: the proxies' CPU per call, the floor's 1.2x marked.
func sidecarCPU(r io.Reader) (string, error) {
	cases, by, err := procsRows(r)
	if err != nil {
		return "", err
	}
	cpu := func(c, n string) float64 { return median(by[c][n], 1) }
	var marks []float64
	for _, c := range cases {
		marks = append(marks, 1.2*cpu(c, "fastproxy"))
	}
	return barChart("Proxy CPU per call (µs), httpload -procs -modern", "µs per call", cases, perCase(cases, cpu), marks, "target: 1.2x fastproxy"), nil
}

// sidecarThroughput: each proxy's throughput against direct's, the
// target (0.95x the floor's) marked.
func sidecarThroughput(r io.Reader) (string, error) {
	cases, by, err := procsRows(r)
	if err != nil {
		return "", err
	}
	ratio := func(c, n string) float64 {
		if d := median(by[c]["direct"], 0); d > 0 {
			return median(by[c][n], 0) / d
		}
		return 0
	}
	var marks []float64
	for _, c := range cases {
		marks = append(marks, 0.95*ratio(c, "fastproxy"))
	}
	return barChart("Throughput against direct, httpload -procs -modern", "x direct's req/s", cases, perCase(cases, ratio), marks, "target: 0.95x fastproxy's"), nil
}

// wrapperRelay: the wrapper's throughput against the bare relay's, per
// response size, with one request at a time and 64 in flight, the
// targets marked.
func wrapperRelay(r io.Reader) (string, error) {
	rs, err := rows(r, 2)
	if err != nil {
		return "", err
	}
	window := ""
	vals := map[string]map[string][]float64{} // window -> size -> proxy's ratios
	var sizes []string
	for _, f := range rs {
		if f[0] == "window" {
			window = f[1]
			continue
		}
		if len(f) < 8 || f[1] != "proxy" || window == "" {
			continue
		}
		if vals[window] == nil {
			vals[window] = map[string][]float64{}
		}
		if !slices.Contains(sizes, f[0]) {
			sizes = append(sizes, f[0])
		}
		vals[window][f[0]] = append(vals[window][f[0]], num(f[4]))
	}
	if len(sizes) == 0 {
		return "", errNoRows
	}
	targets := map[string]float64{"256B": 0.8, "4KiB": 0.9, "1MiB": 1.0}
	var ss []series
	for _, w := range []string{"1", "64"} {
		if vals[w] == nil {
			continue
		}
		s := series{name: w + " in flight"}
		for _, size := range sizes {
			s.values = append(s.values, median1(vals[w][size]))
		}
		ss = append(ss, s)
	}
	var marks []float64
	for _, size := range sizes {
		marks = append(marks, targets[size])
	}
	return barChart("The wrapper against the bare byte relay, bench/relay", "x the bare relay's pairs/s", sizes, ss, marks, "target (64 in flight)"), nil
}

// median1 returns the median of v (0 if empty).
func median1(v []float64) float64 {
	if len(v) == 0 {
		return 0
	}
	v = slices.Clone(v)
	slices.Sort(v)
	return v[len(v)/2]
}

// idleMemory: the sidecar's memory per idle stream against the number of
// streams, for each binary the runs name (lines "label: N idle event
// streams ... X KiB per stream"; without a label, "sidecar").
func idleMemory(r io.Reader) (string, error) {
	rs, err := rows(r, 6)
	if err != nil {
		return "", err
	}
	points := map[string]map[float64][]float64{}
	var labels []string
	for _, f := range rs {
		label := "sidecar"
		if strings.HasSuffix(f[0], ":") {
			label, f = strings.TrimSuffix(f[0], ":"), f[1:]
		}
		if len(f) < 4 || f[1] != "idle" || f[len(f)-3] != "KiB" {
			continue
		}
		if points[label] == nil {
			points[label] = map[float64][]float64{}
			labels = append(labels, label)
		}
		n := num(f[0])
		points[label][n] = append(points[label][n], num(f[len(f)-4]))
	}
	if len(labels) == 0 {
		return "", errNoRows
	}
	var lines []line
	for _, l := range labels {
		var xs []float64
		for x := range points[l] {
			xs = append(xs, x)
		}
		slices.Sort(xs)
		ln := line{name: l}
		for _, x := range xs {
			ln.points = append(ln.points, [2]float64{x, median1(points[l][x])})
		}
		lines = append(lines, ln)
	}
	return lineChart("Resident memory per idle event stream, httpload -idle", "streams", "KiB per stream", lines, 16, "target: 16 KiB"), nil
}

// peersChart: requests per second of each front, per concurrency.
func peersChart(r io.Reader) (string, error) {
	rs, err := rows(r, 10, "mcp-cancel-proxy", "mcp-proxy", "supergateway")
	if err != nil {
		return "", err
	}
	var groups, names []string
	vals := map[string]map[string]float64{}
	for _, f := range rs {
		g := clients(f[1])
		if !slices.Contains(groups, g) {
			groups = append(groups, g)
		}
		if !slices.Contains(names, f[0]) {
			names = append(names, f[0])
		}
		if vals[f[0]] == nil {
			vals[f[0]] = map[string]float64{}
		}
		vals[f[0]][g] = num(f[2])
	}
	if len(groups) == 0 {
		return "", errNoRows
	}
	var ss []series
	for _, n := range names {
		s := series{name: n}
		for _, g := range groups {
			s.values = append(s.values, vals[n][g])
		}
		ss = append(ss, s)
	}
	return barChart("A stdio server over HTTP, httpload -peers", "tools/call req/s", groups, ss, nil, ""), nil
}

// clients names a concurrency.
func clients(n string) string {
	if n == "1" {
		return "1 client"
	}
	return n + " clients"
}

// cancelRows are bench/cancel's rows at one concurrency, by transport and
// front: its whitespace fields (a spread p50/p99/max is one field).
func cancelRows(r io.Reader, conc string) (transports []string, by map[string]map[string][]string, err error) {
	rs, err := rows(r, 21)
	if err != nil {
		return nil, nil, err
	}
	by = map[string]map[string][]string{}
	for _, f := range rs {
		if f[2] != conc || f[6] != "|" {
			continue
		}
		if by[f[0]] == nil {
			by[f[0]] = map[string][]string{}
			transports = append(transports, f[0])
		}
		by[f[0]][f[1]] = f
	}
	if len(transports) == 0 {
		return nil, nil, errNoRows
	}
	return transports, by, nil
}

// p50 is the first figure of a spread, "168/574/856" (NaN for "-":
// nothing measured).
func p50(spread string) float64 {
	if spread == "-" {
		return math.NaN()
	}
	v, _, _ := strings.Cut(spread, "/")
	return num(v)
}

// cancelForward: with one call at a time, the time to forward a cancel
// straight to the server, through the proxy, and beside it a plain
// notification of the same size through the proxy, per transport.
func cancelForward(r io.Reader) (string, error) {
	transports, by, err := cancelRows(r, "1")
	if err != nil {
		return "", err
	}
	ss := []series{{name: "direct: the cancel"}, {name: "proxy: a plain notification"}, {name: "proxy: the cancel"}}
	var groups []string
	for _, tr := range transports {
		proxy, ok := by[tr]["proxy"]
		if !ok || by[tr]["direct"] == nil { // the grace's row: the same forward as without it
			continue
		}
		groups = append(groups, tr)
		ss[0].values = append(ss[0].values, p50(field(by[tr]["direct"], 7)))
		ss[1].values = append(ss[1].values, p50(proxy[9]))
		ss[2].values = append(ss[2].values, p50(proxy[7]))
	}
	if len(groups) == 0 {
		return "", errNoRows
	}
	return barChart("Time to forward a cancel, p50, one call at a time (bench/cancel)", "µs", groups, ss, nil, ""), nil
}

// cancelPeers: the same with the peers, for the transports they serve.
func cancelPeers(r io.Reader) (string, error) {
	transports, by, err := cancelRows(r, "1")
	if err != nil {
		return "", err
	}
	fronts := []string{"direct", "proxy", "supergateway", "mcp-proxy", "mcp-remote"}
	var groups []string
	var ss []series
	for _, f := range fronts {
		ss = append(ss, series{name: f})
	}
	for _, tr := range transports {
		if len(by[tr]) < 3 { // no peer beside direct and the proxy
			continue
		}
		groups = append(groups, tr)
		for i, f := range fronts {
			v := math.NaN() // not run on this transport
			if row, ok := by[tr][f]; ok {
				v = p50(row[7]) / 1000
				if row[7] == "-" { // no cancel forwarded
					v = -1
				}
			}
			ss[i].values = append(ss[i].values, v)
		}
	}
	if len(groups) == 0 {
		return "", errNoRows
	}
	return barChart("Time to forward a cancel beside the peers, p50, one call at a time", "ms", groups, ss, nil, ""), nil
}

// field is f[i], or "-" when the row is missing.
func field(f []string, i int) string {
	if i >= len(f) {
		return "-"
	}
	return f[i]
}
